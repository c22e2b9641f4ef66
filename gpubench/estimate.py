"""How long a training would take: epoch-2 figures scaled by epochs and data set size.

The arithmetic, and what it assumes:

- an epoch's time (training and validation) is linear in the number of images: a
  run that timed `run_images` training images an epoch takes epoch2 * images /
  run_images for `images`;
- epoch 1 costs what epoch 2 does plus a start-up (building, compiling, the first
  steps' set-up, caching the data) paid once: epoch1 - epoch2, not scaled;
- every later epoch costs what epoch 2 did (no thermal drift, no checkpoints, no
  early stopping).

So `epochs` epochs take (epoch1 - epoch2) + epochs * epoch2 * images / run_images.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable
from dataclasses import dataclass

from gpubench import stored_runs
from gpubench.stored_runs import Setup
from gpubench.v1 import run_pb2


def training_seconds(epoch1_s: float, epoch2_s: float, run_images: int, epochs: int,
                     images: int) -> float:
    """Seconds to train `epochs` epochs of `images` training images, from one run's
    epoch 1 and epoch 2 wall times at `run_images` images an epoch.

    Epoch 1's extra start-up (epoch1_s - epoch2_s) counts once and is not scaled;
    an epoch1_s of 0 (not recorded) or below epoch 2 counts none."""
    if epoch2_s <= 0 or run_images <= 0 or epochs <= 0 or images <= 0:
        raise ValueError("epoch 2, the run's images, epochs and images must be positive")
    startup = max(0.0, epoch1_s - epoch2_s)
    return startup + epochs * epoch2_s * images / run_images


@dataclass(frozen=True)
class RunEstimate:
    """One run's figures and what they predict."""

    run_id: str
    epoch1_s: float  # 0: not recorded
    epoch2_s: float
    run_images: int  # training images an epoch in the run
    batch_per_gpu: int
    seconds: float  # the predicted training time


@dataclass(frozen=True)
class GroupEstimate:
    """The prediction of one group of like runs: their range and middle."""

    setup: Setup
    runs: tuple[RunEstimate, ...]

    @property
    def seconds(self) -> list[float]:
        """Each run's prediction, shortest first."""
        return sorted(r.seconds for r in self.runs)

    @property
    def min_s(self) -> float:
        """The shortest prediction."""
        return self.seconds[0]

    @property
    def median_s(self) -> float:
        """The median prediction."""
        return statistics.median(self.seconds)

    @property
    def max_s(self) -> float:
        """The longest prediction."""
        return self.seconds[-1]

    @property
    def batches(self) -> list[int]:
        """The per-GPU batches the runs trained at."""
        return sorted({r.batch_per_gpu for r in self.runs})


def run_estimate(run: run_pb2.Run, epochs: int, images: int) -> RunEstimate:
    """One run's prediction for `epochs` epochs of `images` training images."""
    epoch2 = run.result.epoch2_seconds
    epoch1 = stored_runs.epoch_seconds(run, 1)
    run_images = run.config.train_images
    return RunEstimate(
        run_id=run.run_id, epoch1_s=epoch1, epoch2_s=epoch2, run_images=run_images,
        batch_per_gpu=run.config.batch_per_gpu,
        seconds=training_seconds(epoch1, epoch2, run_images, epochs, images),
    )


def estimate(runs: Iterable[run_pb2.Run], epochs: int, images: int) -> list[GroupEstimate]:
    """Predictions per group of like runs (stored_runs.Setup); runs without a
    training-set size are left out (nothing to scale from)."""
    usable = [run for run in runs if run.config.train_images > 0]
    return [
        GroupEstimate(setup, tuple(run_estimate(run, epochs, images) for run in members))
        for setup, members in stored_runs.grouped(usable).items()
    ]
