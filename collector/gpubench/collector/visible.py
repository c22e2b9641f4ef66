"""What a reader sees: DuckDB's committed runs and the backlog's acknowledged ones, with
current outlier flags, read without the write lock and without waiting for a commit.

A run is acknowledged once the intake journal has it; the flusher inserts it into
DuckDB up to FLUSH_INTERVAL_S later and rescores its group later still. A reader must
see every run acknowledged before it asked, scored as the next rescore will score
it. Storing and rescoring what is pending before each read would do that too, but
under the write lock: every read would queue behind every write (a flush, a delete,
a bulk load) and behind the journal's fdatasync. Instead a read takes the backlog's
published view
(collector.backlog.Unstored: one attribute read), then its own cursor's snapshot of
DuckDB (MVCC: what was committed when each statement began), and adds the view to it
in SQL: the view's runs as an Arrow table, the view's groups rescored in the query
(collector.outliers.rescored_runs_sql). Runs queued for a group commit that has not
returned are in neither: nobody has been promised them yet.

The view is taken before the snapshot: a run leaves the backlog only after its insert
has committed, so a run missing from the view is in the snapshot. One in both (its
insert committed in between) is read once, from the view; so a run deleted while a
read takes its view may still be in that read, as if the read had come first.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass

import duckdb
import pyarrow as pa

from gpubench.collector import columns, outliers
from gpubench.collector.backlog import Backlog, Unstored
from gpubench.collector.database import Database, registered

# The names the view's two Arrow tables have on a reader's cursor while it reads.
ACKNOWLEDGED = "acknowledged_runs"
UNSCORED = "unscored_groups"
# The runs table and the acknowledged runs not yet in it.
_WITH_ACKNOWLEDGED = (f"(SELECT * FROM runs ANTI JOIN {ACKNOWLEDGED} USING (run_id) "
                      f"UNION ALL BY NAME SELECT * FROM {ACKNOWLEDGED})")


@dataclass(frozen=True)
class Snapshot:
    """A read's cursor and the relations (SQL) it reads runs from."""

    con: duckdb.DuckDBPyConnection
    # Every run a reader must see, with its outlier flags and score current.
    runs: str
    # The same runs, their flags as stored: enough for queries that do not read flags.
    rows: str
    # The outlier groups whose rows of group_figures are not current (the columns of
    # OUTLIER_GROUP); None when every one is.
    unscored: str | None = None

    def group_figures(self) -> str:
        """group_figures as the next rescore will leave it."""
        if self.unscored is None:
            return "group_figures"
        cols = ", ".join(outliers.OUTLIER_GROUP)
        fresh = outliers.figures_sql(f"(SELECT * FROM {self.runs} AS r "
                                     f"SEMI JOIN {self.unscored} USING ({cols}))")
        # By name: figures_sql names its columns as group_figures does.
        return (f"(SELECT * FROM group_figures ANTI JOIN {self.unscored} USING ({cols}) "
                f"UNION ALL BY NAME {fresh})")


# How the reads get a Snapshot: `functools.partial(snapshot, database, backlog)`.
Snapshots = Callable[[], AbstractContextManager[Snapshot]]


@contextlib.contextmanager
def snapshot(database: Database, intake: Backlog) -> Iterator[Snapshot]:
    """The runs as a reader must see them now, on this thread's cursor, for the block;
    a failure of the storage raised as retryable (Database.reading)."""
    unstored = intake.view()  # before the cursor reads anything: see the module's doc
    with database.reading():
        con = database.cursor()
        if not unstored:
            yield Snapshot(con, "runs", "runs")
            return
        acknowledged, unscored = _tables(intake, unstored)
        with contextlib.ExitStack() as stack:
            rows = "runs"
            if unstored.rows:
                stack.enter_context(registered(con, ACKNOWLEDGED, acknowledged))
                rows = _WITH_ACKNOWLEDGED
            if not unstored.groups:
                yield Snapshot(con, rows, rows)
                return
            stack.enter_context(registered(con, UNSCORED, unscored))
            yield Snapshot(con, f"({outliers.rescored_runs_sql(rows, UNSCORED)})", rows,
                           UNSCORED)


def _tables(intake: Backlog, unstored: Unstored) -> tuple[pa.Table, pa.Table]:
    """The view's runs and groups as Arrow tables, made once per view."""
    if unstored.tables is None:
        keys = pa.schema([columns.RUN_COLUMNS.field(c) for c in outliers.OUTLIER_GROUP])
        unstored.tables = (
            _acknowledged(intake, unstored),
            columns.arrow_rows([dict(zip(outliers.OUTLIER_GROUP, g, strict=True))
                                for g in unstored.groups], keys),
        )
    return unstored.tables


def _acknowledged(intake: Backlog, unstored: Unstored) -> pa.Table:
    """The view's runs as an Arrow table, converting only those an earlier view's table
    (the backlog's arrow_cache) lacks: the backlog gains rows at its end and loses
    them from its start, so that table's rows still pending are a start of these."""
    rows, first = unstored.rows, unstored.first
    table = None
    cached = intake.arrow_cache
    if cached is not None and cached[2].schema == columns.RUN_COLUMNS:
        cached_first, count, cached_table = cached
        if cached_first <= first <= cached_first + count:
            table = cached_table.slice(first - cached_first, len(rows))
    if table is None or not table.num_rows:
        table = columns.RUN_COLUMNS.empty_table()
    added = rows[table.num_rows:]
    if added:
        converted = columns.arrow_rows(added)
        table = pa.concat_tables([table, converted]) if table.num_rows else converted
        if converted.num_rows < len(added):  # rows no column holds (the database will
            return table  # refuse them too): the table no longer lines up with the view
    intake.arrow_cache = (first, len(rows), table)
    return table
