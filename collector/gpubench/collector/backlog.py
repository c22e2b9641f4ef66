"""Acknowledged runs on their way into DuckDB, and what readers must add to DuckDB's.

A submission is acknowledged once the intake journal has synced it
(collector.group_commit); the flusher inserts the journal's runs into DuckDB in bulk
a little later (collector.flusher) and rescores the outlier groups they joined later
still. The `Backlog` holds what lies between: the acknowledged runs not yet inserted
(`pending`) and the outlier groups with runs not yet rescored (`unscored`).

Readers never wait for the flusher. After every change the backlog publishes an
immutable `Unstored` view of itself; a reader takes that view first and then queries
DuckDB, which shows it everything committed by then (MVCC): a run acknowledged before
the read began is in the view's rows, or else was already removed from `pending`,
which happens only after its insert has committed. The reader adds the view's rows to
DuckDB's runs and computes the flags and figures of the view's groups afresh
(collector.visible), so it sees every acknowledged run, scored, without taking the
write lock or the backlog's lock.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import duckdb
import pyarrow as pa

from gpubench.collector import outliers
from gpubench.collector.durability import Durability, storage_error
from gpubench.collector.intake import Journal, KnownRuns

# The journal is flushed into DuckDB once it holds this many runs, or FLUSH_INTERVAL_S
# after its oldest arrived. A DuckDB commit costs a few ms of CPU plus about 0.03 ms a
# run: 16 runs a commit spend 0.3-0.4 ms of CPU per run, 1024 about 0.03 ms.
FLUSH_ROWS = 1024
FLUSH_INTERVAL_S = 1.0
# Acknowledged runs not yet in DuckDB beyond which the writer waits for the flusher.
MAX_PENDING = 16 * FLUSH_ROWS


class Unstored:
    """What DuckDB's committed state lacked at one moment: the acknowledged runs still
    only in the journal (runs-table rows), and the outlier groups whose flags and
    figures DuckDB does not hold as they will be (runs inserted but not rescored, or
    pending). Never changed once published."""

    __slots__ = ("rows", "first", "groups", "tables")

    def __init__(self, rows: tuple[dict[str, Any], ...] = (), first: int = 0,
                 groups: frozenset[tuple] = frozenset()) -> None:
        self.rows = rows
        self.first = first  # the number of the first row (Backlog.add numbers them)
        self.groups = groups
        # The readers' Arrow tables of the rows and the groups, made by the first reader
        # that needs them (collector.visible); a race makes them twice, harmlessly.
        self.tables: tuple[pa.Table, pa.Table] | None = None

    def __bool__(self) -> bool:
        return bool(self.rows or self.groups)


class Backlog:
    """The intake's state between acknowledgement and DuckDB: the journal, the run_ids
    acknowledged so far, the pending runs and the unscored groups, guarded by `lock`
    (a condition the writer and the flusher wait on), and whether writes are durable.

    Lock order: the database's write lock first, then `lock`. Readers take neither.
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
        # The pending rows are numbered in the order they came, from `_first` on: they
        # leave in that order too (a flush takes every one), so a view's rows are known
        # by the number of the first and how many.
        self._first = 0
        # Readers' Arrow table of some view's rows: (the number of its first row, the
        # view's row count, the table). A reader converts only the rows a later view
        # added, and writes it back (one attribute assignment: no lock).
        self.arrow_cache: tuple[int, int, pa.Table] | None = None
        self.since = 0.0  # when the oldest pending run arrived (monotonic)
        # The outlier groups of the pending runs (how many runs each), and the groups
        # with runs inserted but not rescored. Changed only under `lock`; `unscored`
        # only by holders of the write lock too, so that a rescore knows what it covered.
        self._pending_groups: Counter[tuple] = Counter()
        self.unscored: set[tuple] = set()
        self._view = Unstored()
        # The store is closing: the flusher stops, and the writer no longer waits for it.
        self.closing = False

    def view(self) -> Unstored:
        """What readers must add to DuckDB's runs now (one attribute read: no lock)."""
        return self._view

    def _publish(self) -> None:
        # Called with `lock` held, after every change of `pending` or `unscored`.
        self._view = Unstored(tuple(self.pending.values()), self._first,
                              frozenset(self.unscored | self._pending_groups.keys()))

    def full(self) -> bool:
        """Whether the writer must wait for the flusher (MAX_PENDING runs pending)."""
        return len(self.pending) >= MAX_PENDING

    def add(self, rows: list[dict[str, Any]]) -> None:
        """Make journaled (acknowledged) rows pending. Called with `lock` held, before
        their acknowledgements are given, so that any later read sees them."""
        if not rows:
            return
        first = not self.pending
        for row in rows:
            self.pending[row["run_id"]] = row
            group = outliers.group_of(row)
            if group is not None:
                self._pending_groups[group] += 1
        if first:
            self.since = time.monotonic()
        self._publish()
        if first or len(self.pending) >= FLUSH_ROWS:
            self.lock.notify_all()  # the flusher: set its clock, or flush now

    def stored(self, rows: list[dict[str, Any]]) -> None:
        """Rows are in DuckDB now (or in quarantine), committed: no longer pending. They
        are every row pending when the flush began: the first ones."""
        with self.lock:
            for row in rows:
                if self.pending.get(row["run_id"]) is row:
                    del self.pending[row["run_id"]]
                    self._first += 1
                    group = outliers.group_of(row)
                    if group is not None:
                        self._pending_groups[group] -= 1
                        if not self._pending_groups[group]:
                            del self._pending_groups[group]
            if self.pending:
                self.since = time.monotonic()
            self._publish()
            self.lock.notify_all()  # a writer held back by MAX_PENDING may go on

    def mark_unscored(self, groups: set[tuple]) -> None:
        """Groups about to gain inserted runs (called with the write lock held, before
        the insert: a reader must never see a run whose group it thinks is scored)."""
        if groups <= self.unscored:
            return
        with self.lock:
            self.unscored |= groups
            self._publish()

    def rescored(self, groups: set[tuple]) -> None:
        """Groups whose rescore has committed (called with the write lock held)."""
        with self.lock:
            self.unscored -= groups
            self._publish()

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
