"""What a reader sees: every run acknowledged before it asked, with current flags.

A run is acknowledged once the intake journal has it; the flusher inserts it into
DuckDB up to FLUSH_INTERVAL_S later and rescores its group later still. So a read
first stores what is pending and rescores the groups waiting for it, under the write
lock, and then reads on this thread's cursor.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass

import duckdb
from gpubench.collector.backlog import Backlog
from gpubench.collector.database import Database


@dataclass(frozen=True)
class Snapshot:
    """A read's cursor and the relations (SQL) it reads runs from."""

    con: duckdb.DuckDBPyConnection
    # Every run a reader must see, with its outlier flags and score current.
    runs: str = "runs"
    # The same runs, their flags as stored: enough for queries that do not read flags.
    rows: str = "runs"

    def group_figures(self) -> str:
        """group_figures as a reader must see it."""
        return "group_figures"


# How the reads get a Snapshot: `functools.partial(snapshot, database, backlog, ...)`.
Snapshots = Callable[[], AbstractContextManager[Snapshot]]


@contextlib.contextmanager
def snapshot(
    database: Database, intake: Backlog, catch_up: Callable[[], None]
) -> Iterator[Snapshot]:
    """The runs as a reader must see them now, on this thread's cursor, for the block
    (pending runs stored and their groups rescored first, by `catch_up`); a failure of
    the storage raised as retryable (Database.reading)."""
    if intake.pending or intake.unscored:
        with database.write_lock:
            catch_up()
    with database.reading():
        yield Snapshot(database.cursor())
