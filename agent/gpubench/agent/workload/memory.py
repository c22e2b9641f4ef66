"""Peak GPU memory per GPU from the framework's own allocator, and a batch trial's memory.

The framework reads its allocator (frameworks: TensorFlow's get_memory_info, torch's
max_memory_allocated, JAX's memory_stats, which cannot be reset); the functions
here are the entry points the run calls with the backend's name. A CPU run has no
GPU allocator: no figures, and a note that says so; a CPU trial reads this
process's figures from /proc. NVML's view of the process comes from the agent,
not from here.
"""

from __future__ import annotations

from gpubench.agent.workload import frameworks
from gpubench.agent.workload.frameworks.types import MemoryReport, TrialMemory


def reset_peaks(backend: str, gpus: int) -> None:
    """Start a new peak on each GPU (before the measured epoch)."""
    if gpus == 0:
        return
    frameworks.get(backend).reset_peaks(gpus)


def read_peaks(backend: str, gpus: int) -> MemoryReport:
    """The allocator peak of each GPU since the last reset."""
    if gpus == 0:
        return MemoryReport([], ["CPU run: there is no GPU allocator peak to report"])
    return frameworks.get(backend).read_peaks(gpus)


# --- the memory of one batch-size trial ---------------------------------------------

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
    return frameworks.get(backend).read_trial()


def release(backend: str) -> None:
    """Collect garbage and give the allocator's cached blocks back (torch); a no-op
    where the allocator keeps what it took."""
    import gc

    gc.collect()
    frameworks.get(backend).release()


def limit_memory(backend: str, gpus: int, limit_bytes: int | None) -> list[str]:
    """Make each GPU behave as a card of `limit_bytes` (--memory-limit), or as the whole
    card again for None (torch only); before the framework's first allocation.
    Returns notes for the record."""
    return frameworks.get(backend).limit_memory(gpus, limit_bytes)


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
