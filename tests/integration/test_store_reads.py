"""Reads never queue behind writes, and still see every acknowledged run.

A real collector on port 0 over a real DuckDB file. A thread holds the store's write
path as a long write would: the database's write lock (every submission, delete and
bulk load takes it) with a write transaction open on the runs table.
Meanwhile Compare, ListRuns, GetRun and Leaderboard must answer within
READ_DEADLINE_S, with every run acknowledged before they were asked, its outlier flags
computed from the committed runs, and nothing uncommitted or still in flight.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from typing import Any

import pytest
from factories import make_run

from gpubench.collector import columns
from gpubench.collector.rows import run_row, utc_now
from gpubench.v1 import collector_pb2 as pb

# Far longer than any read takes here, far shorter than the writes are held.
READ_DEADLINE_S = 5.0
HOLD_S = 60.0
ADA = "NVIDIA RTX 6000 Ada Generation"
# The factory's runs: Keras's own code path, the batch given (--batch N).
KERAS_GIVEN = {"settings": "keras", "batch_rule": "given"}


@contextmanager
def held(
    *locks: threading.Lock, writing: Callable[[], Any] | None = None
) -> Iterator[None]:
    """`locks` taken in order by another thread and held until the block ends (at most
    HOLD_S), as a long write holds them; with `writing`, that thread runs it once it
    holds them and closes what it returns (a transaction) when it lets them go."""
    taken, done = threading.Event(), threading.Event()

    def hold() -> None:
        for lock in locks:
            lock.acquire()
        with writing() if writing else nullcontext():
            taken.set()
            done.wait(HOLD_S)
        for lock in reversed(locks):
            lock.release()

    holder = threading.Thread(target=hold, name="long-write")
    holder.start()
    assert taken.wait(10), "the write path was not free to take"
    try:
        yield
    finally:
        done.set()
        holder.join()


@contextmanager
def uncommitted_run(store, run) -> Iterator[None]:
    """`run` inserted into the runs table in a transaction held open, rolled back after."""
    row = run_row(run, "uncommitted")
    row["received_at"] = utc_now()
    with store.database.own_cursor() as con:
        con.execute("BEGIN TRANSACTION")
        con.execute(columns.INSERT_ROWS, columns.column_lists([row]))
        try:
            yield
        finally:
            con.execute("ROLLBACK")


def read_all(collector, gpu_name: str) -> dict[str, object]:
    """Compare, ListRuns and Leaderboard as a client asks them, each with a deadline."""
    stub, md = collector.collector_stub(), collector.metadata()
    compared = stub.Compare(pb.CompareRequest(model="B0", gpu_names=[gpu_name]), metadata=md,
                            timeout=READ_DEADLINE_S)
    listed = stub.ListRuns(pb.ListRunsRequest(gpu_name=gpu_name, page_size=100), metadata=md,
                           timeout=READ_DEADLINE_S)
    board = stub.Leaderboard(pb.LeaderboardRequest(model="B0", **KERAS_GIVEN), metadata=md,
                             timeout=READ_DEADLINE_S)
    return {"compared": compared, "listed": {r.run.run_id for r in listed.runs},
            "board": board}


def test_reads_answer_while_writes_hold_the_store(collector) -> None:
    store = collector.store
    stub, md = collector.collector_stub(), collector.metadata()
    runs = [make_run(gpu_name=ADA, gpu_count=2, epoch2_seconds=s) for s in (2.0, 2.2, 2.1, 2.1)]
    slow = make_run(gpu_name=ADA, gpu_count=2, epoch2_seconds=9.0)  # its group's outlier
    never = make_run(gpu_name=ADA, gpu_count=2, epoch2_seconds=2.0)  # written, not committed
    for run in [*runs, slow]:  # acknowledged: committed
        stub.SubmitRun(pb.SubmitRunRequest(run=run), metadata=md, timeout=10)

    with held(store.database.write_lock, writing=lambda: uncommitted_run(store, never)):
        found = read_all(collector, ADA)
        assert found["listed"] == {r.run_id for r in [*runs, slow]}
        [group] = found["compared"].groups
        assert (group.gpu_name, group.runs, group.outliers_excluded) == (ADA, 4, 1)
        assert group.epoch2_median_seconds == pytest.approx(2.1)
        [entry] = found["board"].entries
        assert (entry.gpu_name, entry.runs, entry.best_epoch2_seconds) == (ADA, 4, 2.0)
        stored = stub.GetRun(pb.GetRunRequest(run_id=slow.run_id), metadata=md,
                             timeout=READ_DEADLINE_S)
        assert stored.outlier and stored.outlier_score > 3.5

        # A submission waiting for the write lock is acknowledged to no one: no read
        # waits for it or shows it.
        late = make_run(gpu_name=ADA, gpu_count=2, epoch2_seconds=2.05)
        in_flight = stub.SubmitRun.future(pb.SubmitRunRequest(run=late), metadata=md,
                                          timeout=HOLD_S)
        again = read_all(collector, ADA)
        assert again["listed"] == found["listed"]
        assert again["compared"].groups[0].runs == 4
        assert not in_flight.done()
    in_flight.result()
    after = read_all(collector, ADA)
    assert after["listed"] == {r.run_id for r in [*runs, slow, late]}
    assert (after["compared"].groups[0].runs, after["compared"].groups[0].outliers_excluded) == (
        5, 1)
