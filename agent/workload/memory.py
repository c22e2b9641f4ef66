"""Peak GPU memory per GPU from the framework's own allocator.

TensorFlow: get_memory_info / reset_memory_stats (memory growth is on, see
backend.import_keras); torch: max_memory_allocated / reset_peak_memory_stats;
JAX: memory_stats()["peak_bytes_in_use"], which cannot be reset. A CPU run has
no GPU allocator: no figures, and a note that says so. NVML's view of the
process comes from the agent, not from here.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class GpuMemory:
    """One GPU's allocator peak and the memory the framework says the card has."""

    gpu_index: int
    allocator_peak_bytes: int
    memory_total_bytes: int

    def as_event(self) -> dict[str, int]:
        """The fields of one entry of the `result` event's memory list."""
        return {
            "gpu_index": self.gpu_index,
            "allocator_peak_bytes": self.allocator_peak_bytes,
            "memory_total_bytes": self.memory_total_bytes,
        }


@dataclass(frozen=True)
class MemoryReport:
    """Peaks of every GPU of the run, and what to know about them."""

    gpus: list[GpuMemory]
    notes: list[str] = field(default_factory=list)


def reset_peaks(backend: str, gpus: int) -> None:
    """Start a new peak on each GPU (before the measured epoch)."""
    if gpus == 0:
        return
    if backend == "tensorflow":
        import tensorflow as tf

        for i in range(gpus):
            tf.config.experimental.reset_memory_stats(f"GPU:{i}")
    elif backend == "torch":
        import torch

        for i in range(gpus):
            torch.cuda.reset_peak_memory_stats(i)
    # JAX keeps one peak for the life of the process; read_peaks says so.


def read_peaks(backend: str, gpus: int) -> MemoryReport:
    """The allocator peak of each GPU since the last reset."""
    if gpus == 0:
        return MemoryReport([], ["CPU run: there is no GPU allocator peak to report"])
    if backend == "tensorflow":
        return _tensorflow(gpus)
    if backend == "torch":
        import torch

        return MemoryReport([
            GpuMemory(i, int(torch.cuda.max_memory_allocated(i)),
                      int(torch.cuda.get_device_properties(i).total_memory))
            for i in range(gpus)
        ])
    return _jax(gpus)


def _tensorflow(gpus: int) -> MemoryReport:
    import tensorflow as tf

    try:  # the usable memory per GPU; TensorFlow's public API has no card total
        from tensorflow.python.client import device_lib

        limits = [d.memory_limit for d in device_lib.list_local_devices() if d.device_type == "GPU"]
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


def _jax(gpus: int) -> MemoryReport:
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
