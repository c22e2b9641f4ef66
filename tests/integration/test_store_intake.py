"""The store's intake on a real DuckDB file: acknowledged from the journal, stored in bulk.

A submission is acknowledged once the journal has synced it; the flusher inserts
the journal's runs into DuckDB hundreds at a time. These tests hold runs in the
journal (a flush interval of an hour) to check every path a run can take there.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import threading
import time
from datetime import datetime
from pathlib import Path

import pyarrow as pa
import pytest
from factories import make_run

from gpubench import record
from gpubench.collector import backlog, columns
from gpubench.collector.errors import RunConflict, StorageUnavailable
from gpubench.collector.intake import Journal, JournalEntry, journal_folder
from gpubench.collector.store import Store
from gpubench.errors import NotFound

TESTS = Path(__file__).resolve().parents[1]


@pytest.fixture
def held(monkeypatch: pytest.MonkeyPatch) -> None:
    """Runs stay in the journal until a write, a close or Store.catch_up."""
    monkeypatch.setattr(backlog, "FLUSH_ROWS", 10**6)
    monkeypatch.setattr(backlog, "FLUSH_INTERVAL_S", 3600.0)


def _segments(db: Path) -> list[Path]:
    return sorted(journal_folder(db).glob("*.log"))


def _wait_for(condition, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.01)
    return False


def test_runs_acknowledged_before_a_crash_are_stored_on_the_next_open(tmp_path: Path) -> None:
    db = tmp_path / "c.duckdb"
    child = textwrap.dedent(f"""
        import json, os, signal, sys
        sys.path.insert(0, {str(TESTS)!r})
        from factories import make_run
        from gpubench.collector import backlog
        from gpubench.collector.store import Store
        backlog.FLUSH_ROWS, backlog.FLUSH_INTERVAL_S = 10**6, 3600.0
        store = Store({str(db)!r})
        acks = [store.submit(make_run(label=str(i)), "lab") for i in range(5)]
        print(json.dumps([[a.run_id, a.received_at.isoformat()] for a in acks]), flush=True)
        assert store.flushes == 0  # every run is in the journal only
        os.kill(os.getpid(), signal.SIGKILL)  # the next moment: no flush, no close
    """)
    done = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == -9, done.stderr
    acks = json.loads(done.stdout)
    left = _segments(db)
    assert left, "the crash should leave the journal behind"
    store = Store(db)
    try:
        assert store.count() == 5
        for run_id, received_at in acks:
            assert store.get(run_id).received_at.ToDatetime().isoformat() == received_at
        assert not any(p.exists() for p in left)  # stored, so the old segments are gone
    finally:
        store.close()
    assert _segments(db) == []


def test_a_resubmission_gets_the_first_acknowledgement_wherever_the_run_is(
    tmp_path: Path, held: None
) -> None:
    db = tmp_path / "c.duckdb"
    run = make_run()
    changed = make_run()
    changed.CopyFrom(run)
    changed.label = "edited"
    store = Store(db)
    try:
        first = store.submit(run, "lab")
        assert store.flushes == 0
        assert store.submit(run, "lab") == first  # still in the journal
        with pytest.raises(RunConflict, match=run.run_id):
            store.submit(changed, "lab")
        assert store.count() == 1  # a read sees what is pending
        assert store.flushes == 0  # without storing it
        store.catch_up()
        assert store.flushes == 1
        assert store.submit(run, "lab") == first  # in DuckDB now
        with pytest.raises(RunConflict):
            store.submit(changed, "lab")
    finally:
        store.close()
    store = Store(db)  # the filter is rebuilt from the database
    try:
        assert store.submit(run, "lab") == first
        assert store.count() == 1
    finally:
        store.close()


def test_sixteen_submitters_are_stored_in_one_database_commit(tmp_path: Path, held: None) -> None:
    store = Store(tmp_path / "c.duckdb")
    try:
        barrier = threading.Barrier(16)

        def submit(n: int) -> None:
            barrier.wait()
            for i in range(25):
                store.submit(make_run(label=f"{n}.{i}"), "lab")

        threads = [threading.Thread(target=submit, args=(n,)) for n in range(16)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert store.committed_runs == 400
        assert store.committed_runs / store.commits > 1  # the journal's group commit
        assert store.flushes == 0
        assert store.count() == 400
        store.catch_up()
        assert (store.flushes, store.flushed_runs) == (1, 400)
    finally:
        store.close()


def test_the_flusher_stores_runs_when_enough_are_pending(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(backlog, "FLUSH_ROWS", 4)
    monkeypatch.setattr(backlog, "FLUSH_INTERVAL_S", 3600.0)
    store = Store(tmp_path / "c.duckdb")
    try:
        for i in range(4):
            store.submit(make_run(label=str(i)), "lab")
        assert _wait_for(lambda: store.flushed_runs == 4)
    finally:
        store.close()


def test_the_flusher_stores_runs_when_they_have_waited_long_enough(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(backlog, "FLUSH_ROWS", 10**6)
    monkeypatch.setattr(backlog, "FLUSH_INTERVAL_S", 0.05)
    store = Store(tmp_path / "c.duckdb")
    try:
        store.submit(make_run(), "lab")
        assert _wait_for(lambda: store.flushed_runs == 1)
        assert _wait_for(lambda: not store.backlog.unscored)  # and its group is rescored
    finally:
        store.close()


def test_every_read_sees_runs_still_in_the_journal(tmp_path: Path, held: None) -> None:
    store = Store(tmp_path / "c.duckdb")
    try:
        run = make_run(gpu_name="NVIDIA H200")
        store.submit(run, "lab")
        assert store.get(run.run_id).run.run_id == run.run_id
        other = make_run(label="second")
        store.submit(other, "lab")
        assert store.submitter_of(other.run_id) == "lab"
        third = make_run(label="third")
        store.submit(third, "lab")
        assert store.delete(third.run_id) == "lab"
        with pytest.raises(NotFound):
            store.get(third.run_id)
        assert store.count() == 2
    finally:
        store.close()


def test_closing_stores_the_journal_and_removes_it(tmp_path: Path, held: None) -> None:
    db = tmp_path / "c.duckdb"
    store = Store(db)
    runs = [make_run(label=str(i)) for i in range(3)]
    for run in runs:
        store.submit(run, "lab")
    assert store.flushes == 0
    store.close()
    assert _segments(db) == []
    store = Store(db)
    try:
        assert store.count() == 3
    finally:
        store.close()


def test_a_failed_database_insert_keeps_the_runs_for_the_next_try(
    tmp_path: Path, held: None
) -> None:
    store = Store(tmp_path / "c.duckdb")
    try:
        run = make_run()
        store.submit(run, "lab")
        real_insert = store.flusher._insert

        def failing(rows):
            store.flusher._insert = real_insert  # once
            raise OSError("disk I/O error")

        store.flusher._insert = failing
        # A retryable error naming the cause, not the bare OSError.
        with pytest.raises(StorageUnavailable, match="disk I/O error"):
            store.catch_up()
        assert store.count() == 1  # still read from the journal's runs
        store.catch_up()
        assert not store.backlog.pending
        assert store.get(run.run_id).submitter == "lab"
    finally:
        store.close()


def test_replaying_a_run_that_is_stored_already_keeps_the_stored_one(
    tmp_path: Path, held: None
) -> None:
    """A crash between a flush's commit and the deletion of its segments."""
    db = tmp_path / "c.duckdb"
    run = make_run()
    store = Store(db)
    first = store.submit(run, "lab")
    store.close()
    leftover = Journal(journal_folder(db))  # the segment the crash left behind
    leftover.append([JournalEntry(run.run_id, "lab", datetime(2026, 1, 1), first.content_sha256,
                                  run.SerializeToString(deterministic=True))])
    later = make_run(label="in the same segment, not stored yet")
    leftover.append([JournalEntry(later.run_id, "lab", datetime(2026, 1, 2),
                                  record.content_sha256(later),
                                  later.SerializeToString(deterministic=True))])
    store = Store(db)
    try:
        assert store.count() == 2
        assert store.get(run.run_id).received_at.ToDatetime() == first.received_at
        assert store.submit(run, "lab") == first
        assert store.get(later.run_id).content_sha256 == record.content_sha256(later)
    finally:
        store.close()


# -- a run the database refuses: quarantine, never a wedged flusher -------------------------

def _poisoned(**fields: object):
    """A run validation now refuses (3e9 training images), as an older collector let in:
    acknowledged from the journal, but past the runs table's INTEGER column."""
    fields = {"config__train_images": 3_000_000_000, "config__image_count": 0, **fields}
    return make_run(**fields)


def test_a_run_the_database_refuses_does_not_hold_up_the_runs_after_it(
    tmp_path: Path, held: None, caplog: pytest.LogCaptureFixture
) -> None:
    db = tmp_path / "c.duckdb"
    store = Store(db)
    try:
        poisoned = _poisoned()
        first = store.submit(poisoned, "lab")  # acknowledged: the journal has it
        runs = [make_run(label=str(i)) for i in range(5)]
        for run in runs:
            store.submit(run, "lab")
        assert store.count() == 5  # a read sees what is pending, but the refused run
        assert store.get(runs[-1].run_id).run == runs[-1]
        store.catch_up()  # stored around the refused run
        assert store.count() == 5
        [held_run] = store.quarantined()
        assert (held_run.run_id, held_run.submitter, held_run.received_at) == (
            poisoned.run_id, "lab", first.received_at)
        assert "train_images 3000000000 does not fit INTEGER" in held_run.reason
        with pytest.raises(NotFound, match="held in quarantine"):
            store.get(poisoned.run_id)
        # Later runs go on being stored, and the flusher has nothing left.
        later = make_run(label="later")
        store.submit(later, "lab")
        store.catch_up()
        assert store.count() == 6 and not store.backlog.pending
        # Resubmitted, the refused run gets its first acknowledgement (it is not lost).
        assert store.submit(poisoned, "lab") == first
        with pytest.raises(RunConflict):
            store.submit(_poisoned(run_id=poisoned.run_id, label="edited"), "lab")
    finally:
        store.close()
    assert _segments(db) == []  # nothing acknowledged is left behind in the journal
    store = Store(db)
    try:
        assert store.count() == 6
        assert [r.run_id for r in store.quarantined()] == [poisoned.run_id]
    finally:
        store.close()
    # Its group (3e9 training images) is no group the rescore could name: never tried.
    assert not [r for r in caplog.records if "rescoring outliers failed" in r.getMessage()]


def test_the_flusher_quarantines_a_refused_run_and_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(backlog, "FLUSH_ROWS", 10**6)
    monkeypatch.setattr(backlog, "FLUSH_INTERVAL_S", 0.05)
    store = Store(tmp_path / "c.duckdb")
    try:
        poisoned = _poisoned(config__batch_per_gpu=3_000_000_000,
                             config__global_batch=3_000_000_000)
        store.submit(poisoned, "lab")
        for i in range(3):
            store.submit(make_run(label=str(i)), "lab")
        # No read: the flusher thread itself stores the three and sets the fourth aside.
        assert _wait_for(lambda: store.flushed_runs == 4)
        assert store.quarantine_count() == 1 and not store.backlog.pending
        assert _wait_for(lambda: not store.backlog.unscored)
    finally:
        store.close()
    [logged] = [r for r in caplog.records if r.levelname == "ERROR"]
    message = logged.getMessage()
    assert poisoned.run_id in message and "held in quarantine" in message
    assert "batch_per_gpu 3000000000 does not fit INTEGER" in message
    assert f"gpubench-collector quarantine retry {poisoned.run_id}" in message


def test_a_quarantined_run_is_stored_by_retry_once_the_cause_is_fixed_or_dropped(
    tmp_path: Path, held: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = Store(tmp_path / "c.duckdb")
    try:
        wide = _poisoned(status="out_of_memory")  # 3e9 training images
        huge = make_run(status="out_of_memory", config__batch_per_gpu=3_000_000_000,
                        config__global_batch=3_000_000_000)
        store.submit(wide, "lab")
        store.submit(huge, "lab")
        store.catch_up()
        assert store.count() == 0 and store.quarantine_count() == 2
        before = {r.run_id: r for r in store.quarantined()}

        # Nothing fixed yet: both are refused again, with the time of this try.
        stored, refused = store.retry_quarantined()
        assert stored == [] and {r.run_id for r in refused} == {wide.run_id, huge.run_id}
        assert all(r.quarantined_at >= before[r.run_id].quarantined_at for r in refused)

        # The fix for one of them, as a release with a wider column would bring it: the
        # column and the insert's type of it.
        store.database.cursor().execute("ALTER TABLE runs ALTER train_images TYPE BIGINT")
        known = columns.RUN_COLUMNS
        wider = known.set(known.get_field_index("train_images"),
                          pa.field("train_images", pa.int64()))
        monkeypatch.setattr(columns, "RUN_COLUMNS", wider)
        monkeypatch.setattr(columns, "INSERT_ROWS", columns.insert_rows_sql(wider))
        stored, refused = store.retry_quarantined([wide.run_id])
        assert (stored, refused) == ([wide.run_id], [])
        assert store.get(wide.run_id).run == wide
        assert store.get(wide.run_id).received_at.ToDatetime() == before[wide.run_id].received_at
        assert [r.run_id for r in store.quarantined()] == [huge.run_id]

        with pytest.raises(NotFound, match=wide.run_id):  # not in quarantine any more
            store.drop_quarantined([wide.run_id])
        [dropped] = store.drop_quarantined([huge.run_id])
        assert dropped.run_id == huge.run_id and "batch_per_gpu" in dropped.reason
        assert store.quarantined() == [] and store.count() == 1
    finally:
        store.close()


def test_a_journal_holding_a_poisoned_entry_opens_fine(tmp_path: Path) -> None:
    """What a crash leaves: a good run, one the database refuses, and one whose record
    cannot even be read. Opening stores the first and quarantines the others."""
    db = tmp_path / "c.duckdb"
    Store(db).close()
    good, poisoned = make_run(), _poisoned()
    leftover = Journal(journal_folder(db))
    for run in (poisoned, good):
        leftover.append([JournalEntry(run.run_id, "lab", datetime(2026, 1, 1),
                                      record.content_sha256(run),
                                      run.SerializeToString(deterministic=True))])
    garbled = "00000000-0000-4000-8000-00000000000a"
    leftover.append([JournalEntry(garbled, "lab", datetime(2026, 1, 2), "ab" * 32,
                                  b"\xff\xff\xff not a run")])
    leftover.close()
    store = Store(db)
    try:
        assert store.count() == 1 and store.get(good.run_id).run == good
        reasons = {r.run_id: r.reason for r in store.quarantined()}
        assert "train_images 3000000000 does not fit INTEGER" in reasons[poisoned.run_id]
        assert reasons[garbled].startswith("unreadable record:")
        assert store.retry_quarantined([garbled])[0] == []  # and stays so when retried
    finally:
        store.close()
    assert _segments(db) == []
    store = Store(db)  # and again: nothing left to replay, the quarantine kept
    try:
        assert store.count() == 1 and store.quarantine_count() == 2
    finally:
        store.close()
