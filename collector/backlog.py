"""Acknowledged runs on their way into DuckDB, and outlier groups waiting for a rescore.

A submission is acknowledged once the intake journal has synced it
(collector.group_commit); the flusher inserts the journal's runs into DuckDB in bulk
a little later (collector.flusher) and rescores the outlier groups they joined later
still. The `Backlog` holds what lies between: the acknowledged runs not yet inserted
(`pending`) and the outlier groups with runs not yet rescored (`unscored`).

Every read of the runs stores what is pending and rescores first (collector.visible),
so a reader sees every run acknowledged before it asked, and its outlier flags.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import duckdb
from gpubench.collector.durability import Durability, storage_error
from gpubench.collector.intake import Journal, KnownRuns

# The journal is flushed into DuckDB once it holds this many runs, or FLUSH_INTERVAL_S
# after its oldest arrived. A DuckDB commit costs a few ms of CPU plus about 0.03 ms a
# run: 16 runs a commit spend 0.3-0.4 ms of CPU per run, 1024 about 0.03 ms.
FLUSH_ROWS = 1024
FLUSH_INTERVAL_S = 1.0
# Acknowledged runs not yet in DuckDB beyond which the writer waits for the flusher.
MAX_PENDING = 16 * FLUSH_ROWS


class Backlog:
    """The intake's state between acknowledgement and DuckDB: the journal, the run_ids
    acknowledged so far, the pending runs and the unscored groups, guarded by `lock`
    (a condition the writer and the flusher wait on), and whether writes are durable.

    Lock order: the database's write lock first, then `lock`.
    """

    def __init__(self, journal: Journal, durability: Durability,
                 on_fatal: Callable[[], None]) -> None:
        self.journal = journal
        self.durability = durability
        # Called when a write fails because the database refuses every statement until
        # it is opened again (collector.database.Database.mark_broken).
        self._on_fatal = on_fatal
        self.lock = threading.Condition()
        self.known = KnownRuns()
        # Acknowledged runs in the journal, not yet in DuckDB: run_id -> row.
        self.pending: dict[str, dict[str, Any]] = {}
        self.since = 0.0  # when the oldest pending run arrived (monotonic)
        # The outlier groups with runs inserted but not rescored. Changed only by holders
        # of the write lock, so that a rescore knows what it covered.
        self.unscored: set[tuple] = set()
        # The store is closing: the flusher stops, and the writer no longer waits for it.
        self.closing = False

    def full(self) -> bool:
        """Whether the writer must wait for the flusher (MAX_PENDING runs pending)."""
        return len(self.pending) >= MAX_PENDING

    def add(self, rows: list[dict[str, Any]]) -> None:
        """Make journaled (acknowledged) rows pending. Called with `lock` held, before
        their acknowledgements are given, so that any later read stores them."""
        if not rows:
            return
        first = not self.pending
        for row in rows:
            self.pending[row["run_id"]] = row
        if first:
            self.since = time.monotonic()
        if first or len(self.pending) >= FLUSH_ROWS:
            self.lock.notify_all()  # the flusher: set its clock, or flush now

    def stored(self, rows: list[dict[str, Any]]) -> None:
        """Rows are in DuckDB now (or in quarantine), committed: no longer pending."""
        with self.lock:
            for row in rows:
                if self.pending.get(row["run_id"]) is row:
                    del self.pending[row["run_id"]]
            if self.pending:
                self.since = time.monotonic()
            self.lock.notify_all()  # a writer held back by MAX_PENDING may go on

    def mark_unscored(self, groups: set[tuple]) -> None:
        """Groups about to gain inserted runs (called with the write lock held)."""
        self.unscored |= groups

    def rescored(self, groups: set[tuple]) -> None:
        """Groups whose rescore has committed (called with the write lock held)."""
        self.unscored -= groups

    def flush_due_in(self, now: float) -> float | None:
        """Seconds until the pending runs are due for a flush (0 or less: now), or None
        when none is pending."""
        if not self.pending:
            return None
        if len(self.pending) >= FLUSH_ROWS:
            return 0.0
        return self.since + FLUSH_INTERVAL_S - now

    @contextlib.contextmanager
    def writing(self, part: str, doing: str) -> Iterator[None]:
        """A failure of the storage (a full disk) inside the block raised as StorageFull
        or StorageUnavailable naming `doing`, and noted against `part` ("journal",
        "database") until it writes again; other errors pass unchanged."""
        try:
            yield
        except Exception as exc:
            if isinstance(exc, duckdb.FatalException):  # refuses all until opened again
                self._on_fatal()
            error = storage_error(exc, doing)
            if error is None:
                raise
            self.durability.failed(part, error)
            with self.lock:  # (reentrant) the flusher: probe or retry from now on
                self.lock.notify_all()
            raise error from exc
