"""`gpubench-agent largest-batch`: only the batch search, for each model and memory limit.

Reads the workload's `search_done` events (one per model and limit) and the
trials before each, and shows them as `Found` rows; nothing is trained to the
end, spooled or sent. `--json` prints the rows as `Found.as_json` lays them out.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from rich.console import Console
from rich.table import Table

from gpubench.agent.display import RunDisplay
from gpubench.agent.runners.base import Runner, SearchRequest
from gpubench.events import BatchTrial, ErrorEvent, SearchDone

GIB = 1 << 30


@dataclass(frozen=True)
class FoundTrial:
    """One batch size the search tried (one entry of a row's `trials`)."""

    batch: int
    fits: bool
    kind: str  # "probe" or "confirm"
    peak_memory_bytes: int  # the allocator's allocated peak
    reserved_peak_bytes: int  # what the allocator held at its peak (0: not known)
    capacity_bytes: int  # what the trial could use in all (0: not known)
    seconds: float
    step_seconds: float  # median training step after the first (0: not timed)
    message: str  # why it did not fit

    @classmethod
    def of(cls, event: BatchTrial) -> FoundTrial:
        """The trial a batch_trial event tells."""
        return cls(event.batch, event.fits, event.trial_kind, event.peak_memory_bytes,
                   event.reserved_peak_bytes, event.capacity_bytes, event.seconds,
                   event.step_seconds, event.message)


@dataclass(frozen=True)
class Found:
    """The search's answer for one model and memory limit: one row of the table, one
    object of `--json`'s list (these fields, with `trials` a list of FoundTrial's)."""

    model: str
    memory_limit_bytes: int  # 0: the whole card
    largest: int  # the largest batch per GPU a trial confirmed
    capped: bool  # the training set, not memory, bounded it
    batch: int  # the batch the speed run trains at (by `rule`)
    rule: str
    search_seconds: float
    capacity_bytes: int  # what the trials could use (0: not known)
    fixed_bytes: int  # the memory line through the trials' peaks: fixed + per image x batch
    per_image_bytes: int
    stopped_by: str  # "", "trials" or "time": the budget that ended the search early
    trials: tuple[FoundTrial, ...]

    @classmethod
    def of(cls, done: SearchDone, trials: Sequence[BatchTrial]) -> Found:
        """The row a search_done event and the trials before it make."""
        search = done.search
        return cls(done.model, done.memory_limit_bytes, search.largest, search.capped,
                   done.batch, done.rule, search.search_seconds, search.capacity_bytes,
                   search.fixed_bytes, search.per_image_bytes, search.stopped_by,
                   tuple(FoundTrial.of(trial) for trial in trials))

    def as_json(self) -> dict[str, Any]:
        """The row as `largest-batch --json` prints it."""
        return dataclasses.asdict(self) | {"trials": [dataclasses.asdict(t) for t in self.trials]}


def search_models(runner: Runner, requests: Sequence[SearchRequest],
                  display: RunDisplay) -> tuple[list[Found], list[str]]:
    """Run each request's search; (one row per model and limit, the models that failed)."""
    found: list[Found] = []
    failed: list[str] = []
    display.suite_started([request.model for request in requests], 0)
    for index, request in enumerate(requests):
        trials: list[BatchTrial] = []
        errors: list[str] = []
        with runner.start(request) as workload:
            display.model_started(request.model, 0, lambda: None, index)
            try:
                for event in workload.events():
                    if isinstance(event, ErrorEvent):  # said once, below, when the search ends
                        errors.append(event.message or "failed")
                        continue
                    display.event(event)
                    if isinstance(event, BatchTrial):
                        trials.append(event)
                    elif isinstance(event, SearchDone):
                        found.append(Found.of(event, trials))
                        trials = []
            finally:
                display.model_finished()
            ended = workload.wait()
        if errors or ended.exit_code != 0:
            failed.append(request.model)
            display.note(f"{request.model}: the search failed: "
                         f"{errors[-1] if errors else 'the workload ' + ended.describe()}",
                         style="red")
    return found, failed


def print_table(rows: Sequence[Found], console: Console) -> None:
    """One line per model and limit; fits 80 columns."""
    table = Table(title="Largest batch per GPU")
    for column in ("model", "GPU memory", "largest", "speed run", "trials", "search"):
        table.add_column(column, justify="right" if column != "model" else "left")
    for row in rows:
        limit = row.memory_limit_bytes
        table.add_row(
            row.model,
            f"{limit / GIB:.0f} GiB" if limit else "whole card",
            f"{row.largest}" + ("+" if row.capped else ""),
            str(row.batch),
            str(len(row.trials)),
            f"{row.search_seconds:.0f} s",
        )
    console.print(table)
    if any(row.capped for row in rows):
        console.print("+: every training image fits in one batch; the card holds more",
                      highlight=False)
