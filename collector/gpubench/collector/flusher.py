"""Every write of the runs table: the flusher thread, which inserts the journal's
acknowledged runs into DuckDB in bulk and rescores the outlier groups they joined, and
the other changes of runs (deletes, bulk loads, quarantine retries), all under the
database's write lock.

The flusher inserts the backlog's pending runs hundreds per commit, at most
FLUSH_INTERVAL_S (collector.backlog) after they arrived, and deletes the journal's
segments once that commit has returned; opening the store inserts whatever a crash
left in the journal (`replay`). Outlier flags and the group figures are recomputed
for the groups a change touched: after deletes at once, after inserts at most every
RESCORE_INTERVAL_S (readers compute the touched groups afresh meanwhile).

A run the database refuses (a value its column cannot hold) must not hold up the
runs after it: when a bulk insert is refused, the rows the database refuses are
found by bisection (collector.quarantine) and kept in the quarantine table with the
reason, the others are stored, and an error is logged. Nothing acknowledged leaves
the quarantine but by `gpubench-collector quarantine retry | drop`, and a journal
entry that cannot be stored (not even read) never keeps the store from opening.

While writes fail (a full disk), the flusher probes the journal every
FLUSH_INTERVAL_S, so that the collector says SERVING again once they would succeed
without waiting for a submission, and opens a database a fatal error broke again.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import duckdb
import pyarrow as pa

from gpubench.collector import backlog, columns, outliers
from gpubench.collector.backlog import Backlog
from gpubench.collector.database import Database, registered, transaction
from gpubench.collector.errors import StorageUnavailable
from gpubench.collector.quarantine import (
    QuarantinedRun,
    QuarantineTable,
    acknowledged,
    first_line,
    insert_sorting_out,
    refusal_reason,
    refused_by_database,
)
from gpubench.collector.rows import run_row
from gpubench.errors import InvalidRecord, NotFound
from gpubench.v1 import run_pb2

log = logging.getLogger(__name__)

# Inserted runs leave their outlier groups unscored; the flusher rescores them at most
# this often (seconds). Readers compute unscored groups' flags themselves meanwhile.
RESCORE_INTERVAL_S = 1.0


class Flusher:
    """The runs table's writer: the flusher thread and the writes made for callers."""

    def __init__(self, database: Database, intake: Backlog, quarantine: QuarantineTable) -> None:
        self._db = database
        self._backlog = intake
        self._quarantine = quarantine
        self._rescored_at = time.monotonic()
        self._probed_at = 0.0  # when the flusher last probed a failing journal (monotonic)
        # For benchmarks: flushes into DuckDB and the runs they inserted; for operators
        # (the Stats call), the time they take.
        self.flushes = 0
        self.flushed_runs = 0
        self.flush_seconds_total = 0.0
        self.flush_seconds_last = 0.0
        self._thread: threading.Thread | None = None
        database.on_broken = self._wake

    def start(self) -> None:
        """Start the flusher thread (once the journal's leftovers are stored)."""
        self._thread = threading.Thread(target=self._loop, name="store-flusher", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop the flusher thread; what is pending stays for `finish`."""
        with self._backlog.lock:
            self._backlog.closing = True
            self._backlog.lock.notify_all()
        if self._thread is not None:
            self._thread.join()

    def finish(self) -> None:
        """Store what is pending and close the journal (the store is closing; called with
        the write lock held)."""
        try:
            self.catch_up()
        except Exception:  # nothing is lost: the journal is replayed on open
            log.exception("could not store the journal's runs on close; "
                          "they are stored when the database is next opened")
        self._backlog.journal.close()

    def _wake(self) -> None:
        with self._backlog.lock:  # (reentrant)
            self._backlog.lock.notify_all()

    def _loop(self) -> None:
        """The flusher thread: the journal into DuckDB, and outlier rescoring, when due;
        and while journal writes fail, a probe every FLUSH_INTERVAL_S."""
        intake = self._backlog
        while True:
            with intake.lock:
                while not intake.closing:
                    now = time.monotonic()
                    waits = []
                    due = intake.flush_due_in(now)
                    if due is not None:
                        waits.append(due)
                    if intake.unscored:
                        waits.append(self._rescored_at + RESCORE_INTERVAL_S - now)
                    if intake.durability.failing("journal") or self._db.broken:
                        waits.append(self._probed_at + backlog.FLUSH_INTERVAL_S - now)
                    if waits and min(waits) <= 0:
                        break
                    intake.lock.wait(min(waits) if waits else None)
                if intake.closing:
                    return  # close() flushes what is left
                if (intake.durability.failing("journal")
                        and time.monotonic() - self._probed_at >= backlog.FLUSH_INTERVAL_S):
                    self._probe_journal()
            failed = False
            with self._db.write_lock:
                try:
                    if self._db.broken:
                        self._probed_at = time.monotonic()
                        with intake.writing("database", f"opening {self._db.path} again"):
                            self._db.reopen()
                    self.flush()
                except StorageUnavailable:  # logged when it began; the runs stay pending
                    failed = True
                except Exception:  # the runs stay in the journal and pending: retried
                    log.exception("storing the journal's runs in the database failed; "
                                  "will retry")
                    failed = True
                if intake.unscored and (
                    time.monotonic() - self._rescored_at >= RESCORE_INTERVAL_S
                ):
                    self._rescore_unscored()
            if failed:
                with intake.lock:
                    intake.lock.wait(backlog.FLUSH_INTERVAL_S)

    def _probe_journal(self) -> None:
        """Whether journal writes succeed again (called with the backlog's lock held, so
        that no append fails while a probe succeeds)."""
        self._probed_at = time.monotonic()
        try:
            self._backlog.journal.probe()
        except OSError:
            return  # still failing: the next probe is due in FLUSH_INTERVAL_S
        self._backlog.durability.recovered("journal")

    def flush(self) -> None:
        """Insert every pending run into DuckDB in one commit (those it refuses into
        quarantine), then drop their journal.

        Called with the write lock held. Raises an error that is not about the rows (the
        disk: StorageFull or StorageUnavailable; the database itself); the runs then
        stay pending (and journaled) for the next try.
        """
        intake = self._backlog
        with intake.lock:
            if not intake.pending:
                return
            rows = list(intake.pending.values())
            with intake.writing("journal", f"starting a segment of {intake.journal.folder}"):
                sealed = intake.journal.seal()  # every pending run is in these segments
        started = time.monotonic()
        with intake.writing("database", f"storing acknowledged runs in {self._db.path}"):
            self._store_rows(rows)
        self.flush_seconds_last = time.monotonic() - started
        self.flush_seconds_total += self.flush_seconds_last
        intake.durability.recovered("database")
        intake.stored(rows)
        intake.journal.drop(sealed)
        self.flushes += 1
        self.flushed_runs += len(rows)

    def catch_up(self) -> None:
        """Insert every pending run, then rescore the outlier groups waiting for it.
        Called with the write lock held; raises what `flush` raises."""
        self.flush()
        if self._backlog.unscored:
            self._rescore_unscored()

    def _store_rows(self, rows: list[dict[str, Any]]) -> None:
        """Insert rows into the runs table; the rows the database refuses go to quarantine.

        Raises an error that is not about the rows (the disk, the database itself); the
        rows inserted before it stay, and inserting them again keeps them as stored.
        """
        refused = insert_sorting_out(rows, self._insert, refused_by_database)
        if refused:
            self._quarantine.hold([(row, refusal_reason(row, exc)) for row, exc in refused])

    def _insert(self, rows: Sequence[dict[str, Any]]) -> None:
        """Insert rows in one statement (it commits by itself, atomically and durably:
        no BEGIN and COMMIT statements, about a tenth of a small commit's CPU)."""
        # Their groups are unscored before any reader can see the rows in DuckDB; not
        # the group of a row whose values no column holds: the insert refuses it, and
        # the rescore could not even name its group.
        groups = {g for g in map(outliers.group_of, rows) if g is not None}
        self._backlog.mark_unscored({
            g for g in groups
            if not columns.misfits(dict(zip(outliers.OUTLIER_GROUP, g, strict=True)),
                                   outliers.OUTLIER_GROUP)})
        values = columns.column_lists(rows)
        con = self._db.cursor()
        try:
            con.execute(columns.INSERT_ROWS, values)
        except duckdb.ConstraintException:
            # Some are stored already: the journal replayed after a crash that came between
            # a flush's commit and the deletion of its segments. The stored rows stay.
            log.warning("%d run(s) to insert; some were stored already and are kept as stored",
                        len(rows))
            con.execute(columns.INSERT_ROWS.replace("INSERT INTO", "INSERT OR IGNORE INTO", 1),
                        values)

    def _rescore_unscored(self) -> None:
        groups = set(self._backlog.unscored)
        con = self._db.cursor()
        try:
            with transaction(con):
                outliers.rescore(con, groups)
        except Exception:  # the writer must live on: the runs are stored, only flags lag
            log.exception("rescoring outliers failed; will retry")
        else:
            self._backlog.rescored(groups)
        self._rescored_at = time.monotonic()

    def replay(self) -> None:
        """Store the runs a previous process acknowledged but did not insert (a crash);
        an entry the database refuses, or whose record cannot even be read, goes to
        quarantine instead of keeping the store from opening."""
        journal = self._backlog.journal
        entries = journal.read_leftovers()
        if entries:
            rows: dict[str, dict[str, Any]] = {}
            unreadable: dict[str, tuple[dict[str, Any], str]] = {}
            for entry in entries:
                if entry.run_id in rows or entry.run_id in unreadable:
                    continue
                try:
                    rows[entry.run_id] = _stored_row(entry.record, entry.submitter,
                                                     entry.received_at, entry.content_sha256)
                except Exception as exc:  # a record no run can be made of: kept as it is
                    fields = acknowledged(entry.run_id, entry.submitter, entry.received_at,
                                          entry.content_sha256, entry.record)
                    unreadable[entry.run_id] = (fields, f"unreadable record: {first_line(exc)}")
            self._store_rows(list(rows.values()))
            if unreadable:
                self._quarantine.hold(list(unreadable.values()))
            self._rescore_unscored()
            log.info("%s: stored %d acknowledged run(s) from %s", self._db.path, len(rows),
                     journal.folder)
        journal.drop(list(journal.leftovers))

    # -- the other writes of runs -----------------------------------------------------------

    def rescore_all(self) -> None:
        """Recompute the outlier flags of every group (after a bulk load)."""
        with self._db.write_lock:
            con = self._db.cursor()
            with transaction(con):
                outliers.rescore(con, None)

    def bulk_load(self, table: pa.Table) -> None:
        """Append rows given as an Arrow table of RUN_COLUMNS (no validation, no rescoring)."""
        with self._db.write_lock:
            self.flush()
            con = self._db.cursor()
            rows = table.select(columns.RUN_COLUMNS.names).cast(columns.RUN_COLUMNS)
            with self._backlog.lock:  # no submission of one of these run_ids slips in between
                with registered(con, "pending_runs", rows), transaction(con):
                    con.execute("INSERT INTO runs BY NAME SELECT * FROM pending_runs")
                self._backlog.known.add(rows.column("run_id").to_pylist())

    def delete(self, run_id: str) -> str:
        """Delete a run (and rescore its group); returns its submitter. NotFound if absent."""
        with self._db.write_lock:
            self.flush()
            con = self._db.cursor()
            cols = ", ".join(outliers.OUTLIER_GROUP)
            rows = con.execute(
                f"SELECT submitter, status, {cols} FROM runs WHERE run_id = ?", [run_id]
            ).fetchall()
            if not rows:
                raise NotFound(f"run_id {run_id}: no such run")
            with transaction(con):
                con.execute("DELETE FROM runs WHERE run_id = ?", [run_id])
                if rows[0][1] == "ok":  # (a group a flagged run is not in: nothing changes)
                    outliers.rescore(con, {tuple(rows[0][2:])})
            return rows[0][0]

    def retry_quarantined(
        self, run_ids: Sequence[str] = ()
    ) -> tuple[list[str], list[QuarantinedRun]]:
        """Try again to store runs held in quarantine (those of `run_ids`; empty: every
        one), after the cause is fixed. The runs stored leave quarantine; returns their
        run_ids, and the runs still refused with the database's new reason."""
        with self._db.write_lock:
            rows: list[dict[str, Any]] = []
            refused: list[tuple[dict[str, Any], str]] = []
            for held in self._quarantine.records(run_ids):
                try:
                    rows.append(_stored_row(held[4], *held[1:4]))
                except Exception as exc:  # still no run can be made of it
                    refused.append((acknowledged(*held), f"unreadable record: {first_line(exc)}"))
            refused += [(row, refusal_reason(row, exc)) for row, exc in
                        insert_sorting_out(rows, self._insert, refused_by_database)]
            still = {row["run_id"] for row, _ in refused}
            stored = [row["run_id"] for row in rows if row["run_id"] not in still]
            if stored:
                self._quarantine.release(stored)
                log.warning("%s: stored %d run(s) from quarantine: %s", self._db.path,
                            len(stored), ", ".join(stored))
            if refused:
                self._quarantine.hold(refused, announce=False)
            if self._backlog.unscored:
                self._rescore_unscored()
            return stored, self._quarantine.held(sorted(still)) if still else []

    def drop_quarantined(self, run_ids: Sequence[str]) -> list[QuarantinedRun]:
        """Delete runs from quarantine for good (each named: there is no "all"); returns
        what was dropped. NotFound names a run_id quarantine does not hold."""
        if not run_ids:
            raise InvalidRecord("run_ids", "name the runs to drop (quarantine list shows them)")
        with self._db.write_lock:
            dropped = self._quarantine.held(run_ids)
            self._quarantine.release(run_ids)
        for run in dropped:
            log.warning("%s: dropped run %s (submitter %s, acknowledged %s UTC) from "
                        "quarantine; it was never stored", self._db.path, run.run_id,
                        run.submitter, run.received_at)
        return dropped


def _stored_row(
    blob: bytes, submitter: str, received_at: datetime, content_sha256: str
) -> dict[str, Any]:
    """The runs-table row of an acknowledged run, as it was acknowledged (its record's
    bytes and hash as journaled, not serialised again)."""
    row = run_row(run_pb2.Run.FromString(blob), submitter)
    row.update(received_at=received_at, content_sha256=content_sha256, record=blob)
    return row
