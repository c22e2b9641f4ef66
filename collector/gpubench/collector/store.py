"""The collector's store: runs and tokens in one DuckDB file, through one object.

`Store` opens the database (collector.database) and composes the parts that use it,
each with one job:

- collector.group_commit: submissions, group-committed into the intake journal and
  acknowledged from it;
- collector.backlog: the acknowledged runs not yet in DuckDB, and what readers must
  add to DuckDB's runs;
- collector.flusher: every write of the runs table (the journal's runs in bulk,
  deletes, bulk loads, quarantine retries) and the outlier rescoring after it;
- collector.outliers: the outlier flags and per-group figures, as SQL;
- collector.queries and collector.aggregates: the reads (runs, pages, counts;
  Compare, the leaderboard), which never take the write lock (collector.visible);
- collector.quarantine: the acknowledged runs the database refused;
- collector.tokens: access tokens.
"""

from __future__ import annotations

import builtins
import functools
import logging
from collections.abc import Iterable, Sequence
from concurrent.futures import Future
from datetime import datetime
from pathlib import Path
from typing import Any

import pyarrow as pa

from gpubench.collector import backup_tables, visible
from gpubench.collector.aggregates import (
    Aggregates,
    CompareQuery,
    LeaderboardQuery,
    LeaderboardRow,
)
from gpubench.collector.backlog import Backlog
from gpubench.collector.columns import RUN_COLUMNS
from gpubench.collector.compare import GroupFigures
from gpubench.collector.database import Database, backup_counts, registered, transaction
from gpubench.collector.durability import Durability
from gpubench.collector.flusher import Flusher
from gpubench.collector.group_commit import GroupCommit
from gpubench.collector.intake import Journal, journal_folder
from gpubench.collector.quarantine import QuarantinedRun, QuarantineTable
from gpubench.collector.queries import RunFilter, RunReads
from gpubench.collector.rows import Ack, run_row
from gpubench.collector.tokens import TokenRow, Tokens
from gpubench.v1 import collector_pb2, run_pb2

log = logging.getLogger(__name__)


def _counted(part: str, name: str) -> property:
    """A count its part keeps (`Store.<part>.<name>`), read as the store's own."""
    return property(lambda store: getattr(getattr(store, part), name))


class Store:
    """Runs and tokens in a DuckDB file; safe to share between threads."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.database = Database(self.path)
        # Whether journal and database writes succeed now (the health service listens).
        self.durability = Durability()
        self.quarantine = QuarantineTable(self.database.cursor, self.path)
        try:
            # The database's file lock is held now: no other collector uses this journal.
            self.backlog = Backlog(Journal(journal_folder(self.path)), self.durability,
                                   self.database.mark_broken)
            self.flusher = Flusher(self.database, self.backlog, self.quarantine)
            self.flusher.replay()
            self.backlog.known.add(r for (r,) in self.database.cursor().execute(
                "SELECT run_id FROM runs UNION ALL SELECT run_id FROM quarantine").fetchall())
        except BaseException:
            self.database.close(lambda: None)  # release the file: nothing else may use it now
            raise
        held = self.quarantine.count()
        if held:
            log.warning("%s: %d acknowledged run(s) held in quarantine, refused by the "
                        "database; see `gpubench-collector quarantine list`", self.path, held)
        self.tokens_table = Tokens(self.database)
        reads = functools.partial(visible.snapshot, self.database, self.backlog)
        self._runs = RunReads(reads, self.quarantine)
        self._aggregates = Aggregates(reads)
        self._group_commit = GroupCommit(self.database, self.backlog)
        self.flusher.start()
        # For operators (the Stats call): submissions acknowledged and refused.
        self.submissions = self._group_commit.submissions

    # For benchmarks: group commits (journal writes) and the runs they acknowledged;
    # bulk inserts of the journal's runs into DuckDB and the runs they stored.
    commits = _counted("_group_commit", "commits")
    committed_runs = _counted("_group_commit", "committed_runs")
    flushes = _counted("flusher", "flushes")
    flushed_runs = _counted("flusher", "flushed_runs")

    def close(self) -> None:
        """Finish queued submissions, flush the journal into DuckDB, checkpoint, close."""
        self._group_commit.stop()
        self.flusher.stop()
        self.database.close(self.flusher.finish)

    def applied_migrations(self) -> list[str]:
        """The names of the migrations this database has had, in order applied."""
        return self.database.applied_migrations()

    # -- writes -----------------------------------------------------------------------------

    def submit(self, run: run_pb2.Run, submitter: str) -> Ack:
        """Store a validated run durably and return its acknowledgement.

        The same run_id with the same content returns the first acknowledgement;
        with different content it raises RunConflict.
        """
        return self.submit_row(run_row(run, submitter)).result()

    def submit_row(self, row: dict[str, Any]) -> Future:
        """Queue a row made by `run_row` for the next group commit, without waiting
        (the multi-process collector's owner answers from the future's callback)."""
        return self._group_commit.submit_row(row)

    def submit_many(self, runs: Iterable[run_pb2.Run], submitter: str) -> list[Ack | Exception]:
        """Store many validated runs at once, in DuckDB and rescored before this returns;
        per run an Ack or the RunConflict."""
        rows = [run_row(run, submitter) for run in runs]
        with self.database.write_lock:
            results = self._group_commit.accept_now(rows)
            self.flusher.catch_up()
        return results

    def catch_up(self) -> None:
        """Store every acknowledged run still only in the journal and rescore the groups
        waiting for it, now (the flusher does so within FLUSH_INTERVAL_S by itself)."""
        with self.database.write_lock:
            self.flusher.catch_up()

    def delete(self, run_id: str) -> str:
        """Delete a run (and rescore its group); returns its submitter. NotFound if absent."""
        return self.flusher.delete(run_id)

    def bulk_load(self, table: pa.Table) -> None:
        """Append rows given as an Arrow table of RUN_COLUMNS (no validation, no rescoring)."""
        self.flusher.bulk_load(table)

    def rescore_all(self) -> None:
        """Recompute the outlier flags of every group (after a bulk load)."""
        self.flusher.rescore_all()

    def export_to(self, folder: Path, tables: Sequence[str]) -> dict[str, int]:
        """Write a consistent copy of `tables` into `folder`, one Parquet file each
        (collector.backup_tables), and return how many runs, tokens and quarantined runs
        it holds.

        Every run acknowledged before the call is in it: the journal's pending runs are
        stored first. The copy reads one snapshot, taken right after, in a transaction
        of its own, so submissions go on while it is written (and are not in it).
        """
        with self.database.own_cursor() as con:
            with self.database.write_lock:
                self.flusher.flush()
                con.execute("BEGIN TRANSACTION")
                # The first read fixes the snapshot, before any later run is stored.
                counts = backup_counts(con)
            with self.backlog.writing("database", f"writing a backup into {folder}"):
                backup_tables.export(con, folder, tables)
            con.execute("COMMIT")
            return counts

    def load_backup(self, files: dict[str, Path]) -> dict[str, int]:
        """Load a backup's tables (table -> its Parquet file) into this store, new and
        empty, and score the outliers; how many runs, tokens and quarantined runs it holds
        then. Raises backup_tables.DamagedBackup naming what is wrong."""
        with self.database.write_lock:
            con = self.database.cursor()
            with transaction(con):
                backup_tables.load(con, files, self._insert_loaded)
        self.rescore_all()
        return backup_counts(self.database.cursor())

    def _insert_loaded(self, table: pa.Table) -> None:
        # Within load_backup's transaction and write lock.
        con = self.database.cursor()
        with registered(con, "loaded_runs", table.cast(RUN_COLUMNS)):
            con.execute("INSERT INTO runs BY NAME SELECT * FROM loaded_runs")

    # -- reads (none takes the write lock: collector.visible) --------------------------------

    def get(self, run_id: str) -> collector_pb2.StoredRun:
        """The stored run, or NotFound (which says so of a run held in quarantine)."""
        return self._runs.get(run_id)

    def count(self) -> int:
        """How many runs are stored."""
        return self._runs.count()

    def list(
        self, where: RunFilter, *, page_size: int, page_token: str = "",
        page_bytes: int | None = None,
    ) -> tuple[list[collector_pb2.StoredRun], str]:
        """Runs matching `where`, newest first: a page and the next page's token
        (queries.RunReads.list)."""
        return self._runs.list(where, page_size=page_size, page_token=page_token,
                               page_bytes=page_bytes)

    def submitter_of(self, run_id: str) -> str:
        """Who submitted a run; NotFound if absent."""
        return self._runs.submitter_of(run_id)

    def compare_groups(self, query: CompareQuery) -> builtins.list[GroupFigures]:
        """Per GPU configuration, the figures Compare reports (Aggregates.compare_groups)."""
        return self._aggregates.compare_groups(query)

    def published_groups(
        self, model: str, gpu_names: Sequence[str] = ()
    ) -> builtins.list[GroupFigures]:
        """The published runs of a model per GPU configuration (Aggregates.published_groups)."""
        return self._aggregates.published_groups(model, gpu_names)

    def leaderboard(self, query: LeaderboardQuery) -> tuple[builtins.list[LeaderboardRow], str]:
        """A model's GPU configurations, fastest first, and the benchmark version they are
        of (Aggregates.leaderboard)."""
        return self._aggregates.leaderboard(query)

    def figures(self) -> dict[str, Any]:
        """The runs stored (flagged, outliers, published among them), quarantined and
        waiting in the journal, and the bulk inserts so far: StatsResponse's fields."""
        depth = len(self.backlog.view().rows)  # before the read, which includes them
        return {**self._runs.counts(), "runs_quarantined": self.quarantine.count(),
                "journal_depth": depth, "flushes": self.flusher.flushes,
                "flush_seconds_total": self.flusher.flush_seconds_total,
                "flush_seconds_last": self.flusher.flush_seconds_last}

    # -- quarantine and tokens --------------------------------------------------------------

    def quarantine_count(self) -> int:
        """How many acknowledged runs the database refused and quarantine holds."""
        return self.quarantine.count()

    def quarantined(self, run_ids: Sequence[str] = ()) -> builtins.list[QuarantinedRun]:
        """The runs held in quarantine (those of `run_ids`; empty: every one), oldest
        first. NotFound names a run_id quarantine does not hold."""
        return self.quarantine.held(run_ids)

    def retry_quarantined(
        self, run_ids: Sequence[str] = ()
    ) -> tuple[builtins.list[str], builtins.list[QuarantinedRun]]:
        """Store runs held in quarantine again (Flusher.retry_quarantined)."""
        return self.flusher.retry_quarantined(run_ids)

    def drop_quarantined(self, run_ids: Sequence[str]) -> builtins.list[QuarantinedRun]:
        """Delete named runs from quarantine for good (Flusher.drop_quarantined)."""
        return self.flusher.drop_quarantined(run_ids)

    def create_token(self, name: str, secret_sha256: str, admin: bool) -> TokenRow:
        """Store a new token (Tokens.create)."""
        return self.tokens_table.create(name, secret_sha256, admin)

    def tokens(self) -> builtins.list[TokenRow]:
        """Every token, by name."""
        return self.tokens_table.all()

    def token_by_secret_hash(self, secret_sha256: str) -> TokenRow | None:
        """The token whose secret hashes to `secret_sha256`, revoked or not."""
        return self.tokens_table.by_secret_hash(secret_sha256)

    def revoke_token(self, name: str) -> TokenRow:
        """Mark a token revoked; NotFound if there is none of that name."""
        return self.tokens_table.revoke(name)

    def record_token_use(self, used: dict[str, datetime]) -> None:
        """Write tokens' last-used times (the auth layer batches them)."""
        self.tokens_table.record_use(used)
