"""The project's name on PyPI and its versions: of the code, the record and the protocol.

`gpubench` is a namespace package in three parts, each in a folder of its own (the
shared `gpubench/`, `agent/gpubench/agent/` and `collector/gpubench/collector/`), so that
Python, type checkers and editors find every module at its file from the repository
root; a namespace package holds no code of its own, so these constants live here.
"""

from __future__ import annotations

VERSION = "0.1.0"

# The name pip knows the project by (pyproject.toml's project.name): PyPI's "gpubench"
# is another project. Installed, `pip install 'gpubench-keras[EXTRA]'` adds an extra's
# dependencies to this copy.
DISTRIBUTION = "gpubench-keras"

# The revision of protos/gpubench/v1/run.proto this code writes. Bump it when a
# field's meaning changes; the collector reads every version up to its own.
SCHEMA_VERSION = 2

# The benchmark protocol's version: runs of different versions are not compared
# unless the user asks. Bump it when anything that changes the figures changes.
BENCHMARK_VERSION = "1"

__all__ = ["BENCHMARK_VERSION", "DISTRIBUTION", "SCHEMA_VERSION", "VERSION"]
