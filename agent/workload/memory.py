"""Peak GPU memory per GPU from the framework's own allocator.

TensorFlow: get_memory_info / reset_memory_stats (memory growth is on, see
backend.import_keras); torch: max_memory_allocated / reset_peak_memory_stats;
JAX: memory_stats()["peak_bytes_in_use"], which cannot be reset. A CPU run has
no GPU allocator: no figures, and a note that says so. NVML's view of the
process comes from the agent, not from here.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gpubench.errors import GpubenchError


@dataclass(frozen=True)
class GpuMemory:
    """One GPU's allocator peak and the memory the framework says the card has."""

    gpu_index: int
    allocator_peak_bytes: int
    memory_total_bytes: int
    reserved_peak_bytes: int = 0  # what the allocator held at its peak (torch), 0 if unknown

    def as_event(self) -> dict[str, int]:
        """The fields of one entry of the `result` event's memory list."""
        return {
            "gpu_index": self.gpu_index,
            "allocator_peak_bytes": self.allocator_peak_bytes,
            "memory_total_bytes": self.memory_total_bytes,
            "reserved_peak_bytes": self.reserved_peak_bytes,
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
                      int(torch.cuda.get_device_properties(i).total_memory),
                      int(torch.cuda.max_memory_reserved(i)))
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


# --- the memory of one batch-size trial ---------------------------------------------

MIB = 1 << 20
# What a card's CUDA context and libraries take before the first allocation, where the
# framework cannot measure it before its allocator is set up (TensorFlow): a card of
# --memory-limit bytes leaves the allocator this much less.
CONTEXT_ALLOWANCE_BYTES = 512 * MIB
# The allocator caps limit_memory set, per torch device: what a trial may use.
_TORCH_ALLOWED: dict[int, int] = {}
# What each torch device had in use when limit_memory first looked.
_TORCH_CONTEXT: dict[int, int] = {}


@dataclass(frozen=True)
class TrialMemory:
    """What one trial used and could have used, in the units the search compares."""

    peak_bytes: int  # allocated peak (address space or resident peak on a CPU)
    reserved_bytes: int  # what the allocator held at its peak (0: not known)
    capacity_bytes: int  # what the trial could use in all (0: not known)


def start_trial(backend: str, gpus: int) -> None:
    """Free what the allocator caches and start new peaks, before a trial's first step."""
    release(backend)
    if gpus == 0:
        _clear_resident_peak()
        return
    reset_peaks(backend, gpus)


def read_trial(backend: str, gpus: int, *, address_space_limit: int | None = None
               ) -> TrialMemory:
    """The trial's peaks and capacity on its one device (GPU 0, or the CPU)."""
    if gpus == 0:
        if address_space_limit:
            return TrialMemory(_proc_status_bytes("VmPeak"), 0, address_space_limit)
        from gpubench.agent.workload.hostmemory import available_memory_bytes

        resident = _proc_status_bytes("VmRSS")
        return TrialMemory(_proc_status_bytes("VmHWM"), 0, resident + available_memory_bytes())
    if backend == "torch":
        import torch

        free, _ = torch.cuda.mem_get_info(0)
        reserved_now = int(torch.cuda.memory_reserved(0))
        capacity = free + reserved_now
        limit = _torch_allowed_bytes(0)
        return TrialMemory(int(torch.cuda.max_memory_allocated(0)),
                           int(torch.cuda.max_memory_reserved(0)),
                           min(capacity, limit) if limit else capacity)
    report = read_peaks(backend, 1)
    gpu = report.gpus[0] if report.gpus else GpuMemory(0, 0, 0)
    return TrialMemory(gpu.allocator_peak_bytes, 0, gpu.memory_total_bytes)


def release(backend: str) -> None:
    """Collect garbage and give the allocator's cached blocks back (torch); a no-op
    where the allocator keeps what it took."""
    import gc

    gc.collect()
    if backend == "torch":
        import torch

        if torch.cuda.is_available():
            torch.cuda.empty_cache()


def limit_memory(backend: str, gpus: int, limit_bytes: int | None) -> list[str]:
    """Make each GPU behave as a card of `limit_bytes` (--memory-limit), or as the whole
    card again for None (torch only); before the framework's first allocation.
    Returns notes for the run's record."""
    if backend == "torch":
        import torch

        notes = []
        for i in range(gpus):
            free, total = torch.cuda.mem_get_info(i)
            # This process's CUDA context (and any other process's memory), read before
            # this process allocated anything and kept for later limits.
            context = _TORCH_CONTEXT.setdefault(i, total - free)
            if limit_bytes is None:
                torch.cuda.set_per_process_memory_fraction(1.0, i)
                _TORCH_ALLOWED.pop(i, None)
                continue
            allowed = limit_bytes - context
            if allowed <= 0:
                raise GpubenchError(f"--memory-limit {limit_bytes} bytes is less than the "
                                    f"{context} bytes in use on GPU {i} before training")
            torch.cuda.set_per_process_memory_fraction(min(1.0, allowed / total), i)
            _TORCH_ALLOWED[i] = allowed
            notes.append(f"--memory-limit: GPU {i}'s allocator may take {allowed} bytes "
                         f"(the limit less {context} bytes in use before training)")
        return notes
    if limit_bytes is None:
        return []
    if backend == "tensorflow":
        import tensorflow as tf

        allowed_mib = (limit_bytes - CONTEXT_ALLOWANCE_BYTES) // MIB
        for gpu in tf.config.list_physical_devices("GPU")[:gpus]:
            tf.config.set_logical_device_configuration(
                gpu, [tf.config.LogicalDeviceConfiguration(memory_limit=allowed_mib)])
        return [f"--memory-limit: TensorFlow may take {allowed_mib} MiB of each GPU (the limit "
                f"less {CONTEXT_ALLOWANCE_BYTES // MIB} MiB for the CUDA context)"]
    raise GpubenchError(f"--memory-limit is not available on {backend}")


def _torch_allowed_bytes(device: int) -> int:
    """The allocator's cap that limit_memory set on `device` (0: none)."""
    return _TORCH_ALLOWED.get(device, 0)


def address_space_peak_bytes() -> int:
    """This process's peak virtual memory (VmPeak): what RLIMIT_AS caps."""
    return _proc_status_bytes("VmPeak")


def _proc_status_bytes(field_name: str) -> int:
    """A size from /proc/self/status (VmPeak, VmHWM, VmRSS), in bytes (0 if unknown)."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith(field_name + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def _clear_resident_peak() -> None:
    """Start VmHWM anew (Linux: writing 5 to clear_refs resets the resident peak)."""
    try:
        with open("/proc/self/clear_refs", "w", encoding="ascii") as clear:
            clear.write("5")
    except OSError:
        pass
