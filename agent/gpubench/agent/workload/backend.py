"""The framework under Keras: choosing it, importing it, asking it about itself.

`select` chooses the framework once per process (before anything imports Keras)
and returns its `frameworks.Framework`, which knows what differs between
TensorFlow, PyTorch and JAX; the functions here are the entry points the run
calls with the backend's name (start-up, versions, device checks, host syncs),
plus what is the same for all three: reading an out-of-memory error. Peak memory
is in `memory`.
"""

from __future__ import annotations

import os
import platform
import sys
from types import ModuleType
from typing import Any

from gpubench.agent.workload import frameworks
from gpubench.agent.workload.frameworks.base import Framework
from gpubench.errors import GpubenchError


def select(backend: str, gpus: int) -> Framework:
    """Point Keras at `backend` and the process at its first `gpus` GPUs (0: CPU only);
    returns the framework."""
    if "keras" in sys.modules:
        raise RuntimeError("Keras was imported before the backend was selected")
    framework = frameworks.get(backend)
    os.environ["KERAS_BACKEND"] = backend
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    # Allocate as the model needs rather than grabbing the card, so the
    # allocator's peak means something under JAX too.
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if gpus == 0:
        os.environ["CUDA_VISIBLE_DEVICES"] = ""
    elif visible is None:
        os.environ["CUDA_VISIBLE_DEVICES"] = ",".join(str(i) for i in range(gpus))
    else:
        listed = [d for d in visible.split(",") if d.strip()]
        os.environ["CUDA_VISIBLE_DEVICES"] = ",".join(listed[:gpus])
    framework.configure_environment(gpus)
    return framework


_configured: list[str] = []  # the backend import_keras configured, once per process


def import_keras(*, memory_growth: bool = True) -> ModuleType:
    """Keras on the selected backend, with the devices configured for measuring.

    The first call configures the devices; later calls only return Keras.
    `memory_growth=False` leaves TensorFlow's GPUs alone for memory.limit_memory,
    which sets a memory limit instead (TensorFlow takes one or the other).
    """
    wanted = os.environ["KERAS_BACKEND"]
    if wanted not in _configured:
        frameworks.get(wanted).configure_devices(memory_growth=memory_growth)
    import keras

    if keras.backend.backend() != wanted:
        raise RuntimeError(f"Keras runs on {keras.backend.backend()}, not {wanted}")
    _configured.append(wanted)
    return keras


def check_gpus(backend: str, wanted: int) -> None:
    """Refuse to run on fewer GPUs than asked for (rather than on the CPU unnoticed)."""
    if wanted == 0:
        return
    found = frameworks.get(backend).gpu_count()
    if found < wanted:
        raise GpubenchError(
            f"--gpus {wanted}: {backend} sees {found} GPU(s) "
            f"(CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', '')!r})"
        )


def versions(backend: str) -> dict[str, str]:
    """Framework, CUDA and cuDNN versions as the framework reports them ('' if unknown)."""
    import keras

    found: dict[str, Any] = {
        "backend": backend,
        "keras_version": keras.__version__,
        "python_version": platform.python_version(),
        "backend_version": "",
        "cuda_runtime_version": "",
        "cudnn_version": "",
    }
    found.update(frameworks.get(backend).versions())
    return {key: str(value) for key, value in found.items()}


def synchronize(backend: str) -> None:
    """Wait until the GPU has finished the work queued so far (no-op where not needed)."""
    frameworks.get(backend).synchronize()
