"""Submissions, group-committed into the intake journal and acknowledged from it.

RPC threads queue their run and wait; a writer thread takes everything queued, sets
resubmissions aside (their first acknowledgement is answered again), appends the new
runs to the intake journal (collector.intake) with one fdatasync, makes them pending
in the backlog (collector.backlog), where every later read sees them, and only then
wakes the waiting threads with their acknowledgements. The flusher
(collector.flusher) takes them into DuckDB later. (`submit_row` queues without
waiting: the multi-process collector's owner answers from the future instead.)
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, cast

from gpubench.collector.backlog import Backlog
from gpubench.collector.database import Database
from gpubench.collector.errors import RunConflict, ShuttingDown
from gpubench.collector.intake import JournalEntry
from gpubench.collector.rows import Ack, utc_now
from gpubench.collector.stats import SubmissionCounts

# The most runs one group commit takes; more wait for the next commit.
MAX_BATCH = 1024
# How long a group commit waits for more submissions when there is concurrency (s):
# long enough for the submitters the last commit answered to send their next run on a
# busy machine (each journal write waits for the disk however few runs it carries).
COMMIT_DELAY_S = 0.005


@dataclass
class _Submission:
    row: dict[str, Any]
    future: Future = field(default_factory=Future)


class GroupCommit:
    """The queue of submissions and the writer thread that journals and answers them."""

    def __init__(self, database: Database, intake: Backlog) -> None:
        self._db = database
        self._backlog = intake
        # For benchmarks: group commits (journal writes) and the runs they acknowledged.
        self.commits = 0
        self.committed_runs = 0
        # For operators (the Stats call): submissions acknowledged and refused.
        self.submissions = SubmissionCounts()
        self._queue: list[_Submission] = []
        self._queue_ready = threading.Condition()
        self._stopping = False
        # How many submitters were active at the last commit: the next one waits for them.
        self._expected = 0
        self._writer = threading.Thread(target=self._loop, name="store-writer", daemon=True)
        self._writer.start()

    def submit_row(self, row: dict[str, Any]) -> Future:
        """Queue a row made by `run_row` for the next group commit, without waiting.

        The future resolves to the Ack once the commit holding the row has returned
        (or to RunConflict, or the storage's error).
        """
        pending = _Submission(row)
        with self._queue_ready:
            if self._stopping:
                refused = ShuttingDown("collector shutting down (its database is closing)")
                self.submissions.refuse(refused)
                raise refused
            self._queue.append(pending)
            self._queue_ready.notify()
        pending.future.add_done_callback(self._count_outcome)
        return pending.future

    def accept_now(self, rows: Iterable[dict[str, Any]]) -> list[Ack | Exception]:
        """Journal rows in this thread, at once (no queue, no waiting for room: the
        caller holds the write lock, which the flusher needs to make room); per row
        its Ack or the RunConflict."""
        batch = [_Submission(row) for row in rows]
        self._accept(batch, wait_for_room=False)
        # The futures are failed with Exceptions only (_commit), never other BaseExceptions.
        return [cast("Exception | None", p.future.exception()) or p.future.result()
                for p in batch]

    def stop(self) -> None:
        """Answer what is queued, refuse what comes after, and stop the writer."""
        with self._queue_ready:
            self._stopping = True
            self._queue_ready.notify_all()
        self._writer.join()

    def _count_outcome(self, future: Future) -> None:
        """Count a submission's outcome (acknowledged, or refused by the store)."""
        error = future.exception()
        if error is None:
            self.submissions.accept()
        else:
            self.submissions.refuse(error)

    def _loop(self) -> None:
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

    def _accept(self, batch: list[_Submission], *, wait_for_room: bool = True) -> None:
        """Journal a batch's new runs, then resolve every waiting future.

        A run_id already acknowledged (pending, or in DuckDB) is answered with its first
        acknowledgement, or RunConflict if the content differs; only the others are
        written. Nothing is acknowledged before the journal has synced. With
        `wait_for_room`, waits while MAX_PENDING runs are not yet in DuckDB.
        """
        intake = self._backlog
        received_at = utc_now()
        by_id: dict[str, list[_Submission]] = {}
        for pending in batch:
            by_id.setdefault(pending.row["run_id"], []).append(pending)
        acks: dict[str, Ack] = {}
        try:
            with intake.lock:
                while wait_for_room and intake.full() and not intake.closing:
                    intake.lock.wait()  # DuckDB is behind: hold acknowledgements back
                maybe_stored = []
                for run_id in by_id:
                    row = intake.pending.get(run_id)
                    if row is not None:
                        acks[run_id] = _ack_of(row)
                    elif run_id in intake.known:
                        maybe_stored.append(run_id)
                if maybe_stored:  # a resubmission (or, rarely, a hash that only looks alike)
                    acks.update(self._stored_acks(maybe_stored))
                fresh = [group[0].row for run_id, group in by_id.items() if run_id not in acks]
                for row in fresh:
                    row["received_at"] = received_at
                journal = intake.journal
                with intake.writing("journal", f"writing the intake journal {journal.folder}"):
                    journal.append(_journal_entry(row) for row in fresh)
                if fresh:
                    intake.durability.recovered("journal")
                intake.add(fresh)
                for row in fresh:
                    acks[row["run_id"]] = _ack_of(row)
                intake.known.add(row["run_id"] for row in fresh)
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

    def _stored_acks(self, run_ids: list[str]) -> dict[str, Ack]:
        """The first acknowledgements of runs stored, or held in quarantine."""
        params: list[Any]
        if len(run_ids) == 1:  # a point lookup uses the primary-key index
            where, params = "run_id = ?", run_ids
        else:
            where, params = "list_contains(?, run_id)", [run_ids]
        with self._db.reading():
            rows = self._db.cursor().execute(
                f"SELECT run_id, received_at, content_sha256 FROM runs WHERE {where} UNION ALL "
                f"SELECT run_id, received_at, content_sha256 FROM quarantine WHERE {where}",
                params * 2,
            ).fetchall()
        return {r[0]: Ack(r[0], r[1], r[2]) for r in rows}


def _ack_of(row: dict[str, Any]) -> Ack:
    return Ack(row["run_id"], row["received_at"], row["content_sha256"])


def _journal_entry(row: dict[str, Any]) -> JournalEntry:
    return JournalEntry(row["run_id"], row["submitter"], row["received_at"],
                        row["content_sha256"], row["record"])
