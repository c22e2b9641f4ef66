"""JAX under Keras: memory_stats, DataParallel, device syncs, the compilation cache.

Peak memory: memory_stats()["peak_bytes_in_use"], which cannot be reset (the
record says so). No --memory-limit. Several GPUs: keras.distribution.DataParallel
over the first N GPUs. The XLA programs a run compiles are kept in JAX's persistent
compilation cache, in the agent's cache folder, and counted (compilation_cache).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import Any

from gpubench.agent.workload import compilation_cache
from gpubench.agent.workload.frameworks.base import (
    Framework,
    cuda_version_text,
    cudnn_version_text,
)
from gpubench.agent.workload.frameworks.types import GpuMemory, MemoryReport
from gpubench.settings import MATH_FLOAT32, MATH_TF32, math_mode_name

# JAX's names of the math modes (jax_default_matmul_precision).
_JAX_PRECISION = {MATH_TF32: "tensorfloat32", MATH_FLOAT32: "float32"}


class Jax(Framework):
    """Keras on JAX."""

    name = "jax"

    def __init__(self) -> None:
        self._programs: compilation_cache.ProgramLog | None = None

    def configure_environment(self, gpus: int) -> None:
        """The CPU alone for a CPU run; JAX's persistent compilation cache in the
        agent's cache folder (a person's own JAX_COMPILATION_CACHE_DIR wins)."""
        from gpubench.agent.workload.synthetic import cache_root

        if gpus == 0:
            os.environ["JAX_PLATFORMS"] = "cpu"
        os.environ.update(compilation_cache.environment(cache_root(), os.environ))

    def configure_devices(self, *, memory_growth: bool) -> None:
        """Count the XLA programs from here on: JAX has compiled none yet."""
        import jax.monitoring

        if self._programs is None:
            self._programs = compilation_cache.ProgramLog(_cache_on)
            jax.monitoring.register_event_listener(self._programs.on_event)
            jax.monitoring.register_event_duration_secs_listener(self._programs.on_duration)

    def program_log(self) -> compilation_cache.ProgramLog | None:
        return self._programs

    def gpu_count(self) -> int:
        import jax

        return sum(1 for d in jax.devices() if d.platform == "gpu")

    def versions(self) -> dict[str, str]:
        import jax

        found = {"backend_version": jax.__version__, "cuda_runtime_version": "",
                 "cudnn_version": ""}
        try:  # a private module: absent on CPU-only builds and free to move
            from jax._src.lib import cuda_versions

            if cuda_versions is not None:
                found["cuda_runtime_version"] = cuda_version_text(
                    cuda_versions.cuda_runtime_get_version())
                found["cudnn_version"] = cudnn_version_text(cuda_versions.cudnn_get_version())
        except (ImportError, AttributeError, RuntimeError):
            pass
        return found

    def set_math_mode(self, mode: str) -> None:
        """jax_default_matmul_precision, which XLA applies to convolutions too."""
        import jax

        jax.config.update("jax_default_matmul_precision", _JAX_PRECISION[mode])

    def math_mode(self) -> str:
        import jax

        # Unset (None), JAX lets XLA use TF32 for float32 on a GPU that has it.
        tf32 = jax.config.jax_default_matmul_precision not in ("float32", "highest")
        return math_mode_name(tf32, tf32)

    def synchronize(self) -> None:
        import jax

        for device in jax.local_devices():
            if hasattr(device, "synchronize_all_activity"):
                device.synchronize_all_activity()

    def reset_peaks(self, gpus: int) -> None:
        """JAX keeps one peak for the life of the process; read_peaks says so."""

    def read_peaks(self, gpus: int) -> MemoryReport:
        import jax

        devices = [d for d in jax.local_devices() if d.platform == "gpu"][:gpus]
        found = []
        for i, device in enumerate(devices):
            stats = device.memory_stats() or {}
            found.append(GpuMemory(i, int(stats.get("peak_bytes_in_use", 0)),
                                   int(stats.get("bytes_limit", 0))))
        return MemoryReport(found, [
            "JAX cannot reset its peak: it covers the whole run, not only the measured epoch",
            "memory_total_bytes is JAX's allocator limit on the card",
        ])

    def allow_compiling(self, network: Any) -> list[str]:
        """The protocol's RandomRotation and RandomZoom declare that they cannot be
        compiled (`supports_jit = False`, whatever the backend), and one such layer keeps
        Keras from compiling the whole model: it then runs every operation from Python,
        each compiled on its own, and the GPU mostly waits (docs/results/h200-jax.md).
        On JAX both compute with jax.numpy, jax.scipy.ndimage.map_coordinates and Keras's
        seeded random numbers, which compile: they are marked so."""
        import keras

        from gpubench.agent.workload.augment import all_layers

        compilable = (keras.layers.RandomRotation, keras.layers.RandomZoom)
        changed = []
        for layer in all_layers(network):
            if isinstance(layer, compilable) and not layer.supports_jit:
                layer.supports_jit = True
                changed.append(layer.name)
        return changed

    @contextlib.contextmanager
    def data_parallel(self, gpus: int) -> Iterator[None]:
        import keras

        devices = keras.distribution.list_devices("gpu")[:gpus]
        keras.distribution.set_distribution(keras.distribution.DataParallel(devices=devices))
        yield


def _cache_on() -> bool:
    """Whether JAX's persistent compilation cache is on (a folder, and not turned off)."""
    import jax

    return bool(jax.config.jax_enable_compilation_cache and jax.config.jax_compilation_cache_dir)
