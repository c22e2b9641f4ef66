"""TensorFlow under Keras: memory growth, get_memory_info, MirroredStrategy.

Peak memory: get_memory_info / reset_memory_stats, with memory growth on (set
before TensorFlow touches a GPU, else it takes nearly the whole card and the
peak means nothing). --memory-limit: one logical device of the limit's size per
GPU, which TensorFlow takes instead of memory growth. Several GPUs:
MirroredStrategy with HierarchicalCopyAllReduce, as the protocol.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from gpubench.agent.workload.frameworks.base import Framework
from gpubench.agent.workload.frameworks.types import GpuMemory, MemoryReport
from gpubench.settings import MATH_TF32, math_mode_name

MIB = 1 << 20
# What a card's CUDA context and libraries take before the first allocation, where the
# framework cannot measure it before its allocator is set up (TensorFlow): a card of
# --memory-limit bytes leaves the allocator this much less.
CONTEXT_ALLOWANCE_BYTES = 512 * MIB


class TensorFlow(Framework):
    """Keras on TensorFlow (the protocol's framework)."""

    name = "tensorflow"

    def configure_devices(self, *, memory_growth: bool) -> None:
        if not memory_growth:
            return
        import tensorflow as tf

        for gpu in tf.config.list_physical_devices("GPU"):
            tf.config.experimental.set_memory_growth(gpu, True)

    def set_math_mode(self, mode: str) -> None:
        """TensorFlow's TF32 switch, one for convolutions and matrix products."""
        import tensorflow as tf

        tf.config.experimental.enable_tensor_float_32_execution(mode == MATH_TF32)

    def math_mode(self) -> str:
        import tensorflow as tf

        tf32 = bool(tf.config.experimental.tensor_float_32_execution_enabled())
        return math_mode_name(tf32, tf32)

    def gpu_count(self) -> int:
        import tensorflow as tf

        return len(tf.config.list_physical_devices("GPU"))

    def versions(self) -> dict[str, str]:
        import tensorflow as tf

        info = tf.sysconfig.get_build_info()
        return {"backend_version": tf.__version__,
                "cuda_runtime_version": info.get("cuda_version", ""),
                "cudnn_version": info.get("cudnn_version", "")}

    def reset_peaks(self, gpus: int) -> None:
        import tensorflow as tf

        for i in range(gpus):
            tf.config.experimental.reset_memory_stats(f"GPU:{i}")

    def read_peaks(self, gpus: int) -> MemoryReport:
        import tensorflow as tf

        try:  # the usable memory per GPU; TensorFlow's public API has no card total
            from tensorflow.python.client import device_lib

            limits = [d.memory_limit for d in device_lib.list_local_devices()
                      if d.device_type == "GPU"]
            notes = ["memory_total_bytes is the memory TensorFlow may use on the card"]
        except (ImportError, AttributeError):
            limits, notes = [], ["TensorFlow did not report the card's memory"]
        return MemoryReport(
            [
                GpuMemory(i, int(tf.config.experimental.get_memory_info(f"GPU:{i}")["peak"]),
                          int(limits[i]) if i < len(limits) else 0)
                for i in range(gpus)
            ],
            notes,
        )

    def limit_memory(self, gpus: int, limit_bytes: int | None) -> list[str]:
        if limit_bytes is None:
            return []
        import tensorflow as tf

        allowed_mib = (limit_bytes - CONTEXT_ALLOWANCE_BYTES) // MIB
        for gpu in tf.config.list_physical_devices("GPU")[:gpus]:
            tf.config.set_logical_device_configuration(
                gpu, [tf.config.LogicalDeviceConfiguration(memory_limit=allowed_mib)])
        return [f"--memory-limit: TensorFlow may take {allowed_mib} MiB of each GPU (the limit "
                f"less {CONTEXT_ALLOWANCE_BYTES // MIB} MiB for the CUDA context)"]

    @contextlib.contextmanager
    def data_parallel(self, gpus: int) -> Iterator[None]:
        import tensorflow as tf

        strategy = tf.distribute.MirroredStrategy(
            devices=[f"/gpu:{i}" for i in range(gpus)],
            cross_device_ops=tf.distribute.HierarchicalCopyAllReduce(),
        )
        with strategy.scope():
            yield
