"""The run's two batch answers: the largest batch that fits, and the batch the speed run uses.

Peak memory grows close to linearly with the batch (gpubench.memory_line, shared
with `gpubench fit`). The search probes two small batches, fits that line,
predicts the largest batch that leaves HEADROOM of the card free, and confirms
the prediction with one trial at the real run's shapes (a full step, the epoch's
short last step, validation). A failed confirm steps down, then bisects; a trial
budget and a time budget bound it all. On a large card that is three trials.

How a trial is made (in this process with the network built once, or a fresh
process per trial) is `trials`' business; this module is arithmetic only and
imports no framework.

The speed run does not use the largest batch: with 1709 training images the
largest batch is one or two steps an epoch on a large card, which times start-up
more than training. `speed_batch` is the rule written in docs/protocol.md: the
largest power of two that fits and leaves at least MIN_STEPS full training steps
an epoch.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from gpubench import models
from gpubench.errors import GpubenchError
from gpubench.events import BatchTrial, SearchSummary
from gpubench.memory_line import HEADROOM, MemoryLine
from gpubench.settings import (
    DEFAULT_MAX_TRIALS,
    DEFAULT_SEARCH_BUDGET,
    EXIT_OUT_OF_MEMORY,
    RULE_STEPS,
)

# The two probes of each model: small enough for an 8 GB card (the article's GTX 1070
# ran 60 / 16 / 1), far enough apart for the line's slope.
PROBES = {"B0": (16, 64), "B3": (8, 32), "B7": (2, 8)}
# Any other model's: a language model of GPT-2 small's shape fits 2 to 4 sequences in
# 8 GB, a ViT-B/16 about 50 images.
OTHER_PROBES = {models.LM: (1, 4)}
DEFAULT_PROBES = (4, 16)


def probes_of(model: str) -> tuple[int, int]:
    """The search's two probes for `model`."""
    return PROBES.get(model) or OTHER_PROBES.get(model) or DEFAULT_PROBES
# After a failed confirm, the next candidate is this share of the failed batch (then
# bisection): the line is usually close, so a small step down usually fits.
STEP_DOWN = 0.875
# Bisection stops once the gap between "fits" and "does not" is 1/GAP_SHARE of the batch.
GAP_SHARE = 8
# The speed rule: at least this many full training steps an epoch.
MIN_STEPS = 8

# Trial kinds, as the record names them.
PROBE, CONFIRM, RUN = "probe", "confirm", "run"


@dataclass(frozen=True)
class Trial:
    """One batch size tried."""

    batch: int
    fits: bool
    peak_memory_bytes: int = 0  # the allocator's allocated peak (address space on a CPU)
    reserved_peak_bytes: int = 0  # what the allocator held at its peak (0: not known)
    capacity_bytes: int = 0  # what the trial could use in all (0: not known)
    seconds: float = 0.0
    step_seconds: float = 0.0  # median training step after the first (0: not timed)
    message: str = ""
    kind: str = PROBE

    @property
    def measured_bytes(self) -> int:
        """The figure held against the capacity: reserved where known, else the peak."""
        return self.reserved_peak_bytes or self.peak_memory_bytes

    def as_event(self) -> BatchTrial:
        """The batch_trial event that tells this trial."""
        return BatchTrial(
            batch=self.batch, fits=self.fits, trial_kind=self.kind,
            peak_memory_bytes=self.peak_memory_bytes,
            reserved_peak_bytes=self.reserved_peak_bytes, capacity_bytes=self.capacity_bytes,
            seconds=round(self.seconds, 3), step_seconds=round(self.step_seconds, 6),
            message=self.message,
        )

    @classmethod
    def from_event(cls, event: BatchTrial) -> Trial:
        """A trial from the batch_trial event another process told it in."""
        return cls(
            batch=event.batch, fits=event.fits, peak_memory_bytes=event.peak_memory_bytes,
            reserved_peak_bytes=event.reserved_peak_bytes, capacity_bytes=event.capacity_bytes,
            seconds=event.seconds, step_seconds=event.step_seconds, message=event.message,
            kind=event.trial_kind,
        )


@dataclass(frozen=True)
class SearchResult:
    """What the search found, and every trial made to find it."""

    largest: int  # the largest batch a trial confirmed
    capped: bool  # the training set, not memory, bounded it
    trials: tuple[Trial, ...]
    line: MemoryLine | None
    capacity_bytes: int
    seconds: float
    stopped_by: str = ""  # "", "trials" or "time": what ended the search early

    @property
    def confirmed(self) -> list[int]:
        """Every batch a trial confirmed, largest first."""
        return sorted({t.batch for t in self.trials if t.fits}, reverse=True)

    def summary(self) -> SearchSummary:
        """What the batch_chosen and search_done events say of the search."""
        line = self.line
        return SearchSummary(
            largest=self.largest,
            capped=self.capped,
            search_seconds=round(self.seconds, 3),
            capacity_bytes=self.capacity_bytes,
            fixed_bytes=int(line.fixed_bytes) if line else 0,
            per_image_bytes=int(line.per_image_bytes) if line else 0,
            stopped_by=self.stopped_by,
        )

    @classmethod
    def from_summary(cls, summary: SearchSummary, trials: list[Trial]) -> SearchResult:
        """The search another process made: its summary and its trials."""
        return cls(
            largest=summary.largest,
            capped=summary.capped,
            trials=tuple(trials),
            line=MemoryLine.fit(trials),
            capacity_bytes=summary.capacity_bytes,
            seconds=summary.search_seconds,
            stopped_by=summary.stopped_by,
        )


class NoBatchFits(GpubenchError):
    """Even batch 1 ran out of memory."""

    exit_code = EXIT_OUT_OF_MEMORY


class TrialFailed(GpubenchError):
    """A trial failed for a reason other than memory: the search cannot go on."""


TryBatch = Callable[[int, str], Trial]


@dataclass
class _Search:
    """The search's state: what fit, what did not, what is left of the budgets."""

    try_batch: TryBatch
    largest_useful: int
    max_trials: int
    budget_seconds: float
    on_trial: Callable[[Trial], None]
    clock: Callable[[], float]
    started: float = 0.0
    trials: list[Trial] = field(default_factory=list)
    fits_up_to: int = 0
    fails_from: int | None = None
    capacity: int = 0
    stopped_by: str = ""

    def attempt(self, batch: int, kind: str) -> Trial:
        trial = self.try_batch(batch, kind)
        self.trials.append(trial)
        self.on_trial(trial)
        if trial.capacity_bytes:
            self.capacity = min(self.capacity or trial.capacity_bytes, trial.capacity_bytes)
        if trial.fits:
            self.fits_up_to = max(self.fits_up_to, batch)
        elif self.fails_from is None or batch < self.fails_from:
            self.fails_from = batch
        return trial

    def budget_left(self) -> bool:
        """Whether another trial may start; says which budget ran out if not."""
        if len(self.trials) >= self.max_trials:
            self.stopped_by = "trials"
        elif self.clock() - self.started >= self.budget_seconds:
            self.stopped_by = "time"
        return not self.stopped_by

    def close_enough(self) -> bool:
        return self.fails_from is not None and (
            self.fails_from - self.fits_up_to <= max(1, self.fits_up_to // GAP_SHARE))

    def result(self) -> SearchResult:
        if self.fits_up_to == 0:
            smallest = min(t.batch for t in self.trials)
            raise NoBatchFits(
                f"even batch {smallest} runs out of memory "
                f"({self.trials[-1].message or 'no message'})")
        return SearchResult(
            largest=self.fits_up_to,
            capped=self.fits_up_to >= self.largest_useful,
            trials=tuple(self.trials),
            line=MemoryLine.fit(self.trials),
            capacity_bytes=self.capacity,
            seconds=self.clock() - self.started,
            stopped_by=self.stopped_by,
        )


def search(
    try_batch: TryBatch,
    *,
    probes: tuple[int, int],
    largest_useful: int,
    speed_candidate: int = 0,
    max_trials: int = DEFAULT_MAX_TRIALS,
    budget_seconds: float = DEFAULT_SEARCH_BUDGET,
    on_trial: Callable[[Trial], None] = lambda trial: None,
    clock: Callable[[], float] = time.monotonic,
) -> SearchResult:
    """The largest batch up to `largest_useful` that fits.

    `try_batch(batch, kind)` makes one trial. Probes at `probes` (halving the
    first until it fits), a line through their peaks, one confirm near the line's
    prediction, then steps down or bisects while budgets last. The second probe is
    the batch the speed run will likely take (`speed_candidate`) wherever the first
    probe shows it must fit: the run then finds its main step shape already set up.
    """
    state = _Search(try_batch, max(1, largest_useful), max_trials, budget_seconds, on_trial,
                    clock, started=clock())
    first, second = (max(1, min(p, state.largest_useful)) for p in probes)
    while not state.attempt(first, PROBE).fits:
        if first == 1 or not state.budget_left():
            return state.result()  # NoBatchFits when nothing fit
        first = max(1, first // 2)
    second = _second_probe(state.trials[-1], second, speed_candidate, state.largest_useful)
    if second > first and state.fails_from is None and state.budget_left():
        state.attempt(second, PROBE)
    _close_in(state)
    return state.result()


def _second_probe(first: Trial, default: int, speed_candidate: int, largest_useful: int) -> int:
    """The second probe's batch: the largest power of two up to `speed_candidate` that
    the first probe proves fits (memory per image is at most its peak over its batch,
    as the fixed part is not negative), else `default` (at least twice the first)."""
    second = max(default, 2 * first.batch)
    if speed_candidate and first.capacity_bytes and first.measured_bytes:
        bound = first.batch * first.capacity_bytes * (1 - HEADROOM) / first.measured_bytes
        safe = min(speed_candidate, int(bound))
        proved = 1 << (safe.bit_length() - 1) if safe > 0 else 0
        if proved > first.batch:
            second = proved
    return min(second, largest_useful)


def _close_in(state: _Search) -> None:
    """Confirm the line's prediction, then narrow the gap, while the budgets last."""
    step_downs = 0  # confirms below a failed prediction, at most two
    stepping = False  # the last failure was the line's prediction or a step down from it
    while not state.close_enough() and state.budget_left():
        if state.fits_up_to >= state.largest_useful:
            return
        low, high = state.fits_up_to, state.fails_from
        if high is None:
            candidate = _predicted(state)
            if candidate is None:
                return
            stepping = MemoryLine.fit(state.trials) is not None and bool(state.capacity)
        elif stepping and step_downs < 2 and low < int(high * STEP_DOWN) < high:
            # The line is usually close: a small step down usually fits.
            candidate, step_downs = int(high * STEP_DOWN), step_downs + 1
        else:
            candidate = _between(low, high)
        if state.attempt(candidate, CONFIRM).fits:
            stepping = False


def _predicted(state: _Search) -> int | None:
    """The line's largest batch to confirm, or None when it says the largest is known."""
    low = state.fits_up_to
    line = MemoryLine.fit(state.trials)
    if line is None or not state.capacity:
        # No memory figure to extrapolate from: double, as a plain search would.
        return min(2 * low, state.largest_useful)
    predicted = min(line.largest(state.capacity * (1 - HEADROOM)), state.largest_useful)
    # A confirm at the prediction that fit ends the search unless the refitted line now
    # predicts clearly more (the probes under-estimated the slope).
    return predicted if predicted > low + max(1, low // GAP_SHARE) else None


def _between(low: int, high: int) -> int:
    """A batch between low (fits) and high (does not), a multiple of 8 when large."""
    middle = (low + high) // 2
    rounded = middle - middle % 8
    return rounded if middle >= 64 and rounded > low else middle


def speed_batch(largest: int, train_images: int, devices: int = 1) -> int:
    """The speed rule: the largest power of two up to `largest` that leaves at least
    MIN_STEPS full training steps an epoch (1 when the training set is that small)."""
    per_device = max(1, train_images // (MIN_STEPS * max(1, devices)))
    limit = max(1, min(largest, per_device))
    return 1 << (limit.bit_length() - 1)


def fallbacks(rule: str, chosen: int, result: SearchResult) -> list[int]:
    """The batches to run again at, largest first, if the run at `chosen` runs out of
    memory: halves for the speed rule, confirmed smaller batches for the largest."""
    if rule == RULE_STEPS:
        found, batch = [], chosen // 2
        while batch >= 1:
            found.append(batch)
            batch //= 2
        return found
    return [batch for batch in result.confirmed if batch < chosen]
