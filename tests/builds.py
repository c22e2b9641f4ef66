"""What this environment's torch is built for, read from its distribution's version.

The development machines install a CPU build of torch (`2.13.0+cpu`); PyPI's torch on
Linux is a CUDA build (its version has no `+cpu`), and that is what `make test` installs
on a machine with PyPI alone. Tests of how the agent meets CPU builds run where the
build is one, and say why they are skipped elsewhere.
"""

from __future__ import annotations

import importlib.metadata

import pytest

TORCH_VERSION = importlib.metadata.version("torch")

cpu_torch_only = pytest.mark.skipif(
    not TORCH_VERSION.endswith("+cpu"),
    reason=f"about a CPU build of torch; this one is {TORCH_VERSION}, PyPI's CUDA build "
           "(a CPU build: pip install torch --index-url https://download.pytorch.org/whl/cpu)")
