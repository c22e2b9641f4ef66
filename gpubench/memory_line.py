"""Peak GPU memory against the batch: the line the agent's batch search fits to its
trials, and that `gpubench fit` fits to stored runs' trials.

Peak memory grows close to linearly with the batch: weights, gradients and the
optimizer's state are fixed, activations are per image. Arithmetic only: no framework,
no record types (anything with `batch`, `fits` and `measured_bytes` is a point).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol

# The share of the card a prediction leaves free. It covers what a trial does not
# hold: validation, the epoch's short last batch, fragmentation over an epoch, the
# prefetched batches, CUDA graphs' pools. On an H200 the real runs held 9.2-10.9% more
# than their trial at the same batch (docs/results/h200-default-run.md).
HEADROOM = 0.12


class MemoryPoint(Protocol):
    """One batch tried: whether it fit, and the memory held against the capacity."""

    @property
    def batch(self) -> int: ...

    @property
    def fits(self) -> bool: ...

    @property
    def measured_bytes(self) -> int: ...


@dataclass(frozen=True)
class MemoryLine:
    """Peak memory as fixed bytes plus bytes per image, fitted to trials that fit."""

    fixed_bytes: float
    per_image_bytes: float

    @classmethod
    def fit(cls, trials: Iterable[MemoryPoint]) -> MemoryLine | None:
        """The least-squares line through the fitting trials' figures, or None when
        fewer than two batch sizes were measured or memory did not grow with the batch."""
        points: dict[int, int] = {}
        for trial in trials:
            if trial.fits and trial.measured_bytes > 0:
                points[trial.batch] = max(points.get(trial.batch, 0), trial.measured_bytes)
        if len(points) < 2:
            return None
        xs, ys = list(points), list(points.values())
        mean_x, mean_y = sum(xs) / len(xs), sum(ys) / len(ys)
        spread = sum((x - mean_x) ** 2 for x in xs)
        slope = sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys, strict=True)) / spread
        if slope <= 0:
            return None
        return cls(mean_y - slope * mean_x, slope)

    def peak(self, batch: int) -> float:
        """The predicted peak at `batch`."""
        return self.fixed_bytes + self.per_image_bytes * batch

    def largest(self, budget_bytes: float) -> int:
        """The largest batch whose predicted peak is within `budget_bytes` (0 if none)."""
        return max(0, int((budget_bytes - self.fixed_bytes) // self.per_image_bytes))
