"""The collector's store: runs and tokens in one DuckDB file.

Writes go through the Store's methods; reads through its `runs` (collector.queries),
`aggregates` (collector.aggregates) and `tokens` (collector.tokens), which a token
change also goes through.

A submission is stored in one DuckDB transaction and acknowledged once the commit has
returned: DuckDB syncs its write-ahead log at every commit. It writes its run and
the version of its outlier group and nothing else: the outlier flags and figures are
computed where they are read (collector.outliers), so its cost does not grow with its
group. Writes take the
database's write lock, one at a time (submissions waiting for it share the next
transaction, and each is answered when that one has committed); reads take none
(DuckDB's MVCC).
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import duckdb

from gpubench.collector import backup_tables, columns, migrations, outliers
from gpubench.collector.aggregates import Aggregates
from gpubench.collector.database import Database, backup_counts, transaction
from gpubench.collector.durability import Durability, storage_error
from gpubench.collector.errors import RunConflict, ShuttingDown, StorageUnavailable
from gpubench.collector.queries import RunReads
from gpubench.collector.rows import Ack, run_row, utc_now
from gpubench.collector.stats import SubmissionCounts
from gpubench.collector.tokens import Tokens
from gpubench.errors import InvalidRecord, NotFound
from gpubench.v1 import run_pb2

log = logging.getLogger(__name__)

# While writes fail (a full disk), how often the store tries whether they would succeed
# again (s), so that health says SERVING again without waiting for a submission.
RETRY_S = 1.0
# What that try writes and syncs beside the database: about a large run record.
PROBE_BYTES = 64 * 1024


class Store:
    """Runs and tokens in a DuckDB file; safe to share between threads."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.database = Database(self.path, migrations.apply)
        self.durability = Durability()  # whether writes succeed now (health listens)
        self.submissions = SubmissionCounts()  # acknowledged and refused (the Stats call)
        # Reads take no lock (DuckDB's MVCC): the runs, the figures of their groups, tokens.
        # Each outlier group's scores, kept until the group changes (both read them).
        scores = outliers.GroupScores()
        self.runs = RunReads(self.database, scores)
        self.aggregates = Aggregates(self.database, scores)
        self.tokens = Tokens(self.database)
        self._closing = threading.Event()
        self._retrying: threading.Thread | None = None
        self._retry_running = False  # set and cleared with the write lock held
        # Submissions waiting to be stored, and whether a thread is storing some now.
        self._turn = threading.Condition()
        self._storing = False
        self._queue: list[tuple[dict[str, Any], Future]] = []

    def close(self) -> None:
        """Checkpoint and close the database (writes in flight finish first)."""
        self._closing.set()
        self.database.close()
        if self._retrying is not None:
            self._retrying.join()

    # -- writes -----------------------------------------------------------------------------

    def submit(self, run: run_pb2.Run, submitter: str) -> Ack:
        """Store a validated run durably and return its acknowledgement.

        The same run_id with the same content returns the first acknowledgement;
        with different content it raises RunConflict. A submission that finds none being
        stored stores every one that waits, in one transaction (a commit's sync costs
        about as much for 16 runs as for one); each is answered once that transaction
        has committed, and the next waiting submission stores the runs that came since.
        """
        waiting: tuple[dict[str, Any], Future] = (run_row(run, submitter), Future())
        with self._turn:
            self._queue.append(waiting)
            while self._storing and not waiting[1].done():
                self._turn.wait()
            batch: list[tuple[dict[str, Any], Future]] = []
            if not waiting[1].done():  # its turn: it stores what waits, itself among them
                batch, self._queue, self._storing = self._queue, [], True
        if batch:
            try:
                self._store_batch(batch)
            finally:
                for _, future in batch:  # (only an interruption leaves one unanswered)
                    if not future.done():
                        future.set_exception(ShuttingDown("the collector stopped storing"))
                with self._turn:
                    self._storing = False
                    self._turn.notify_all()
        try:
            result = waiting[1].result()
        except Exception as exc:
            self.submissions.refuse(exc)
            raise
        self.submissions.accept()
        return result

    def _store_batch(self, batch: list[tuple[dict[str, Any], Future]]) -> None:
        """Store the waiting submissions in one transaction and answer each (called
        by the storing thread). A failure that is not the storage's (a value DuckDB
        refuses past collector.columns' checks) is one run's: each is tried alone."""
        try:
            results: list[Ack | Exception] = self.store_rows([row for row, _ in batch])
        except (StorageUnavailable, ShuttingDown) as exc:
            results = [exc] * len(batch)
        except Exception as exc:
            if len(batch) == 1:
                results = [exc]
            else:
                for one in batch:
                    self._store_batch([one])
                return
        for (_, future), result in zip(batch, results, strict=True):
            if isinstance(result, Exception):
                future.set_exception(result)
            else:
                future.set_result(result)

    def submit_many(self, runs: Iterable[run_pb2.Run], submitter: str) -> list[Ack | Exception]:
        """Store many validated runs in one transaction (Store.store_rows)."""
        return self.store_rows([run_row(run, submitter) for run in runs])

    def store_rows(self, rows: Sequence[dict[str, Any]]) -> list[Ack | Exception]:
        """Insert rows made by `run_row` (received_at set where None), in one
        transaction; per row its Ack, or the
        RunConflict or InvalidRecord that refused it. Raises StorageFull or
        StorageUnavailable (nothing stored) when the storage fails."""
        with self._writing(f"storing runs in {self.path}") as con:
            return _insert(con, rows)

    def delete(self, run_id: str) -> str:
        """Delete a run; returns its submitter. NotFound if absent."""
        with self._writing(f"deleting a run from {self.path}") as con:
            rows = con.execute("SELECT submitter FROM runs WHERE run_id = ?",
                               [run_id]).fetchall()
            if not rows:
                raise NotFound(f"run_id {run_id}: no such run")
            outliers.groups_changed(con, con.execute(
                f"DELETE FROM runs WHERE run_id = ? RETURNING {outliers.changed()}", [run_id]
            ).fetchall())
            return rows[0][0]

    def export_to(self, folder: Path, tables: Sequence[str]) -> dict[str, int]:
        """Write a copy of `tables` into `folder`, one Parquet file each
        (collector.backup_tables), from one snapshot (every run acknowledged before the
        call; submissions go on meanwhile); how many runs and tokens it holds."""
        with self.database.own_cursor() as con, self.database.read():
            con.execute("BEGIN TRANSACTION")
            counts = backup_counts(con)  # the first read fixes the snapshot
            backup_tables.export(con, folder, tables)
            con.execute("COMMIT")
            return counts

    def load_backup(self, files: dict[str, Path]) -> dict[str, int]:
        """Load a backup's tables (table -> its Parquet file) into this store, new and
        empty, in one transaction; how many runs and tokens it holds then. Raises
        backup_tables.DamagedBackup naming what is wrong."""
        with self.database.write_lock:
            con = self.database.cursor()
            with transaction(con):
                backup_tables.load(con, files)
                outliers.index_groups(con)
            self.database.generation += 1
            return backup_counts(con)

    @contextlib.contextmanager
    def _writing(self, doing: str) -> Iterator[duckdb.DuckDBPyConnection]:
        """The write lock and one transaction on this thread's cursor for the block. A
        failure of the storage (a full disk) is raised as StorageFull or
        StorageUnavailable naming `doing`, and noted in `durability` until a write or a
        retry succeeds; other errors pass unchanged."""
        with self.database.write_lock:
            try:
                if self.database.broken:
                    self.database.reopen()
                con = self.database.cursor()
                with transaction(con):
                    yield con
                self.database.generation += 1  # (before any acknowledgement of it)
            except Exception as exc:
                if isinstance(exc, duckdb.FatalException):  # refuses all until opened again
                    self.database.broken = True
                error = storage_error(exc, doing)
                if error is None:
                    raise
                self.durability.failed(error)
                self._retry_in_background()
                raise error from exc
        self.durability.recovered()

    def _retry_in_background(self) -> None:
        """Every RETRY_S, until writes are durable again (durability.HOLD_S): open a
        broken database again and write a probe beside it. A try that fails starts the
        hold again, as a failed write does. Called with the write lock held, which the
        thread also holds when it decides to end: a failure never finds it ending."""
        if self._retry_running:
            return
        self._retry_running = True

        def retry() -> None:
            probe = self.path.with_name(self.path.name + ".probe")
            while True:
                closing = self._closing.wait(RETRY_S)
                with self.database.write_lock:
                    if closing or self.database.closed or self.durability.trouble is None:
                        self._retry_running = False
                        return
                    try:
                        if self.database.broken:
                            self.database.reopen()
                        _probe(probe)
                    except Exception as exc:  # still failing (logged when it began)
                        error = storage_error(exc, f"trying to write {probe}")
                        if error is not None:
                            self.durability.failed(error)
                        continue
                    if self.durability.recovered():
                        self._retry_running = False
                        return

        self._retrying = threading.Thread(target=retry, name="store-retry", daemon=True)
        self._retrying.start()


def _insert(con: duckdb.DuckDBPyConnection, rows: Sequence[dict[str, Any]]
            ) -> list[Ack | Exception]:
    """Insert the rows not stored yet, in the caller's transaction; per row its Ack or
    the refusal (Store.store_rows). A run_id stored already with the same content gets
    its first Ack."""
    ids = list(dict.fromkeys(row["run_id"] for row in rows))
    if len(ids) == 1:  # a point lookup uses the primary key's index
        where, params = "run_id = ?", ids
    else:
        where, params = "list_contains(?, run_id)", [ids]
    found = con.execute(
        f"SELECT run_id, received_at, content_sha256 FROM runs WHERE {where}", params
    ).fetchall()
    acks: dict[str, Ack] = {r[0]: Ack(*r) for r in found}
    now = utc_now()
    fresh: list[dict[str, Any]] = []
    results: list[Ack | Exception] = []
    for row in rows:
        ack = acks.get(row["run_id"])
        if ack is None:
            misfits = columns.misfits(row)
            if misfits:  # a value no column holds: refused before it is acknowledged
                results.append(InvalidRecord("run", "; ".join(misfits)))
                continue
            row = {**row, "received_at": row["received_at"] or now}
            ack = acks[row["run_id"]] = Ack(row["run_id"], row["received_at"],
                                            row["content_sha256"])
            fresh.append(row)
            results.append(ack)
        elif ack.content_sha256 == row["content_sha256"]:
            results.append(ack)
        else:
            results.append(RunConflict(
                f"run_id {row['run_id']}: already stored with different content "
                f"(sha256 {ack.content_sha256[:12]}...); a new run needs a new run_id"))
    if fresh:
        outliers.groups_changed(con, con.execute(
            f"{columns.INSERT_ROWS} RETURNING {outliers.changed()}", columns.column_lists(fresh)
        ).fetchall())
    return results


def _probe(path: Path) -> None:
    """Write and sync PROBE_BYTES at `path`, then remove it: whether a write of about a
    run's size can be made durable now (raises OSError when not)."""
    try:
        with path.open("wb") as out:
            out.write(bytes(PROBE_BYTES))
            out.flush()
            os.fdatasync(out.fileno())
    finally:
        path.unlink(missing_ok=True)
