"""The collector's store: runs and tokens in one DuckDB file.

This is the only module that talks to DuckDB. It keeps one connection to the
file and hands each thread its own cursor (DuckDB cursors are connections of
their own and safe to use side by side). Every write goes through one lock, so
concurrent RPCs never produce transaction conflicts.

Submissions are group-committed: RPC threads queue their run and wait; a writer
thread takes everything queued, sets resubmissions aside (their first
acknowledgement is answered again), appends the new runs to the intake journal
(collector.intake) with one fdatasync, and only then wakes the waiting threads
with their acknowledgements. A flusher thread inserts the journal's runs into
DuckDB in bulk, hundreds per commit, at most FLUSH_INTERVAL_S after they arrived,
and deletes the journal's segments once that commit has returned; opening the
store inserts whatever a crash left in the journal. Every read of the runs first
flushes what is pending, so a reader sees every run acknowledged before it asked.
(`submit_row` queues without waiting: the multi-process collector's owner answers
from the future instead.)

Outlier flags and the per-group figures Compare reads (table group_figures) are
recomputed for the groups a change touched: after deletes and imports at once,
after submissions at most every RESCORE_INTERVAL_S, and always before a read. Runs
flagged as implausible (collector.plausibility, decided when the row is made) and
published runs (transcribed, not measured) are in no outlier group: Compare reads them
apart, the leaderboard leaves them out.

A run the database refuses (a value its column cannot hold) must not hold up the
runs after it: when a bulk insert is refused, the rows the database refuses are
found by bisection (collector.quarantine) and kept in the quarantine table with the
reason, the others are stored, and an error is logged. `gpubench-collector
quarantine list | retry | drop` deals with them; nothing acknowledged leaves the
quarantine but by that command, and a journal entry that cannot be stored (not even
read) never keeps the store from opening.
"""

from __future__ import annotations

import base64
import contextlib
import logging
import os
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
from gpubench.collector import compare, migrations
from gpubench.collector.compare import GroupFigures
from gpubench.collector.durability import Durability, storage_error
from gpubench.collector.errors import (
    DatabaseLocked,
    RunConflict,
    SchemaTooNew,
    ShuttingDown,
    StorageUnavailable,
    TokenExists,
)
from gpubench.collector.intake import Journal, JournalEntry, KnownRuns, journal_folder
from gpubench.collector.quarantine import QuarantinedRun, first_line, insert_sorting_out
from gpubench.collector.rows import REASON_SEPARATOR, Ack, run_row, utc_now
from gpubench.collector.stats import SubmissionCounts

from gpubench import record
from gpubench.errors import InvalidRecord, NotFound
from gpubench.v1 import collector_pb2, run_pb2

log = logging.getLogger(__name__)

# Robust z-score (Iglewicz and Hoaglin): 0.6745 * (x - median) / MAD; beyond 3.5 is an outlier.
OUTLIER_THRESHOLD = 3.5
# ... and only this far from its group's median: in a tight group the MAD is tiny, and the
# z-score alone flagged two of five default B0 runs on one H200 that agree within 4%
# (docs/results/h200-default-run.md, the repeats). Honest repeats on one card differ by a
# few percent; a tenth is not measurement noise.
OUTLIER_MIN_SHARE = 0.10
# A GPU configuration: the cards, how many, and a --memory-limit (a smaller card).
CONFIG_COLUMNS = ("gpu_name", "gpu_count", "memory_limit_bytes")
# The columns that decide which runs are "the same GPU configuration" for outliers,
# in the order of group_figures' first columns: the configuration, and everything that
# changes what was timed (compare.DIMENSIONS). train_images: a smoke run on a subset
# of the images (agent --limit-images) is not timed like a full run; settings: nor is a
# run computed or fed differently (record.settings_label: "keras", "kernels", ...);
# batch_rule: nor one whose batch was chosen by another rule ("steps", "largest", ...);
# pipeline: nor one that decoded its images in the epoch (seed) or streamed them; nor one
# of other weights, data (a real folder against the synthetic set) or number of epochs.
OUTLIER_GROUP = (
    "model", *CONFIG_COLUMNS, "backend", "precision", "image_size", "train_images",
    "settings", "batch_rule", "pipeline", "weights", "data", "epochs", "benchmark_version",
)
# The runs that belong to outlier groups (and so to Compare's figures): measured, OK,
# not flagged as implausible.
SCORED_RUNS = ("status = 'ok' AND epoch2_seconds IS NOT NULL AND NOT published "
               "AND NOT flagged")
# The protocol's training set (1709 images): the leaderboard ranks only runs of it.
STANDARD_TRAIN_IMAGES = record.STANDARD_TRAIN_IMAGES
# The most runs one group commit inserts; more wait for the next commit.
MAX_BATCH = 1024
# How long a group commit waits for more submissions when there is concurrency (s):
# long enough for the submitters the last commit answered to send their next run on a
# busy machine (each journal write waits for the disk however few runs it carries).
COMMIT_DELAY_S = 0.005
# The journal is flushed into DuckDB once it holds this many runs, or FLUSH_INTERVAL_S
# after its oldest arrived. A DuckDB commit costs a few ms of CPU plus about 0.03 ms a
# run: 16 runs a commit spend 0.3-0.4 ms of CPU per run, 1024 about 0.03 ms.
FLUSH_ROWS = 1024
FLUSH_INTERVAL_S = 1.0
# Acknowledged runs not yet in DuckDB beyond which the writer waits for the flusher.
MAX_PENDING = 16 * FLUSH_ROWS
# Submissions leave their outlier groups "dirty"; the writer rescores dirty groups
# at most this often (seconds), and any read of the flags rescores first.
RESCORE_INTERVAL_S = 1.0

# The runs table's columns in insert order, with their Arrow types (columns added by
# later migrations come last, where ALTER TABLE puts them).
RUN_COLUMNS = pa.schema(
    [
        ("run_id", pa.string()),
        ("content_sha256", pa.string()),
        ("submitter", pa.string()),
        ("received_at", pa.timestamp("us")),
        ("created_at", pa.timestamp("us")),
        ("schema_version", pa.int32()),
        ("benchmark_version", pa.string()),
        ("label", pa.string()),
        ("status", pa.string()),
        ("model", pa.string()),
        ("backend", pa.string()),
        ("precision", pa.string()),
        ("image_size", pa.int32()),
        ("gpu_name", pa.string()),
        ("gpu_count", pa.int32()),
        ("batch_per_gpu", pa.int32()),
        ("global_batch", pa.int32()),
        ("train_images", pa.int32()),
        ("epoch2_seconds", pa.float64()),
        ("train_images_per_second", pa.float64()),
        ("peak_memory_bytes", pa.uint64()),
        ("memory_total_bytes", pa.uint64()),
        ("energy_per_epoch_joules", pa.float64()),
        ("images_per_joule", pa.float64()),
        ("outlier", pa.bool_()),
        ("outlier_score", pa.float64()),
        ("record", pa.binary()),
        ("settings", pa.string()),
        ("batch_rule", pa.string()),
        ("largest_batch_per_gpu", pa.int32()),
        ("pipeline", pa.string()),
        ("weights", pa.string()),
        ("data", pa.string()),
        ("epochs", pa.int32()),
        ("memory_limit_bytes", pa.uint64()),
        ("published", pa.bool_()),
        ("flagged", pa.bool_()),
        ("flag_reasons", pa.string()),
    ]
)


@dataclass(frozen=True)
class TokenRow:
    """A stored access token (never the secret, only its hash)."""

    name: str
    admin: bool
    created_at: datetime
    revoked: bool
    last_used_at: datetime | None
    secret_sha256: str = ""


@dataclass(frozen=True)
class RunFilter:
    """Which runs to list; empty/zero fields match everything."""

    gpu_name: str = ""  # case-insensitive substring
    model: str = ""
    backend: str = ""
    precision: str = ""
    gpu_count: int = 0
    submitter: str = ""
    since: datetime | None = None  # created_at, UTC
    until: datetime | None = None


@dataclass(frozen=True)
class CompareQuery:
    """Which runs a comparison covers; empty/zero fields match everything."""

    model: str
    precision: str = ""
    backend: str = ""
    image_size: int = 0
    train_images: int = 0  # training images per epoch
    settings: str = ""  # record.settings_label: "keras", "kernels+data-on-device", ...
    batch_rule: str = ""  # how the batch was chosen: "steps", "largest", "given", "quick"
    pipeline: str = ""  # as it ran: "cached", "cached-on-device", "streaming", "seed"
    weights: str = ""
    data: str = ""  # record.data_label: "synthetic-rps", "sha256:..."
    epochs: int = 0
    benchmark_version: str = ""
    gpu_names: tuple[str, ...] = ()  # exact, case-insensitive, normalised
    include_outliers: bool = False
    include_flagged: bool = False
    allow_mixed: bool = False


@dataclass(frozen=True)
class LeaderboardQuery:
    """Which runs a leaderboard ranks: one model, one settings label and one batch rule
    (the default run's unless asked), optionally one precision and backend."""

    model: str
    precision: str = ""
    backend: str = ""
    settings: str = record.DEFAULT_SETTINGS
    batch_rule: str = record.DEFAULT_BATCH_RULE
    benchmark_version: str = ""  # empty: the newest (numerically) with such runs
    include_flagged: bool = False
    limit: int = 20


@dataclass(frozen=True)
class LeaderboardRow:
    """One GPU configuration on a model's leaderboard."""

    gpu_name: str
    gpu_count: int
    backend: str
    precision: str
    settings: str
    pipeline: str
    weights: str
    data: str
    epochs: int
    batch_rule: str
    runs: int
    best_epoch2_seconds: float
    epoch2_median_seconds: float
    train_images_per_second_median: float | None
    max_batch_per_gpu: int


@dataclass
class _Pending:
    row: dict[str, Any]
    future: Future = field(default_factory=Future)


def _usable_cores() -> int:
    # DuckDB sizes its thread pool by the machine's cores; a container's CPU set or
    # `taskset` may allow fewer, and more threads than cores only contend.
    if hasattr(os, "sched_getaffinity"):
        return max(len(os.sched_getaffinity(0)), 1)
    return os.cpu_count() or 1


# The runs table's column types in DuckDB's words, for the insert below.
_SQL_TYPES = {
    pa.string(): "VARCHAR", pa.timestamp("us"): "TIMESTAMP", pa.int32(): "INTEGER",
    pa.int64(): "BIGINT",
    pa.float64(): "DOUBLE", pa.uint64(): "UBIGINT", pa.bool_(): "BOOLEAN", pa.binary(): "BLOB",
}
# Inserts a batch given as one list per column: a single parameterised statement, which
# costs DuckDB less per transaction than registering an Arrow table or one row at a time.
# Each column is named (AS c1, ...): unnamed, DuckDB names it after its expression and
# renders every value of the list into that name, the records' bytes included, which
# cost about a fifth of the statement's CPU with 16 runs.
def insert_rows_sql(columns: pa.Schema) -> str:
    """The insert of a batch of rows of `columns` (the runs table's, in its order)."""
    return "INSERT INTO runs SELECT " + ", ".join(
        f"unnest(${i}::{_SQL_TYPES[field.type]}[]) AS c{i}"
        for i, field in enumerate(columns, start=1)
    )


_INSERT_ROWS = insert_rows_sql(RUN_COLUMNS)


class Store:
    """Runs and tokens in a DuckDB file; safe to share between threads."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            self._conn: duckdb.DuckDBPyConnection | None = self._connect()
        except duckdb.IOException as exc:
            if "lock" in str(exc).lower():
                raise DatabaseLocked(
                    f"{self.path}: the database is in use by another process (a running collector?)"
                ) from exc
            raise
        self._cursor_lock = threading.Lock()
        self._cursors: list[duckdb.DuckDBPyConnection] = []
        self._local = threading.local()
        # A fatal error (a checkpoint on a full disk) leaves DuckDB refusing every
        # statement until the database is opened again: the flusher does so (_reopen),
        # and each opening gets a new epoch, so that threads take new cursors.
        self._broken = False
        self._epoch = 0
        self._write_lock = threading.Lock()
        self._closed = False
        # Whether journal and database writes succeed now (the health service listens).
        self.durability = Durability()
        self._probed_at = 0.0  # when the flusher last probed a failing journal (monotonic)
        # Outlier groups with runs inserted but not yet rescored.
        self._dirty_groups: set[tuple] = set()
        self._rescored_at = time.monotonic()
        try:
            self._migrate()
            # The database's file lock is held now: no other collector uses this journal.
            self._journal = Journal(journal_folder(self.path))
            self._replay_journal()
            self._known = KnownRuns(
                r for (r,) in self._conn.execute(
                    "SELECT run_id FROM runs UNION ALL SELECT run_id FROM quarantine"
                ).fetchall()
            )
        except BaseException:
            self._conn.close()  # release the file: nothing else may use it now
            raise
        held = self.quarantine_count()
        if held:
            log.warning("%s: %d acknowledged run(s) held in quarantine, refused by the "
                        "database; see `gpubench-collector quarantine list`", self.path, held)
        # Acknowledged runs in the journal, not yet in DuckDB: run_id -> row. Guarded by
        # _intake (which the flusher also waits on), taken after _write_lock if both are.
        self._pending: dict[str, dict[str, Any]] = {}
        self._pending_since = 0.0  # when the oldest pending run arrived (monotonic)
        self._intake = threading.Condition()
        self._queue: list[_Pending] = []
        # How many submitters were active at the last commit: the next one waits for them.
        self._expected = 0
        # For benchmarks: group commits (journal writes) and the runs they acknowledged;
        # flushes into DuckDB and the runs they inserted.
        self.commits = 0
        self.committed_runs = 0
        self.flushes = 0
        self.flushed_runs = 0
        # For operators (the Stats call): submissions acknowledged and refused, and the
        # time bulk inserts into DuckDB take.
        self.submissions = SubmissionCounts()
        self.flush_seconds_total = 0.0
        self.flush_seconds_last = 0.0
        self._queue_ready = threading.Condition()
        self._stopping = False
        self._writer = threading.Thread(target=self._write_loop, name="store-writer", daemon=True)
        self._writer.start()
        self._flusher_stopping = False
        self._flusher = threading.Thread(target=self._flush_loop, name="store-flusher",
                                         daemon=True)
        self._flusher.start()

    # -- plumbing ---------------------------------------------------------------------------

    def _connect(self) -> duckdb.DuckDBPyConnection:
        return duckdb.connect(str(self.path), config={"threads": _usable_cores()})

    def _cursor(self) -> duckdb.DuckDBPyConnection:
        if self._closed:  # a thread's cursor is closed with the store: say why
            raise ShuttingDown("collector shutting down (its database is closed)")
        cursor = getattr(self._local, "cursor", None)
        if cursor is None or getattr(self._local, "epoch", None) != self._epoch:
            with self._cursor_lock:
                if self._closed:
                    raise ShuttingDown("collector shutting down (its database is closed)")
                if self._conn is None:
                    raise StorageUnavailable(f"cannot store runs now: {self.path} is being "
                                             "opened again after a fatal error; retry later")
                cursor = self._conn.cursor()
                self._cursors.append(cursor)
            self._local.cursor, self._local.epoch = cursor, self._epoch
        return cursor

    def _reopen(self) -> None:
        """Open the database again after a fatal error (called by the flusher with
        _write_lock held; raises when it cannot yet: retried). DuckDB replays its log;
        the runs not yet inserted are still pending and journaled."""
        with self._cursor_lock:
            if self._closed:
                return
            for cursor in self._cursors:  # every cursor, or the broken database stays open
                with contextlib.suppress(duckdb.Error):
                    cursor.close()
            self._cursors = []
            if self._conn is not None:
                with contextlib.suppress(duckdb.Error):
                    self._conn.close()
                self._conn = None
            self._epoch += 1
            self._conn = self._connect()
        self._broken = False
        log.warning("%s: opened again after a fatal error of the database", self.path)

    def _migrate(self) -> None:
        con = self._conn
        con.execute(migrations.CREATE_LEDGER)
        applied = {name for (name,) in con.execute("SELECT name FROM schema_migrations").fetchall()}
        newer = migrations.unknown(applied)
        if newer:
            raise SchemaTooNew(
                f"{self.path}: written by a newer collector (migrations {', '.join(newer)}); "
                "upgrade gpubench"
            )
        pending = migrations.pending(applied)
        # The figures are computed in this code's shape of group_figures, which exists
        # only once every pending migration has run: only the last one that asks refills.
        refills = [m for m in pending if m.refill_group_figures]
        for migration in pending:
            with _transaction(con):
                for statement in migration.statements:
                    con.execute(statement)
                if migration.backfill is not None:
                    migration.backfill(con)
                if refills and migration is refills[-1]:
                    self._rescore(con, None)
                con.execute(
                    "INSERT INTO schema_migrations VALUES (?, ?)", [migration.name, utc_now()]
                )

    def applied_migrations(self) -> list[str]:
        """The names of the migrations this database has had, in order applied."""
        rows = self._cursor().execute(
            "SELECT name FROM schema_migrations ORDER BY applied_at, name"
        ).fetchall()
        return [name for (name,) in rows]

    def close(self) -> None:
        """Finish queued submissions, flush the journal into DuckDB, checkpoint, close."""
        with self._queue_ready:
            self._stopping = True
            self._queue_ready.notify_all()
        self._writer.join()
        with self._intake:
            self._flusher_stopping = True
            self._intake.notify_all()
        self._flusher.join()
        with self._write_lock:
            if self._closed:
                return
            try:
                self._catch_up()
            except Exception:  # nothing is lost: the journal is replayed on open
                log.exception("could not store the journal's runs on close; "
                              "they are stored when the database is next opened")
        with self._cursor_lock:
            if self._closed:
                return
            self._closed = True
            with self._write_lock:
                self._journal.close()
                # Cursors first: one holding an unread result keeps its transaction open,
                # and an open transaction prevents the checkpoint.
                for cursor in self._cursors:
                    cursor.close()
                if self._conn is None:  # not opened again after a fatal error
                    return
                try:
                    self._conn.execute("CHECKPOINT")
                except duckdb.Error as exc:  # an open transaction, a full disk
                    # Nothing is lost: opening the file replays the write-ahead log.
                    log.warning("could not checkpoint on close (%s); the log is replayed on "
                                "open", str(exc).splitlines()[0])
            self._conn.close()

    # -- submissions ------------------------------------------------------------------------

    def submit(self, run: run_pb2.Run, submitter: str) -> Ack:
        """Store a validated run durably and return its acknowledgement.

        The same run_id with the same content returns the first acknowledgement;
        with different content it raises RunConflict.
        """
        return self.submit_row(run_row(run, submitter)).result()

    def submit_row(self, row: dict[str, Any]) -> Future:
        """Queue a row made by `run_row` for the next group commit, without waiting.

        The future resolves to the Ack once the commit holding the row has returned
        (or to RunConflict, or the database's error). Callers that serve many
        submissions from one thread (the multi-process collector's owner) use this
        and answer from the future's callback instead of parking a thread per run.
        """
        pending = _Pending(row)
        with self._queue_ready:
            if self._stopping:
                refused = ShuttingDown("collector shutting down (its database is closing)")
                self.submissions.refuse(refused)
                raise refused
            self._queue.append(pending)
            self._queue_ready.notify()
        pending.future.add_done_callback(self._count_outcome)
        return pending.future

    def _count_outcome(self, future: Future) -> None:
        """Count a submission's outcome (acknowledged, or refused by the store)."""
        error = future.exception()
        if error is None:
            self.submissions.accept()
        else:
            self.submissions.refuse(error)

    def submit_many(self, runs: Iterable[run_pb2.Run], submitter: str) -> list[Ack | Exception]:
        """Store many validated runs at once, in DuckDB and rescored before this returns;
        per run an Ack or the RunConflict."""
        pendings = [_Pending(run_row(run, submitter)) for run in runs]
        with self._write_lock:
            self._accept(pendings, wait_for_room=False)
            self._catch_up()
        return [p.future.exception() or p.future.result() for p in pendings]

    def _write_loop(self) -> None:
        while True:
            with self._queue_ready:
                while not self._queue and not self._stopping:
                    self._queue_ready.wait()
                self._gather()
                batch, self._queue = self._queue[:MAX_BATCH], self._queue[MAX_BATCH:]
                stopping = self._stopping
            if batch:
                self._accept(batch)
                self.commits += 1
                self.committed_runs += len(batch)
            if stopping and not batch:
                return
            with self._queue_ready:
                # Who is submitting now: everyone this commit answered (they are about to
                # send their next run) and everyone who queued while it ran.
                self._expected = min(len(batch) + len(self._queue), MAX_BATCH)

    def _gather(self) -> None:
        """Under concurrency, wait briefly until every active submitter has queued a run.

        After a commit wakes N waiting submitters, most send their next run within a
        millisecond or two; committing the first alone would make the others wait for
        a commit of their own. Waiting for all of them, not only as many as the last
        commit had, matters as much: otherwise two half-sized batches alternate, each
        paying a whole commit (a few ms of DuckDB CPU however few rows it carries).
        Like PostgreSQL's commit_delay, this costs latency only when there is
        concurrency. Called with the queue's lock held.
        """
        if self._expected <= 1 or len(self._queue) >= self._expected:
            return
        deadline = time.monotonic() + COMMIT_DELAY_S
        while len(self._queue) < self._expected and not self._stopping:
            left = deadline - time.monotonic()
            if left <= 0:
                return
            self._queue_ready.wait(left)

    def _accept(self, batch: list[_Pending], *, wait_for_room: bool = True) -> None:
        """Journal a batch's new runs, then resolve every waiting future.

        A run_id already acknowledged (in the journal or in DuckDB) is answered with its
        first acknowledgement, or RunConflict if the content differs; only the others
        are written. Nothing is acknowledged before the journal has synced. With
        `wait_for_room`, waits while MAX_PENDING runs are not yet in DuckDB (never
        with _write_lock held: the flusher needs it to make room).
        """
        received_at = utc_now()
        by_id: dict[str, list[_Pending]] = {}
        for pending in batch:
            by_id.setdefault(pending.row["run_id"], []).append(pending)
        acks: dict[str, Ack] = {}
        try:
            with self._intake:
                while (wait_for_room and len(self._pending) >= MAX_PENDING
                       and not self._flusher_stopping):
                    self._intake.wait()  # DuckDB is behind: hold acknowledgements back
                maybe_stored = []
                for run_id in by_id:
                    row = self._pending.get(run_id)
                    if row is not None:
                        acks[run_id] = _ack_of(row)
                    elif run_id in self._known:
                        maybe_stored.append(run_id)
                if maybe_stored:  # a resubmission (or, rarely, a hash that only looks alike)
                    try:
                        acks.update(self._stored_acks(self._cursor(), maybe_stored))
                    except Exception as exc:
                        error = storage_error(exc, f"reading {self.path}")
                        if error is None:
                            raise
                        raise error from exc
                fresh = [group[0].row for run_id, group in by_id.items() if run_id not in acks]
                for row in fresh:
                    row["received_at"] = received_at
                with self._writing("journal", f"writing the intake journal {self._journal.folder}"):
                    self._journal.append(_journal_entry(row) for row in fresh)
                if fresh:
                    self.durability.recovered("journal")
                first = bool(fresh) and not self._pending
                if first:
                    self._pending_since = time.monotonic()
                for row in fresh:
                    self._pending[row["run_id"]] = row
                    acks[row["run_id"]] = _ack_of(row)
                self._known.add(row["run_id"] for row in fresh)
                if first or len(self._pending) >= FLUSH_ROWS:
                    self._intake.notify_all()  # the flusher: set its clock, or flush now
        except Exception as exc:  # the journal or the database failed: nothing was acknowledged
            for pending in batch:
                pending.future.set_exception(exc)
            return
        for run_id, group in by_id.items():
            ack = acks[run_id]
            for pending in group:
                if pending.row["content_sha256"] == ack.content_sha256:
                    pending.future.set_result(ack)
                else:
                    pending.future.set_exception(
                        RunConflict(
                            f"run_id {run_id}: already stored with different content "
                            f"(sha256 {ack.content_sha256[:12]}...); a new run needs a new run_id"
                        )
                    )

    def _flush_loop(self) -> None:
        """The flusher thread: the journal into DuckDB, and outlier rescoring, when due;
        and while journal writes fail, a probe every FLUSH_INTERVAL_S, so that the
        collector says SERVING again once they would succeed, without waiting for a
        submission."""
        while True:
            with self._intake:
                while not self._flusher_stopping:
                    now = time.monotonic()
                    waits = []
                    if self._pending:
                        if len(self._pending) >= FLUSH_ROWS:
                            break
                        waits.append(self._pending_since + FLUSH_INTERVAL_S - now)
                    if self._dirty_groups:
                        waits.append(self._rescored_at + RESCORE_INTERVAL_S - now)
                    if self.durability.failing("journal") or self._broken:
                        waits.append(self._probed_at + FLUSH_INTERVAL_S - now)
                    if waits and min(waits) <= 0:
                        break
                    self._intake.wait(min(waits) if waits else None)
                if self._flusher_stopping:
                    return  # close() flushes what is left
                if (self.durability.failing("journal")
                        and time.monotonic() - self._probed_at >= FLUSH_INTERVAL_S):
                    self._probe_journal()
            failed = False
            with self._write_lock:
                try:
                    if self._broken:
                        self._probed_at = time.monotonic()
                        with self._writing("database", f"opening {self.path} again"):
                            self._reopen()
                    self._flush()
                except StorageUnavailable:  # logged when it began; the runs stay pending
                    failed = True
                except Exception:  # the runs stay in the journal and in _pending: retried
                    log.exception("storing the journal's runs in the database failed; "
                                  "will retry")
                    failed = True
                if self._dirty_groups and (
                    time.monotonic() - self._rescored_at >= RESCORE_INTERVAL_S
                ):
                    self._rescore_dirty()
            if failed:
                with self._intake:
                    self._intake.wait(FLUSH_INTERVAL_S)

    def _probe_journal(self) -> None:
        """Whether journal writes succeed again (called with _intake held, so that no
        append fails while a probe succeeds)."""
        self._probed_at = time.monotonic()
        try:
            self._journal.probe()
        except OSError:
            return  # still failing: the next probe is due in FLUSH_INTERVAL_S
        self.durability.recovered("journal")

    @contextlib.contextmanager
    def _writing(self, part: str, doing: str) -> Iterator[None]:
        """A failure of the storage (a full disk) inside the block raised as StorageFull
        or StorageUnavailable naming `doing`, and noted against `part` ("journal",
        "database") until it writes again; other errors pass unchanged."""
        try:
            yield
        except Exception as exc:
            if isinstance(exc, duckdb.FatalException):  # refuses all until opened again
                self._broken = True
            error = storage_error(exc, doing)
            if error is None:
                raise
            self.durability.failed(part, error)
            with self._intake:  # (reentrant) the flusher: probe or retry from now on
                self._intake.notify_all()
            raise error from exc

    def _flush(self) -> None:
        """Insert every pending run into DuckDB in one commit (those it refuses into
        quarantine), then drop their journal.

        Called with _write_lock held. Raises an error that is not about the rows (the
        disk: StorageFull or StorageUnavailable; the database itself); the runs then
        stay pending (and journaled) for the next try.
        """
        with self._intake:
            if not self._pending:
                return
            rows = list(self._pending.values())
            with self._writing("journal", f"starting a segment of {self._journal.folder}"):
                sealed = self._journal.seal()  # every pending run is in these segments
        started = time.monotonic()
        with self._writing("database", f"storing acknowledged runs in {self.path}, "
                                       "which every read must include"):
            self._store_rows(rows)
        self.flush_seconds_last = time.monotonic() - started
        self.flush_seconds_total += self.flush_seconds_last
        self.durability.recovered("database")
        with self._intake:
            for row in rows:
                if self._pending.get(row["run_id"]) is row:
                    del self._pending[row["run_id"]]
            if self._pending:
                self._pending_since = time.monotonic()
            self._intake.notify_all()  # a writer held back by MAX_PENDING may go on
        self._journal.drop(sealed)
        self.flushes += 1
        self.flushed_runs += len(rows)

    def _store_rows(self, rows: list[dict[str, Any]]) -> None:
        """Insert rows into the runs table; the rows the database refuses go to quarantine.

        Raises an error that is not about the rows (the disk, the database itself); the
        rows inserted before it stay, and inserting them again keeps them as stored.
        """
        refused = insert_sorting_out(rows, self._insert, _refused_by_database)
        if refused:
            self._quarantine([(row, _refusal_reason(row, exc)) for row, exc in refused])

    def _insert(self, rows: list[dict[str, Any]]) -> None:
        """Insert rows in one statement (it commits by itself, atomically and durably:
        no BEGIN and COMMIT statements, about a tenth of a small commit's CPU)."""
        columns = [[r[name] for r in rows] for name in RUN_COLUMNS.names]
        con = self._cursor()
        try:
            con.execute(_INSERT_ROWS, columns)
        except duckdb.ConstraintException:
            # Some are stored already: the journal replayed after a crash that came between
            # a flush's commit and the deletion of its segments. The stored rows stay.
            log.warning("%d run(s) to insert; some were stored already and are kept as stored",
                        len(rows))
            con.execute(_INSERT_ROWS.replace("INSERT INTO", "INSERT OR IGNORE INTO", 1), columns)
        # Only groups that gained runs: a refused row's values may not even fit a query.
        self._dirty_groups.update(_group_key(r) for r in rows if r["status"] == "ok"
                                  and not r["published"] and not r["flagged"])

    def _quarantine(
        self, refused: list[tuple[dict[str, Any], str]], *, announce: bool = True
    ) -> None:
        """Keep acknowledged runs the database refused (row or journal fields, and the
        reason) in the quarantine table, and tell the operator (unless `announce` is
        off: a retry answers its caller instead)."""
        now = utc_now()
        self._cursor().executemany(
            "INSERT OR REPLACE INTO quarantine VALUES (?, ?, ?, ?, ?, ?, ?)",
            [[_text(row["run_id"]), _text(row["submitter"]), row["received_at"],
              _text(row["content_sha256"]), row["record"], _text(reason), now]
             for row, reason in refused],
        )
        for row, reason in refused if announce else ():
            log.error(
                "%s: run %s (submitter %s, acknowledged %s UTC) is held in quarantine, refused "
                "by the database: %s. Once the cause is fixed, `gpubench-collector quarantine "
                "retry %s` stores it; `gpubench-collector quarantine drop %s` drops it",
                self.path, row["run_id"], row["submitter"], row["received_at"], reason,
                row["run_id"], row["run_id"],
            )

    def _replay_journal(self) -> None:
        """Store the runs a previous process acknowledged but did not insert (a crash);
        an entry the database refuses, or whose record cannot even be read, goes to
        quarantine instead of keeping the store from opening."""
        entries = self._journal.read_leftovers()
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
                    fields = _acknowledged(entry.run_id, entry.submitter, entry.received_at,
                                           entry.content_sha256, entry.record)
                    unreadable[entry.run_id] = (fields, f"unreadable record: {first_line(exc)}")
            self._store_rows(list(rows.values()))
            if unreadable:
                self._quarantine(list(unreadable.values()))
            self._rescore_dirty()
            log.info("%s: stored %d acknowledged run(s) from %s", self.path, len(rows),
                     self._journal.folder)
        self._journal.drop(list(self._journal.leftovers))

    def _scored(self) -> duckdb.DuckDBPyConnection:
        """This thread's cursor, after storing pending runs and rescoring their groups.

        Every read of runs goes through here, so a reader always sees every run
        acknowledged before it asked, and its outlier flags.
        """
        if self._pending or self._dirty_groups:
            with self._write_lock:
                self._catch_up()
        return self._cursor()

    def _catch_up(self) -> None:
        """Insert every pending run, then rescore the outlier groups waiting for it.
        Called with _write_lock held; raises what _flush raises."""
        self._flush()
        if self._dirty_groups:
            self._rescore_dirty()

    def _rescore_dirty(self) -> None:
        con = self._cursor()
        try:
            with _transaction(con):
                self._rescore(con, self._dirty_groups)
        except Exception:  # the writer must live on: the runs are stored, only flags lag
            log.exception("rescoring outliers failed; will retry")
        else:
            self._dirty_groups = set()
        self._rescored_at = time.monotonic()

    @staticmethod
    def _stored_acks(con: duckdb.DuckDBPyConnection, run_ids: list[str]) -> dict[str, Ack]:
        """The first acknowledgements of runs stored, or held in quarantine."""
        if len(run_ids) == 1:  # a point lookup uses the primary-key index
            where, params = "run_id = ?", run_ids
        else:
            where, params = "list_contains(?, run_id)", [run_ids]
        rows = con.execute(
            f"SELECT run_id, received_at, content_sha256 FROM runs WHERE {where} UNION ALL "
            f"SELECT run_id, received_at, content_sha256 FROM quarantine WHERE {where}",
            params * 2,
        ).fetchall()
        return {r[0]: Ack(r[0], r[1], r[2]) for r in rows}

    @staticmethod
    def _rescore(con: duckdb.DuckDBPyConnection, groups: set[tuple] | None) -> None:
        """Recompute outlier scores and group figures of the given outlier groups (None: all).

        One statement for all groups: per group the median and the median absolute
        deviation (MAD) of epoch2_seconds; z = 0.6745 * (x - median) / MAD. Where the MAD
        is 0 (half the runs identical) the mean absolute deviation stands in, scaled to
        the MAD's consistency constant (Iglewicz and Hoaglin). An outlier is a run beyond
        OUTLIER_THRESHOLD and more than OUTLIER_MIN_SHARE from its group's median. Only
        changed rows are written.
        """
        if groups is not None and not groups:
            return
        cols = ", ".join(OUTLIER_GROUP)
        where, rows_in, params = "", "", []
        if groups is not None:
            row = "(" + ", ".join("?" * len(OUTLIER_GROUP)) + ")"
            rows_in = ", ".join([row] * len(groups))
            where = f" AND ({cols}) IN ({rows_in})"
            params = [value for key in sorted(groups, key=str) for value in key]
        con.execute(
            f"""
            UPDATE runs SET outlier = abs(s.z) > ? AND abs(s.x - s.med) > ? * s.med,
                            outlier_score = s.z
            FROM (
                WITH g AS (SELECT run_id, {cols}, epoch2_seconds AS x FROM runs
                           WHERE {SCORED_RUNS}{where}),
                     m AS (SELECT {cols}, median(x) AS med FROM g GROUP BY ALL),
                     d AS (SELECT {cols}, median(abs(x - med)) AS mad,
                                  avg(abs(x - med)) AS meanad
                           FROM g JOIN m USING ({cols}) GROUP BY ALL)
                SELECT g.run_id, g.x, m.med,
                    CASE WHEN d.mad > 0 THEN 0.6745 * (g.x - m.med) / d.mad
                         WHEN d.meanad > 0 THEN (g.x - m.med) / (1.253314 * d.meanad)
                         ELSE 0 END AS z
                FROM g JOIN m USING ({cols}) JOIN d USING ({cols})
            ) s
            WHERE runs.run_id = s.run_id AND (runs.outlier_score IS DISTINCT FROM s.z OR
                runs.outlier IS DISTINCT FROM (abs(s.z) > ? AND abs(s.x - s.med) > ? * s.med))
            """,
            [OUTLIER_THRESHOLD, OUTLIER_MIN_SHARE, *params,
             OUTLIER_THRESHOLD, OUTLIER_MIN_SHARE],
        )
        # The figures follow the flags: recompute the touched groups' rows.
        if groups is None:
            # A run that left the groups (flagged on an upgrade) keeps no old outlier flag;
            # only a full rescore can find one: a run is flagged before it is ever scored.
            con.execute(f"UPDATE runs SET outlier = false, outlier_score = 0 "
                        f"WHERE (outlier OR outlier_score <> 0) AND NOT ({SCORED_RUNS})")
            con.execute("DELETE FROM group_figures")
        else:
            con.execute(f"DELETE FROM group_figures WHERE ({cols}) IN ({rows_in})", params)
        con.execute(
            f"""
            INSERT INTO group_figures
            SELECT {cols}, with_outliers, {_FIGURES}
            FROM (SELECT *, with_outliers OR NOT outlier AS keep
                  FROM runs, (VALUES (true), (false)) AS v(with_outliers)
                  WHERE {SCORED_RUNS}{where})
            GROUP BY {cols}, with_outliers
            HAVING count(*) FILTER (WHERE keep) > 0
            """,
            params,
        )

    def rescore_all(self) -> None:
        """Recompute the outlier flags of every group (after a bulk load)."""
        with self._write_lock:
            con = self._cursor()
            with _transaction(con):
                self._rescore(con, None)

    def bulk_load(self, table: pa.Table) -> None:
        """Append rows given as an Arrow table of RUN_COLUMNS (no validation, no rescoring)."""
        with self._write_lock:
            self._flush()
            con = self._cursor()
            rows = table.select(RUN_COLUMNS.names).cast(RUN_COLUMNS)
            with self._intake:  # no submission of one of these run_ids slips in between
                with _pending_runs(con, rows), _transaction(con):
                    con.execute("INSERT INTO runs SELECT * FROM pending_runs")
                self._known.add(rows.column("run_id").to_pylist())

    # -- backups ----------------------------------------------------------------------------

    def export_to(self, folder: Path) -> dict[str, int]:
        """Write a consistent copy of the database into `folder` (DuckDB's EXPORT
        DATABASE, as Parquet) and return how many runs, tokens and quarantined runs it
        holds.

        Every run acknowledged before the call is in it: the journal's pending runs are
        stored first. The copy reads one snapshot, taken right after, in a transaction
        of its own, so submissions go on while it is written (and are not in it).
        """
        with self._cursor_lock:
            if self._closed or self._conn is None:
                raise ShuttingDown("collector shutting down (its database is closed)")
            con = self._conn.cursor()
            self._cursors.append(con)  # closed with the store if it stops meanwhile
        try:
            with self._write_lock:
                self._flush()
                con.execute("BEGIN TRANSACTION")
                # The first read fixes the snapshot, before any later run is stored.
                counts = _backup_counts(con)
            with self._writing("database", f"writing a backup into {folder}"):
                con.execute(f"EXPORT DATABASE {_sql_text(str(folder))} (FORMAT PARQUET)")
            con.execute("COMMIT")
            return counts
        finally:
            with self._cursor_lock:
                with contextlib.suppress(duckdb.Error):
                    con.close()
                with contextlib.suppress(ValueError):
                    self._cursors.remove(con)

    # -- reading runs -----------------------------------------------------------------------

    def get(self, run_id: str) -> collector_pb2.StoredRun:
        """The stored run, or NotFound (which says so of a run held in quarantine)."""
        con = self._scored()
        rows = con.execute(
            f"SELECT {_STORED_COLUMNS} FROM runs WHERE run_id = ?", [run_id]
        ).fetchall()
        if not rows:
            held = con.execute("SELECT reason FROM quarantine WHERE run_id = ?",
                               [run_id]).fetchall()
            if held:
                raise NotFound(f"run_id {run_id}: acknowledged but held in quarantine, not "
                               f"stored (the database refused it: {held[0][0]})")
            raise NotFound(f"run_id {run_id}: no such run")
        return _stored_run(rows[0])

    def count(self) -> int:
        """How many runs are stored."""
        return self._scored().execute("SELECT count(*) FROM runs").fetchall()[0][0]

    def list(
        self, where: RunFilter, *, page_size: int, page_token: str = "",
        page_bytes: int | None = None,
    ) -> tuple[list[collector_pb2.StoredRun], str]:
        """Runs matching `where`, newest first; returns a page and the next page's token.

        A page holds at most `page_size` runs and, given `page_bytes`, ends before the
        run that would take it past that many bytes (it holds one run at least), so its
        size is bounded whatever the runs weigh. The runs' sizes are read first and
        only the page's records after, so a page of large runs is not loaded whole.
        """
        clauses, params = _filter_sql(where)
        if page_token:
            created_at, run_id = _decode_page_token(page_token)
            clauses.append("(created_at, run_id) < (?, ?)")
            params += [created_at, run_id]
        order = " ORDER BY created_at DESC, run_id DESC"
        sql = f"SELECT run_id, created_at, {_STORED_BYTES} FROM runs"
        if clauses:
            sql += " WHERE " + " AND ".join(clauses)
        con = self._scored()
        heads = con.execute(sql + order + " LIMIT ?", [*params, page_size + 1]).fetchall()
        taken, total = 0, 0
        for _, _, size in heads[:page_size]:
            if page_bytes is not None and taken and total + size > page_bytes:
                break
            taken, total = taken + 1, total + size
        more = len(heads) > taken
        if not taken:
            return [], ""
        ids = [head[0] for head in heads[:taken]]
        rows = con.execute(
            f"SELECT {_STORED_COLUMNS} FROM runs WHERE run_id IN (SELECT unnest(?))" + order,
            [ids],
        ).fetchall()
        last = heads[taken - 1]
        token = _encode_page_token(last[1], last[0]) if more else ""
        return [_stored_run(r) for r in rows], token

    def delete(self, run_id: str) -> str:
        """Delete a run (and rescore its group); returns its submitter. NotFound if absent."""
        with self._write_lock:
            self._flush()
            con = self._cursor()
            cols = ", ".join(OUTLIER_GROUP)
            rows = con.execute(
                f"SELECT submitter, status, {cols} FROM runs WHERE run_id = ?", [run_id]
            ).fetchall()
            if not rows:
                raise NotFound(f"run_id {run_id}: no such run")
            with _transaction(con):
                con.execute("DELETE FROM runs WHERE run_id = ?", [run_id])
                if rows[0][1] == "ok":  # (a group a flagged run is not in: nothing changes)
                    self._rescore(con, {tuple(rows[0][2:])})
            return rows[0][0]

    def submitter_of(self, run_id: str) -> str:
        """Who submitted a run; NotFound if absent."""
        rows = self._scored().execute(
            "SELECT submitter FROM runs WHERE run_id = ?", [run_id]
        ).fetchall()
        if not rows:
            raise NotFound(f"run_id {run_id}: no such run")
        return rows[0][0]

    def compare_groups(self, query: CompareQuery) -> list[GroupFigures]:
        """Per GPU configuration (name x count x memory limit): the figures Compare
        reports, over OK measured runs (flagged ones only with include_flagged).

        Read from the per-group figures the store keeps. Where a configuration spans
        several outlier groups (runs of unlike settings) and the caller allows mixing
        them, or flagged runs are asked for, the medians are computed afresh from the runs.
        """
        if query.include_flagged:
            return [_group_figures(r) for r in self._compare_rows_from_runs(query)]
        clauses, params = _compare_filter(query)
        rows = self._scored().execute(
            f"""
            SELECT {_CONFIG}, runs, outliers_excluded, epoch2_median_seconds,
                epoch2_min_seconds, epoch2_max_seconds, train_images_per_second_median,
                max_batch_per_gpu, max_global_batch, peak_memory_median_bytes,
                memory_total_bytes, energy_per_epoch_median_joules, images_per_joule_median,
                largest_batch_per_gpu_max,
                {", ".join(f"[{c}]" for c in _KEY_COLUMNS)}
            FROM group_figures WHERE with_outliers = ? AND {' AND '.join(clauses)}
            """,
            [query.include_outliers, *params],
        ).fetchall()
        configs = {tuple(r[:3]) for r in rows}
        if len(configs) < len(rows) and query.allow_mixed:
            rows = self._compare_rows_from_runs(query)
        return [_group_figures(r) for r in rows]

    def _compare_rows_from_runs(self, query: CompareQuery) -> list[tuple]:
        clauses, params = _compare_filter(query)
        return self._scored().execute(
            f"""
            SELECT {_CONFIG}, {_FIGURES},
                {", ".join(f"list(DISTINCT {c}) FILTER (WHERE keep)" for c in _KEY_COLUMNS)},
                count(*) FILTER (WHERE keep AND flagged)
            FROM (SELECT *, (? OR NOT outlier) AS keep FROM runs
                  WHERE status = 'ok' AND epoch2_seconds IS NOT NULL AND NOT published
                    AND (? OR NOT flagged) AND {' AND '.join(clauses)})
            GROUP BY {_CONFIG}
            """,
            [query.include_outliers, query.include_flagged, *params],
        ).fetchall()

    def published_groups(self, model: str, gpu_names: Sequence[str] = ()) -> list[GroupFigures]:
        """The published runs of a model (Run.published), per GPU configuration and
        everything that changes what was timed, each group with its source. Flagged
        published runs are left out like measured ones."""
        clauses, params = _compare_filter(CompareQuery(model=model, gpu_names=tuple(gpu_names)))
        rows = self._scored().execute(
            f"""
            SELECT {_CONFIG}, {_FIGURES},
                {", ".join(f"[{c}]" for c in _KEY_COLUMNS)}, 0, any_value(record)
            FROM (SELECT *, true AS keep FROM runs
                  WHERE status = 'ok' AND epoch2_seconds IS NOT NULL AND published
                    AND NOT flagged AND {' AND '.join(clauses)})
            GROUP BY {_CONFIG}, {", ".join(_KEY_COLUMNS)}
            ORDER BY median(epoch2_seconds), gpu_name
            """,
            params,
        ).fetchall()
        return [_group_figures(r[:-1], source=run_pb2.Run.FromString(r[-1]).source)
                for r in rows]

    def benchmark_versions(self, where: str, params: Sequence[Any]) -> list[str]:
        """The benchmark versions of the runs matching `where`, newest first (numeric
        order: "10" is newer than "9")."""
        rows = self._scored().execute(
            f"SELECT DISTINCT benchmark_version FROM runs WHERE {where}", list(params)
        ).fetchall()
        return sorted((v for (v,) in rows), key=record.version_key, reverse=True)

    def leaderboard(self, query: LeaderboardQuery) -> tuple[list[LeaderboardRow], str]:
        """A model's GPU configurations by the median epoch-2 time of their runs, fastest
        first (the best single run beside it); one entry per backend, precision, pipeline,
        weights, data and epochs each configuration ran with. Returns the entries and the
        benchmark version they are of.

        Only runs of the standard benchmark count: at the model's native image size (not
        a smoke run at --image-size), on the protocol's STANDARD_TRAIN_IMAGES training
        images (not a smoke run with --limit-images), on the whole card (no
        --memory-limit), of one settings label and one batch rule (the default run's
        unless asked), and of the newest benchmark version with such runs of the model;
        outliers and published runs are left out, flagged runs unless asked for. The
        training set is the protocol's fixed number rather than, say, the most common one
        among the runs, so that a burst of smoke runs can never take the leaderboard over.
        """
        clauses = ["status = 'ok'", "epoch2_seconds IS NOT NULL", "NOT outlier",
                   "NOT published", "model = ?", "image_size = ?", "train_images = ?",
                   "memory_limit_bytes = 0", "settings = ?", "batch_rule = ?"]
        params: list[Any] = [query.model, record.NATIVE_IMAGE_SIZE.get(query.model, 0),
                             STANDARD_TRAIN_IMAGES, query.settings, query.batch_rule]
        if not query.include_flagged:
            clauses.append("NOT flagged")
        for column in ("precision", "backend"):
            if getattr(query, column):
                clauses.append(f"{column} = ?")
                params.append(getattr(query, column))
        where = " AND ".join(clauses)
        version = query.benchmark_version
        if not version:
            versions = self.benchmark_versions(where, params)
            if not versions:
                return [], ""
            version = versions[0]
        keys = "gpu_name, gpu_count, backend, precision, settings, pipeline, weights, data, " \
               "epochs, batch_rule"
        rows = self._scored().execute(
            f"""
            SELECT {keys}, count(*), min(epoch2_seconds), median(epoch2_seconds),
                median(train_images_per_second), max(batch_per_gpu)
            FROM runs
            WHERE {where} AND benchmark_version = ?
            GROUP BY {keys}
            ORDER BY median(epoch2_seconds), min(epoch2_seconds), gpu_name, gpu_count
            LIMIT ?
            """,
            [*params, version, query.limit],
        ).fetchall()
        return [LeaderboardRow(*r) for r in rows], version

    def figures(self) -> dict[str, Any]:
        """The runs stored (flagged, outliers, published among them), quarantined and
        waiting in the journal, and the bulk inserts so far: StatsResponse's fields."""
        with self._intake:  # before the read below, which may store the pending runs
            depth = len(self._pending)
        stored, flagged, outlier, published = self._scored().execute(
            "SELECT count(*), count(*) FILTER (WHERE flagged), count(*) FILTER (WHERE outlier),"
            " count(*) FILTER (WHERE published) FROM runs").fetchall()[0]
        return {"runs_stored": stored, "runs_flagged": flagged, "runs_outlier": outlier,
                "runs_published": published, "runs_quarantined": self.quarantine_count(),
                "journal_depth": depth, "flushes": self.flushes,
                "flush_seconds_total": self.flush_seconds_total,
                "flush_seconds_last": self.flush_seconds_last}

    # -- quarantine -------------------------------------------------------------------------

    def quarantine_count(self) -> int:
        """How many acknowledged runs the database refused and quarantine holds."""
        return self._cursor().execute("SELECT count(*) FROM quarantine").fetchall()[0][0]

    def quarantined(self, run_ids: Sequence[str] = ()) -> list[QuarantinedRun]:
        """The runs held in quarantine (those of `run_ids`; empty: every one), oldest
        first. NotFound names a run_id quarantine does not hold."""
        sql = f"SELECT {_QUARANTINE_COLUMNS} FROM quarantine"
        params: list[Any] = []
        if run_ids:
            sql += " WHERE list_contains(?, run_id)"
            params.append(list(run_ids))
        rows = self._cursor().execute(sql + " ORDER BY received_at, run_id", params).fetchall()
        held = [QuarantinedRun(*r) for r in rows]
        missing = sorted(set(run_ids) - {q.run_id for q in held})
        if missing:
            raise NotFound(f"run_id {', '.join(missing)}: not in quarantine")
        return held

    def retry_quarantined(
        self, run_ids: Sequence[str] = ()
    ) -> tuple[list[str], list[QuarantinedRun]]:
        """Try again to store runs held in quarantine (those of `run_ids`; empty: every
        one), after the cause is fixed. The runs stored leave quarantine; returns their
        run_ids, and the runs still refused with the database's new reason."""
        with self._write_lock:
            con = self._cursor()
            names = ", ".join(("run_id", "submitter", "received_at", "content_sha256", "record"))
            sql = f"SELECT {names} FROM quarantine"
            params: list[Any] = []
            if run_ids:
                self.quarantined(run_ids)  # NotFound for any not held
                sql += " WHERE list_contains(?, run_id)"
                params.append(list(run_ids))
            rows: list[dict[str, Any]] = []
            refused: list[tuple[dict[str, Any], str]] = []
            for held in con.execute(sql, params).fetchall():
                try:
                    rows.append(_stored_row(held[4], *held[1:4]))
                except Exception as exc:  # still no run can be made of it
                    refused.append((_acknowledged(*held), f"unreadable record: {first_line(exc)}"))
            refused += [(row, _refusal_reason(row, exc)) for row, exc in
                        insert_sorting_out(rows, self._insert, _refused_by_database)]
            still = {row["run_id"] for row, _ in refused}
            stored = [row["run_id"] for row in rows if row["run_id"] not in still]
            if stored:
                con.execute("DELETE FROM quarantine WHERE list_contains(?, run_id)", [stored])
                log.warning("%s: stored %d run(s) from quarantine: %s", self.path, len(stored),
                            ", ".join(stored))
            if refused:
                self._quarantine(refused, announce=False)
            if self._dirty_groups:
                self._rescore_dirty()
            return stored, self.quarantined(sorted(still)) if still else []

    def drop_quarantined(self, run_ids: Sequence[str]) -> list[QuarantinedRun]:
        """Delete runs from quarantine for good (each named: there is no "all"); returns
        what was dropped. NotFound names a run_id quarantine does not hold."""
        if not run_ids:
            raise InvalidRecord("run_ids", "name the runs to drop (quarantine list shows them)")
        with self._write_lock:
            dropped = self.quarantined(run_ids)
            self._cursor().execute(
                "DELETE FROM quarantine WHERE list_contains(?, run_id)", [list(run_ids)]
            )
        for run in dropped:
            log.warning("%s: dropped run %s (submitter %s, acknowledged %s UTC) from "
                        "quarantine; it was never stored", self.path, run.run_id,
                        run.submitter, run.received_at)
        return dropped

    # -- tokens -----------------------------------------------------------------------------

    def create_token(self, name: str, secret_sha256: str, admin: bool) -> TokenRow:
        """Store a new token; a revoked token of the same name is replaced. TokenExists if live."""
        with self._write_lock:
            con = self._cursor()
            rows = con.execute("SELECT revoked FROM tokens WHERE name = ?", [name]).fetchall()
            if rows and not rows[0][0]:
                raise TokenExists(f"token {name!r}: already exists (revoke it first)")
            now = utc_now()
            with _transaction(con):
                con.execute("DELETE FROM tokens WHERE name = ?", [name])
                con.execute(
                    "INSERT INTO tokens (name, secret_sha256, admin, created_at, revoked) "
                    "VALUES (?, ?, ?, ?, false)",
                    [name, secret_sha256, admin, now],
                )
            return TokenRow(name, admin, now, False, None, secret_sha256)

    def tokens(self) -> list[TokenRow]:
        """Every token, by name."""
        rows = self._cursor().execute(
            f"SELECT {_TOKEN_COLUMNS} FROM tokens ORDER BY name"
        ).fetchall()
        return [TokenRow(*r) for r in rows]

    def token_by_secret_hash(self, secret_sha256: str) -> TokenRow | None:
        """The token whose secret hashes to `secret_sha256`, revoked or not."""
        rows = self._cursor().execute(
            f"SELECT {_TOKEN_COLUMNS} FROM tokens WHERE secret_sha256 = ?", [secret_sha256]
        ).fetchall()
        return TokenRow(*rows[0]) if rows else None

    def revoke_token(self, name: str) -> TokenRow:
        """Mark a token revoked; NotFound if there is none of that name."""
        with self._write_lock:
            con = self._cursor()
            rows = con.execute(
                f"UPDATE tokens SET revoked = true WHERE name = ? RETURNING {_TOKEN_COLUMNS}",
                [name],
            ).fetchall()
        if not rows:
            raise NotFound(f"token {name!r}: no such token")
        return TokenRow(*rows[0])

    def record_token_use(self, used: dict[str, datetime]) -> None:
        """Write tokens' last-used times (the auth layer batches them)."""
        if not used:
            return
        with self._write_lock:
            self._cursor().executemany(
                "UPDATE tokens SET last_used_at = ? WHERE name = ?",
                [[when, name] for name, when in used.items()],
            )


_STORED_COLUMNS = ("run_id, record, submitter, received_at, outlier, outlier_score, "
                   "content_sha256, flagged, flag_reasons")
# A stored run's bytes in a ListRuns page, from above: its record, submitter and flag
# reasons, and 256 for the rest (run_id and hash, times, flags, each field's tag and
# length, the entry's own).
_STORED_BYTES = ("octet_length(record) + strlen(submitter) + strlen(flag_reasons) "
                 "+ 256")
_QUARANTINE_COLUMNS = "run_id, submitter, received_at, quarantined_at, reason, content_sha256"
_TOKEN_COLUMNS = "name, admin, created_at, revoked, last_used_at, secret_sha256"
# Errors that say the database refuses a row's values (a number past its column's type,
# text it cannot encode, a missing value), as opposed to the database or the disk
# failing; Python's own come from converting the values for the statement.
_ROW_REFUSALS = (duckdb.DataError, duckdb.IntegrityError, duckdb.InvalidInputException,
                 TypeError, ValueError, OverflowError)
# The range of each integer column type, to say which value did not fit.
_COLUMN_RANGES = {pa.int32(): (-(2**31), 2**31 - 1), pa.uint64(): (0, 2**64 - 1)}


def import_database(folder: Path, db_path: Path) -> dict[str, int]:
    """Make a new database file `db_path` from a folder `Store.export_to` wrote; returns
    how many runs, tokens and quarantined runs it holds. `db_path` must not exist."""
    con = duckdb.connect(str(db_path))
    try:
        con.execute(f"IMPORT DATABASE {_sql_text(str(folder))}")
        con.execute("CHECKPOINT")
        return _backup_counts(con)
    finally:
        con.close()


def database_in_use(db_path: Path) -> bool:
    """Whether another process (a serving collector) holds the database file."""
    try:
        duckdb.connect(str(db_path)).close()
    except duckdb.IOException as exc:
        return "lock" in str(exc).lower()
    return False


def _backup_counts(con: duckdb.DuckDBPyConnection) -> dict[str, int]:
    """What a backup is checked by: the rows of the tables it must carry whole."""
    return {
        table: con.execute(f"SELECT count(*) FROM {table}").fetchall()[0][0]
        for table in ("runs", "tokens", "quarantine")
    }


def _sql_text(text: str) -> str:
    """`text` as an SQL string literal (EXPORT and IMPORT take no parameters)."""
    return "'" + text.replace("'", "''") + "'"


def _refused_by_database(error: BaseException) -> bool:
    """Whether an insert failed because of the rows' values (not the database itself)."""
    return isinstance(error, _ROW_REFUSALS)


def _refusal_reason(row: dict[str, Any], error: BaseException) -> str:
    """What the database said of a row it refused, and the columns it cannot hold (its
    message does not name them)."""
    misfits = []
    for column in RUN_COLUMNS:
        value = row.get(column.name)
        limits = _COLUMN_RANGES.get(column.type)
        if limits and isinstance(value, int) and not limits[0] <= value <= limits[1]:
            misfits.append(f"{column.name} {value} does not fit {_SQL_TYPES[column.type]}")
    reason = first_line(error)
    return f"{reason} ({'; '.join(misfits)})" if misfits else reason


def _text(value: str) -> str:
    """Text any VARCHAR holds (a lone surrogate, which DuckDB refuses, escaped)."""
    return value.encode("utf-8", "backslashreplace").decode("utf-8")


def _stored_row(
    blob: bytes, submitter: str, received_at: datetime, content_sha256: str
) -> dict[str, Any]:
    """The runs-table row of an acknowledged run, as it was acknowledged (its record's
    bytes and hash as journaled, not serialised again)."""
    row = run_row(run_pb2.Run.FromString(blob), submitter)
    row.update(received_at=received_at, content_sha256=content_sha256, record=blob)
    return row


def _acknowledged(
    run_id: str, submitter: str, received_at: datetime, content_sha256: str, record: bytes
) -> dict[str, Any]:
    """What quarantine keeps of an acknowledged run no row can be made of."""
    return {"run_id": run_id, "submitter": submitter, "received_at": received_at,
            "content_sha256": content_sha256, "record": record}


def _stored_run(row: Sequence[Any]) -> collector_pb2.StoredRun:
    stored = collector_pb2.StoredRun(
        run=run_pb2.Run.FromString(row[1]),
        submitter=row[2],
        outlier=row[4],
        outlier_score=row[5],
        content_sha256=row[6],
        flagged=row[7],
        flag_reasons=row[8].split(REASON_SEPARATOR) if row[8] else [],
    )
    stored.received_at.FromDatetime(row[3])
    return stored


# The figures of a set of runs (those with `keep` true), in GroupFigures' order.
_FIGURES = """
    count(*) FILTER (WHERE keep),
    count(*) FILTER (WHERE NOT keep),
    median(epoch2_seconds) FILTER (WHERE keep),
    min(epoch2_seconds) FILTER (WHERE keep),
    max(epoch2_seconds) FILTER (WHERE keep),
    median(train_images_per_second) FILTER (WHERE keep),
    max(batch_per_gpu) FILTER (WHERE keep),
    max(global_batch) FILTER (WHERE keep),
    median(peak_memory_bytes) FILTER (WHERE keep),
    median(memory_total_bytes) FILTER (WHERE keep),
    median(energy_per_epoch_joules) FILTER (WHERE keep),
    median(images_per_joule) FILTER (WHERE keep),
    max(largest_batch_per_gpu) FILTER (WHERE keep)
"""


def _equal_where_set(source: object, columns: tuple[str, ...]) -> tuple[list[str], list[Any]]:
    """`column = ?` for each of `columns` that `source` sets (non-empty, non-zero)."""
    clauses: list[str] = []
    params: list[Any] = []
    for column in columns:
        value = getattr(source, column)
        if value:
            clauses.append(f"{column} = ?")
            params.append(value)
    return clauses, params


# The columns of a GPU configuration, as SQL, and the dimensions Compare keeps apart
# (compare.DIMENSIONS' columns), in GroupFigures' order.
_CONFIG = ", ".join(CONFIG_COLUMNS)
_KEY_COLUMNS = ("benchmark_version", "backend", "precision", "image_size", "train_images",
                "settings", "batch_rule", "pipeline", "weights", "data", "epochs")


def _compare_filter(query: CompareQuery) -> tuple[list[str], list[Any]]:
    clauses, params = _equal_where_set(
        query,
        ("model", "precision", "backend", "benchmark_version", "image_size", "train_images",
         "settings", "batch_rule", "pipeline", "weights", "data", "epochs"),
    )
    if query.gpu_names:
        clauses.append("list_contains(?, lower(gpu_name))")
        params.append([record.normalize_gpu_name(n).lower() for n in query.gpu_names])
    return clauses, params


def _group_figures(r: Sequence[Any], *, source: str = "") -> GroupFigures:
    """GroupFigures from a row: the configuration (3 columns), _FIGURES (13), the
    dimensions' value lists (_KEY_COLUMNS) and, from the runs, the flagged runs kept."""
    lists = [tuple(sorted(v or ())) for v in r[16:16 + len(_KEY_COLUMNS)]]
    return GroupFigures(
        gpu_name=r[0], gpu_count=r[1], memory_limit_bytes=r[2] or 0, runs=r[3],
        outliers_excluded=r[4], epoch2_median_seconds=r[5], epoch2_min_seconds=r[6],
        epoch2_max_seconds=r[7], train_images_per_second_median=r[8],
        max_batch_per_gpu=r[9] or 0, max_global_batch=r[10] or 0,
        peak_memory_median_bytes=r[11], memory_total_bytes=r[12],
        energy_per_epoch_median_joules=r[13], images_per_joule_median=r[14],
        largest_batch_per_gpu_max=r[15] or 0,
        **dict(zip(compare.DIMENSION_ATTRIBUTES, lists, strict=True)),
        flagged_included=r[16 + len(_KEY_COLUMNS)] if len(r) > 16 + len(_KEY_COLUMNS) else 0,
        source=source,
    )


@contextlib.contextmanager
def _transaction(con: duckdb.DuckDBPyConnection) -> Iterator[None]:
    """One transaction: committed when the block ends, rolled back if it raises."""
    con.execute("BEGIN TRANSACTION")
    try:
        yield
    except BaseException:
        con.execute("ROLLBACK")
        raise
    con.execute("COMMIT")


@contextlib.contextmanager
def _pending_runs(con: duckdb.DuckDBPyConnection, table: pa.Table) -> Iterator[None]:
    """`table` readable as the view pending_runs (registered outside any transaction,
    so a failed insert's rollback cannot leave it behind)."""
    con.register("pending_runs", table)
    try:
        yield
    finally:
        con.unregister("pending_runs")


def _group_key(row: dict[str, Any]) -> tuple:
    return tuple(row[column] for column in OUTLIER_GROUP)


def _ack_of(row: dict[str, Any]) -> Ack:
    return Ack(row["run_id"], row["received_at"], row["content_sha256"])


def _journal_entry(row: dict[str, Any]) -> JournalEntry:
    return JournalEntry(row["run_id"], row["submitter"], row["received_at"],
                        row["content_sha256"], row["record"])


def _filter_sql(where: RunFilter) -> tuple[list[str], list[Any]]:
    clauses, params = _equal_where_set(
        where, ("model", "backend", "precision", "submitter", "gpu_count")
    )
    if where.gpu_name:
        clauses.append("contains(lower(gpu_name), ?)")
        params.append(where.gpu_name.lower())
    if where.since is not None:
        clauses.append("created_at >= ?")
        params.append(where.since)
    if where.until is not None:
        clauses.append("created_at < ?")
        params.append(where.until)
    return clauses, params


def _encode_page_token(created_at: datetime, run_id: str) -> str:
    raw = f"{created_at.isoformat()}|{run_id}".encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _decode_page_token(token: str) -> tuple[datetime, str]:
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)).decode()
        when, run_id = raw.split("|", 1)
        return datetime.fromisoformat(when), run_id
    except (ValueError, UnicodeDecodeError) as exc:
        raise InvalidRecord("page_token", "not a token this collector handed out") from exc
