"""What the `Framework` interface (base.py) returns: GPU memory figures and a batch source.

They live beside the interface, not with their callers (memory.py, pipeline.py),
so that the interface and the frameworks need nothing of the modules that use
them. Importing this module imports no framework.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from gpubench.events import GpuPeak

if TYPE_CHECKING:
    import numpy as np


@dataclass(frozen=True)
class GpuMemory:
    """One GPU's allocator peak and the memory the framework says the card has."""

    gpu_index: int
    allocator_peak_bytes: int
    memory_total_bytes: int
    reserved_peak_bytes: int = 0  # what the allocator held at its peak (torch), 0 if unknown

    def as_event(self) -> GpuPeak:
        """This GPU's entry of the `result` event's memory."""
        return GpuPeak(gpu_index=self.gpu_index, allocator_peak_bytes=self.allocator_peak_bytes,
                       memory_total_bytes=self.memory_total_bytes,
                       reserved_peak_bytes=self.reserved_peak_bytes)


@dataclass(frozen=True)
class MemoryReport:
    """Peaks of every GPU of the run, and what to know about them."""

    gpus: list[GpuMemory]
    notes: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class TrialMemory:
    """What one trial used and could have used, in the units the search compares."""

    peak_bytes: int  # allocated peak (address space or resident peak on a CPU)
    reserved_bytes: int  # what the allocator held at its peak (0: not known)
    capacity_bytes: int  # what the trial could use in all (0: not known)


class Source(Protocol):
    """Where a batch's images and one-hot labels come from (pipeline.py's batches read it)."""

    def order(self, indices: np.ndarray) -> object:
        """An epoch's order of dataset indices, where `batch` wants its slices."""

    def batch(self, indices: object) -> tuple[object, object]:
        """Images and labels of the given slice of an epoch's order."""
