"""The framework under Keras: choosing it, importing it, asking it about itself.

The one place that knows what differs between TensorFlow, PyTorch and JAX for
start-up, versions, device checks, out-of-memory errors and host syncs (peak
memory is in `memory`). `select` must run before anything imports Keras.
"""

from __future__ import annotations

import os
import platform
import sys
from types import ModuleType
from typing import Any

from gpubench.errors import GpubenchError

# Text that the three frameworks (and the C++ allocators under them) put in an
# out-of-memory error; class names are checked too.
_OOM_CLASSES = {"ResourceExhaustedError", "OutOfMemoryError", "MemoryError"}
_OOM_TEXT = (
    "out of memory",
    "resource_exhausted",
    "resource exhausted",
    "oom when allocating",
    "can't allocate memory",
    "failed to allocate",
    "std::bad_alloc",
    "not enough memory",
    # oneDNN (torch's CPU convolutions) reports a failed allocation this way.
    "could not create a primitive",
)


def select(backend: str, gpus: int) -> None:
    """Point Keras at `backend` and the process at its first `gpus` GPUs (0: CPU only)."""
    if "keras" in sys.modules:
        raise RuntimeError("Keras was imported before the backend was selected")
    os.environ["KERAS_BACKEND"] = backend
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    # Allocate as the model needs rather than grabbing the card, so the
    # allocator's peak means something under JAX too.
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if gpus == 0:
        os.environ["CUDA_VISIBLE_DEVICES"] = ""
        if backend == "jax":
            os.environ["JAX_PLATFORMS"] = "cpu"
    elif visible is None:
        os.environ["CUDA_VISIBLE_DEVICES"] = ",".join(str(i) for i in range(gpus))
    else:
        listed = [d for d in visible.split(",") if d.strip()]
        os.environ["CUDA_VISIBLE_DEVICES"] = ",".join(listed[:gpus])


_configured: list[str] = []  # the backend import_keras configured, once per process


def import_keras(*, memory_growth: bool = True) -> ModuleType:
    """Keras on the selected backend, with the devices configured for measuring.

    The first call configures the devices; later calls only return Keras.
    `memory_growth=False` leaves TensorFlow's GPUs alone for memory.limit_memory,
    which sets a memory limit instead (TensorFlow takes one or the other).
    """
    wanted = os.environ["KERAS_BACKEND"]
    if wanted == "tensorflow" and memory_growth and wanted not in _configured:
        # Memory growth must be set before TensorFlow touches a GPU: without it
        # TensorFlow takes nearly the whole card and the peak means nothing.
        import tensorflow as tf

        for gpu in tf.config.list_physical_devices("GPU"):
            tf.config.experimental.set_memory_growth(gpu, True)
    import keras

    if keras.backend.backend() != wanted:
        raise RuntimeError(f"Keras runs on {keras.backend.backend()}, not {wanted}")
    _configured.append(wanted)
    return keras


def gpu_count(backend: str) -> int:
    """GPUs the framework sees in this process."""
    if backend == "tensorflow":
        import tensorflow as tf

        return len(tf.config.list_physical_devices("GPU"))
    if backend == "torch":
        import torch

        return torch.cuda.device_count()
    import jax

    return sum(1 for d in jax.devices() if d.platform == "gpu")


def check_gpus(backend: str, wanted: int) -> None:
    """Refuse to run on fewer GPUs than asked for (rather than on the CPU unnoticed)."""
    if wanted == 0:
        return
    found = gpu_count(backend)
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
    if backend == "tensorflow":
        import tensorflow as tf

        info = tf.sysconfig.get_build_info()
        found.update(backend_version=tf.__version__,
                     cuda_runtime_version=info.get("cuda_version", ""),
                     cudnn_version=info.get("cudnn_version", ""))
    elif backend == "torch":
        import torch

        cudnn = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
        found.update(backend_version=torch.__version__,
                     cuda_runtime_version=torch.version.cuda or "",
                     cudnn_version=_cudnn_version(cudnn) if cudnn else "")
    else:
        import jax

        found["backend_version"] = jax.__version__
        try:  # a private module: absent on CPU-only builds and free to move
            from jax._src.lib import cuda_versions

            if cuda_versions is not None:
                found["cuda_runtime_version"] = _cuda_version(
                    cuda_versions.cuda_runtime_get_version())
                found["cudnn_version"] = _cudnn_version(cuda_versions.cudnn_get_version())
        except (ImportError, AttributeError, RuntimeError):
            pass
    return {key: str(value) for key, value in found.items()}


def _cuda_version(number: int) -> str:
    """CUDA's integer version (1000 * major + 10 * minor, e.g. 12040) as '12.4'."""
    return f"{number // 1000}.{number % 1000 // 10}"


def _cudnn_version(number: int) -> str:
    """cuDNN's integer version as 'major.minor.patch' (90100 -> 9.1.0, 8902 -> 8.9.2)."""
    major_unit = 10000 if number >= 10000 else 1000  # cuDNN 9 widened the major field
    return f"{number // major_unit}.{number % major_unit // 100}.{number % 100}"


def is_out_of_memory(error: BaseException) -> bool:
    """Whether `error` (or one it came from) is any backend's out-of-memory error."""
    return out_of_memory_message(error) is not None


def out_of_memory_message(error: BaseException) -> str | None:
    """The line that says memory ran out, from `error` or the errors it came from; else None.

    Keras wraps a layer's failure ("Exception encountered when calling Pad.call()")
    with the allocator's message further down, so the chain and every line are read.
    """
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        lines = str(current).strip().splitlines() or [""]
        for line in lines:
            if any(marker in line.lower() for marker in _OOM_TEXT):
                return f"{type(current).__name__}: {line.strip()}"
        if type(current).__name__ in _OOM_CLASSES:
            return f"{type(current).__name__}: {lines[0].strip()}"
        current = current.__cause__ or current.__context__
    return None


def error_line(error: BaseException) -> str:
    """The line of an error that says what went wrong, after its type: the
    out-of-memory line if any, else the message's first line."""
    found = out_of_memory_message(error)
    if found:
        return found
    text = str(error).strip() or type(error).__name__
    return f"{type(error).__name__}: {text.splitlines()[0]}"


def synchronize(backend: str) -> None:
    """Wait until the GPU has finished the work queued so far (no-op where not needed)."""
    if backend == "torch":
        import torch

        if torch.cuda.is_available():
            torch.cuda.synchronize()
    elif backend == "jax":
        import jax

        for device in jax.local_devices():
            if hasattr(device, "synchronize_all_activity"):
                device.synchronize_all_activity()
