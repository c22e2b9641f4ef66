"""Would a card of a given memory train the model, and at about what batch?

From stored runs, most direct first:

1. "searched": a run whose batch search ran at or near that memory (a card of that
   size, or `--memory-limit`) found its largest batch: that batch is the answer;
2. "line": a run whose search tried two or more batch sizes gives a line of peak
   memory against batch (gpubench.memory_line, the agent's own); the answer is the
   largest batch whose predicted peak leaves HEADROOM of the card free, as the agent
   would predict it on that card;
3. "bound": a run with one peak at one batch (a published one) bounds the memory per
   image by peak / batch (the fixed part is not negative), so the largest batch within
   the budget at that rate is sure to fit by that run's figures: a floor, not a guess.

Peak memory depends on the framework, precision and settings, little on the card:
a line measured on a large card predicts a small one, with the card's own driver
context and allocator left to HEADROOM.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable
from dataclasses import dataclass

from gpubench import stored_runs
from gpubench.memory_line import HEADROOM, MemoryLine
from gpubench.stored_runs import Setup
from gpubench.v1 import run_pb2

# A run searched "near" the asked memory when its capacity is within this share of it.
NEAR_SHARE = 0.1
SEARCHED, LINE, BOUND = "searched", "line", "bound"


@dataclass(frozen=True)
class TrialPoint:
    """A stored batch trial as a point of the memory line."""

    batch: int
    fits: bool
    measured_bytes: int  # reserved at the peak where known, else the allocator's peak


def trial_points(run: run_pb2.Run) -> list[TrialPoint]:
    """The run's batch trials as memory points, as the agent measured them."""
    return [TrialPoint(t.batch, t.fits, t.reserved_peak_bytes or t.peak_memory_bytes)
            for t in run.result.batch_trials]


def capacity_bytes(run: run_pb2.Run) -> int:
    """The memory the run's search had: its --memory-limit, else its smallest card's."""
    if run.config.memory_limit_bytes:
        return run.config.memory_limit_bytes
    return min((g.memory_total_bytes for g in run.gpus), default=0)


def run_peak(run: run_pb2.Run) -> int:
    """The run's own peak (the allocator's, largest of its GPUs), 0 if not recorded."""
    return max((m.allocator_peak_bytes for m in run.result.memory), default=0)


def budget_bytes(memory_bytes: int) -> float:
    """What a card of `memory_bytes` leaves a batch: all but HEADROOM."""
    return memory_bytes * (1 - HEADROOM)


@dataclass(frozen=True)
class RunFit:
    """What one run says of the asked memory."""

    run_id: str
    setup: Setup
    capacity_bytes: int
    basis: str  # SEARCHED, LINE or BOUND
    batch: int  # the largest batch (0: none fits); for BOUND a floor
    line: MemoryLine | None = None  # LINE: the fitted line
    trial_batches: tuple[int, ...] = ()  # the batch sizes that fit in the trials
    peak_bytes: int = 0  # BOUND: the run's peak at its batch
    peak_batch: int = 0  # BOUND: that batch
    capped: bool = False  # SEARCHED: the training set, not memory, bounded the search

    @property
    def extrapolated(self) -> bool:
        """LINE: the answer lies outside the batches the trials measured."""
        return bool(self.trial_batches) and not (
            min(self.trial_batches) <= self.batch <= max(self.trial_batches))


def fit_run(run: run_pb2.Run, memory_bytes: int) -> RunFit | None:
    """What `run` says of a card of `memory_bytes`, or None when it says nothing."""
    setup = stored_runs.setup_of(run)
    capacity = capacity_bytes(run)
    largest = run.result.largest_batch_per_gpu
    if largest and capacity and abs(capacity - memory_bytes) <= NEAR_SHARE * memory_bytes:
        return RunFit(run.run_id, setup, capacity, SEARCHED, largest,
                      capped=run.result.largest_batch_capped)
    points = trial_points(run)
    line = MemoryLine.fit(points)
    if line is not None:
        fitting = tuple(sorted({p.batch for p in points if p.fits and p.measured_bytes}))
        return RunFit(run.run_id, setup, capacity, LINE, line.largest(budget_bytes(memory_bytes)),
                      line=line, trial_batches=fitting)
    peak, batch = run_peak(run), run.config.batch_per_gpu
    if peak and batch:
        floor = int(budget_bytes(memory_bytes) * batch // peak)
        return RunFit(run.run_id, setup, capacity, BOUND, floor, peak_bytes=peak,
                      peak_batch=batch)
    return None


@dataclass(frozen=True)
class Answer:
    """The answer of a set of runs (measured ones, or published ones)."""

    fits: tuple[RunFit, ...]  # every run that said something, most direct basis first
    basis: str  # the basis the answer rests on ("" when no run said anything)

    @property
    def deciding(self) -> list[RunFit]:
        """The runs the answer rests on: those of its basis."""
        return [f for f in self.fits if f.basis == self.basis]

    @property
    def batches(self) -> list[int]:
        """The deciding runs' batches, smallest first."""
        return sorted(f.batch for f in self.deciding)

    @property
    def batch(self) -> int:
        """The median batch of the deciding runs (rounded down), 0 when none fits."""
        return int(statistics.median(self.batches)) if self.batches else 0

    @property
    def confidence(self) -> str:
        """'high' (searched at that memory, runs agree), 'fair' (a line within its
        trials' batches, or searched runs that disagree), 'rough' (a line outside
        them) or 'floor' (only a bound: it fits at least at that batch)."""
        if self.basis == SEARCHED:
            return "high" if len(set(self.batches)) == 1 else "fair"
        if self.basis == LINE:
            return "rough" if any(f.extrapolated for f in self.deciding) else "fair"
        return "floor" if self.basis == BOUND else ""


def memory_setup(setup: Setup) -> str:
    """What a run's peak memory depends on, as a label: 'torch float32
    kernels+cuda-graphs, 600 px' (not the card, the batch rule or the data). Of the
    comparison key (the setup's) only these: a batch takes the same memory whatever
    the pipeline, the weights, the data or the epochs, so those runs answer as one."""
    return f"{setup.backend} {setup.precision} {setup.settings}, {setup.image_size} px"


def answers(runs: Iterable[run_pb2.Run], memory_bytes: int) -> dict[str, Answer]:
    """One answer per memory_setup of the runs: runs computed differently hold
    different memory and are never answered as one."""
    groups: dict[str, list[run_pb2.Run]] = {}
    for run in runs:
        groups.setdefault(memory_setup(stored_runs.setup_of(run)), []).append(run)
    return {label: answer(members, memory_bytes) for label, members in sorted(groups.items())}


def answer(runs: Iterable[run_pb2.Run], memory_bytes: int) -> Answer:
    """What `runs` say of a card of `memory_bytes`: the most direct basis any run has."""
    fits = [f for f in (fit_run(run, memory_bytes) for run in runs) if f is not None]
    order = {SEARCHED: 0, LINE: 1, BOUND: 2}
    fits.sort(key=lambda f: (order[f.basis], f.setup, f.run_id))
    return Answer(tuple(fits), fits[0].basis if fits else "")
