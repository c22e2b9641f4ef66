"""The figures of an epoch, computed from the times its training steps finished.

Pure arithmetic, no framework: the Keras callback in `timing` collects the
timestamps, this module turns them into training images/s, the median step
time and its coefficient of variation, and the warnings that go with them.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field

# Steps at the start of each epoch left out of the rates: the first step after
# validation re-warms caches (and in epoch 1 it includes graph building).
WARMUP_STEPS = 1
# Above this coefficient of variation of the step times a figure is flagged as unstable.
CV_WARNING = 0.10
# Fewer timed steps than this and the step statistics are flagged as thin.
MIN_TIMED_STEPS = 3


@dataclass(frozen=True)
class StepStats:
    """Training speed of one epoch, from the steps after warm-up."""

    images_per_second: float
    step_time_median_seconds: float
    step_time_cv: float
    timed_steps: int
    warnings: list[str] = field(default_factory=list)


def step_stats(
    epoch_start: float,
    step_ends: Sequence[float],
    step_images: Sequence[int],
    *,
    warmup_steps: int = WARMUP_STEPS,
    label: str = "",
) -> StepStats:
    """Images/s, median step time and CV from when each step of an epoch finished.

    A step's time is from the end of the step before it (the epoch's start for
    the first) to its own end, so data loading between steps counts. Images/s
    covers every step after warm-up, the short last batch included with its true
    size; the median and CV cover the full-sized ones (a short last step would
    read as noise).
    """
    if len(step_ends) != len(step_images):
        raise ValueError("one image count per step is needed")
    if not step_ends:
        return StepStats(0.0, 0.0, 0.0, 0, [f"{label}no training step finished"])
    warnings: list[str] = []
    skip = warmup_steps if len(step_ends) > warmup_steps else 0
    if skip < warmup_steps:
        warnings.append(f"{label}only {len(step_ends)} step(s): timed without leaving out "
                        "warm-up, figures are rough")
    bounds = [epoch_start, *step_ends]
    durations = [bounds[k + 1] - bounds[k] for k in range(len(step_ends))]
    timed = range(skip, len(step_ends))
    elapsed = bounds[-1] - bounds[skip]
    images = sum(step_images[k] for k in timed)
    full = [durations[k] for k in timed if step_images[k] == max(step_images)] or [
        durations[k] for k in timed
    ]
    median = statistics.median(full)
    mean = statistics.fmean(full)
    cv = statistics.pstdev(full) / mean if len(full) > 1 and mean > 0 else 0.0
    if skip and len(timed) < MIN_TIMED_STEPS:
        warnings.append(f"{label}only {len(timed)} step(s) timed after warm-up: figures are rough")
    if cv > CV_WARNING:
        warnings.append(
            f"{label}step times vary by {cv:.0%} (coefficient of variation over "
            f"{CV_WARNING:.0%}): the speed figure is not stable; run it again with "
            "nothing else busy on this GPU or host (`nvidia-smi`, `top` show what is), or "
            "with more steps an epoch to time"
        )
    return StepStats(images / elapsed if elapsed > 0 else 0.0, median, cv, len(timed), warnings)
