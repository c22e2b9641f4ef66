"""The store on a real DuckDB file: the schema's migrations, extracted columns,
reopening."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import duckdb
import pytest
from factories import make_run

from gpubench import record
from gpubench.collector import migrations
from gpubench.collector.aggregates import CompareQuery
from gpubench.collector.errors import RunConflict, SchemaTooNew, SchemaUnreleased
from gpubench.collector.queries import RunFilter
from gpubench.collector.rows import run_row
from gpubench.collector.store import Store
from gpubench.v1 import run_pb2


def test_a_fresh_database_records_every_migration_once(tmp_path: Path) -> None:
    db = tmp_path / "c.duckdb"
    store = Store(db)
    applied = store.database.applied_migrations()
    store.close()
    assert applied == [m.name for m in migrations.MIGRATIONS] == ["0001_schema"]
    store = Store(db)  # reopening applies nothing new
    try:
        assert store.database.applied_migrations() == applied
    finally:
        store.close()


def test_a_database_from_a_newer_collector_is_refused(tmp_path: Path) -> None:
    db = tmp_path / "c.duckdb"
    store = Store(db)
    store.database.cursor().execute(
        "INSERT INTO schema_migrations VALUES ('0099_from_the_future', now())"
    )
    store.close()
    with pytest.raises(SchemaTooNew, match="0099_from_the_future"):
        Store(db)


def _ledger(db: Path) -> tuple[list[str], list[str]]:
    """The migrations recorded in `db` and its tables, read without the collector."""
    with duckdb.connect(str(db)) as con:
        names = [n for (n,) in con.execute(
            "SELECT name FROM schema_migrations ORDER BY name").fetchall()]
        tables = [t for (t,) in con.execute(
            "SELECT table_name FROM duckdb_tables() ORDER BY table_name").fetchall()]
    return names, tables


def test_a_database_from_before_the_first_release_is_refused_and_left_as_it_was(
        tmp_path: Path) -> None:
    # As a collector before the first release left it: its schema made by migrations
    # of other names, its runs in a table of its own.
    db = tmp_path / "c.duckdb"
    with duckdb.connect(str(db)) as con:
        con.execute(migrations.CREATE_LEDGER)
        con.execute("INSERT INTO schema_migrations VALUES ('0001_runs', now()), "
                    "('0015_math_mode', now())")
        con.execute("CREATE TABLE runs (run_id VARCHAR PRIMARY KEY, record BLOB)")
    before = _ledger(db)
    with pytest.raises(SchemaUnreleased) as refused:
        Store(db)
    said = str(refused.value)
    assert said.startswith(f"{db}: made by a gpubench from before its first release "
                           "(migrations 0001_runs to 0015_math_mode)")
    assert "Start a new database file" in said and "gpubench-collector import" in said
    assert _ledger(db) == before == (["0001_runs", "0015_math_mode"],
                                     ["runs", "schema_migrations"])
    Store(tmp_path / "new.duckdb").close()  # a new file beside it is made as usual


def test_pending_and_unknown_migrations() -> None:
    first = migrations.MIGRATIONS[0].name
    assert [m.name for m in migrations.pending(set())] == [first]
    assert migrations.pending({first}) == []
    assert migrations.unknown({first, "9999_x"}) == ["9999_x"]


def test_columns_extracted_from_a_two_gpu_run() -> None:
    run = make_run(gpu_name="NVIDIA RTX 6000 Ada Generation", gpu_count=2, model="B7",
                   epoch2_seconds=82.0, energy_per_epoch_joules=43_000.0, batch_per_gpu=10)
    run.result.memory[1].allocator_peak_bytes = run.result.memory[0].allocator_peak_bytes + 5
    row = run_row(run, "lab")
    assert (row["gpu_name"], row["gpu_count"], row["model"]) == (
        "NVIDIA RTX 6000 Ada Generation", 2, "B7")
    assert (row["batch_per_gpu"], row["global_batch"]) == (10, 20)
    assert row["peak_memory_bytes"] == run.result.memory[1].allocator_peak_bytes  # the larger
    assert row["memory_total_bytes"] == run.gpus[0].memory_total_bytes
    assert row["epoch2_seconds"] == 82.0
    assert row["images_per_joule"] == pytest.approx(1709 / 43_000)
    assert row["status"] == "ok" and row["submitter"] == "lab"


def test_the_row_carries_the_record_and_its_content_hash() -> None:
    run = make_run()
    row = run_row(run, "lab")
    assert row["content_sha256"] == record.content_sha256(run)
    assert run_pb2.Run.FromString(row["record"]) == run


def test_concurrent_resubmissions_get_the_first_acknowledgement(tmp_path: Path) -> None:
    """Submissions from many threads at once (gRPC's pool): each run stored once, every
    resubmission answered with the first acknowledgement, other content refused."""
    from concurrent.futures import ThreadPoolExecutor

    store = Store(tmp_path / "c.duckdb")
    try:
        run = make_run()
        changed = make_run(run_id=run.run_id, epoch2_seconds=3.0)
        with ThreadPoolExecutor(8) as pool:
            same = [pool.submit(store.submit, run, "lab") for _ in range(8)]
            other = pool.submit(store.submit, make_run(), "lab")
            acks = [f.result(timeout=30) for f in same]
        assert len(set(acks)) == 1 and acks[0].run_id == run.run_id
        assert other.result().run_id != run.run_id
        with pytest.raises(RunConflict, match=run.run_id):
            store.submit(changed, "lab")
        assert store.runs.count() == 2
        assert store.runs.get(run.run_id).received_at.ToDatetime() == acks[0].received_at
        accepted, refusals = store.submissions.snapshot()
        assert accepted == 9 and refusals == {"conflict": 1}
    finally:
        store.close()


def test_failed_runs_carry_no_figures() -> None:
    row = run_row(make_run(status="out_of_memory"), "lab")
    assert row["status"] == "out_of_memory"
    assert row["epoch2_seconds"] is None and row["images_per_joule"] is None
    assert row["peak_memory_bytes"] is None


def test_runs_survive_close_and_reopen(tmp_path: Path) -> None:
    db = tmp_path / "c.duckdb"
    store = Store(db)
    runs = [make_run() for _ in range(3)]
    acks = store.submit_many(runs, "lab")
    store.close()
    store = Store(db)
    try:
        assert store.runs.count() == 3
        for run, ack in zip(runs, acks, strict=True):
            stored = store.runs.get(run.run_id)
            assert stored.run == run
            assert stored.received_at.ToDatetime() == ack.received_at
        listed, token = store.runs.list(RunFilter(submitter="lab"), page_size=2)
        assert len(listed) == 2 and token
    finally:
        store.close()


def _smoke_run(seconds: float) -> object:
    """A run made with `gpubench-agent run --limit-images 240` at the native size."""
    return make_run(epoch2_seconds=seconds, train_images_per_second=192 / (seconds * 0.82),
                    config__image_count=240, config__train_images=192,
                    config__validation_images=48)


def test_a_fresh_database_keeps_smoke_runs_apart(tmp_path: Path) -> None:
    store = Store(tmp_path / "c.duckdb")
    try:
        smoke = _smoke_run(1.9)
        store.submit_many([*(make_run(epoch2_seconds=s) for s in (16.0, 17.0, 18.0)), smoke],
                          "lab")
        assert not store.runs.get(smoke.run_id).outlier
        groups = store.aggregates.compare_groups(CompareQuery(model="B0"))
        assert sorted((g.values["train_images"], g.runs) for g in groups) == [
            ((192,), 1), ((1709,), 3)]
        [both] = store.aggregates.compare_groups(CompareQuery(model="B0", allow_mixed=True))
        assert (both.runs, both.values["train_images"]) == (4, (192, 1709))
    finally:
        store.close()


def _kernels_run(seconds: float, **fields: object) -> object:
    """A torch run with the backend's own kernels (and `fields`' other options) on."""
    return make_run(backend="torch", epoch2_seconds=seconds, config__batched_augmentation=True,
                    config__fused_batchnorm=True, config__channels_first=True, **fields)


def test_the_row_names_the_settings_the_run_used() -> None:
    assert run_row(make_run(), "lab")["settings"] == "keras"
    assert run_row(_kernels_run(4.0), "lab")["settings"] == "kernels"
    two = make_run(backend="torch", config__fused_batchnorm=True, config__data_on_device=True)
    assert run_row(two, "lab")["settings"] == "fused-batchnorm+data-on-device"


def _searched_by_schema_1(seconds: float, batch: int) -> object:
    """A run of schema 1: its batch found by the largest-batch search (--batch steps),
    before batch_rule and largest_batch_per_gpu existed."""
    return make_run(epoch2_seconds=seconds, batch_per_gpu=batch, schema_version=1,
                    config__batch_choice=run_pb2.BATCH_CHOICE_SEARCHED)


def _by_rule(rule: str, seconds: float, batch: int, largest: int = 0) -> object:
    """A run of schema 2 whose batch was chosen by `rule`."""
    return make_run(epoch2_seconds=seconds, batch_per_gpu=batch, config__batch_rule=rule,
                    result__largest_batch_per_gpu=largest)


def test_the_row_says_how_the_batch_was_chosen_and_the_memory_answer() -> None:
    def columns(run: object) -> tuple[str, int]:
        row = run_row(run, "lab")
        return row["batch_rule"], row["largest_batch_per_gpu"]

    assert columns(make_run(batch_per_gpu=128)) == ("given", 0)  # schema 1, --batch 128
    assert columns(_searched_by_schema_1(12.0, 200)) == ("largest", 200)
    assert columns(_by_rule("steps", 14.0, 128, largest=200)) == ("steps", 200)
    assert columns(_by_rule("largest", 12.0, 200, largest=200)) == ("largest", 200)
    unsaid = make_run(config__batch_choice=run_pb2.BATCH_CHOICE_UNSPECIFIED)
    assert columns(unsaid) == ("", 0)


def test_each_submission_is_answered_once_its_own_batch_has_committed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The first submission stores its run; two more arrive meanwhile and wait. Once the
    # first batch has committed, its submitter is answered although the next batch (the
    # two others', held open here) is still being stored.
    store = Store(tmp_path / "c.duckdb")
    stored = store.store_rows
    batches: list[int] = []
    entered = [threading.Event(), threading.Event()]
    release = [threading.Event(), threading.Event()]

    def gated(rows):
        turn = len(batches)
        batches.append(len(rows))
        entered[turn].set()
        assert release[turn].wait(30)
        return stored(rows)

    monkeypatch.setattr(store, "store_rows", gated)
    answered: dict[str, object] = {}

    def submit(name: str) -> None:
        answered[name] = store.submit(make_run(), "lab")

    first = threading.Thread(target=submit, args=("first",))
    first.start()
    assert entered[0].wait(30)
    later = [threading.Thread(target=submit, args=(n,)) for n in ("second", "third")]
    for thread in later:
        thread.start()
    while len(store._queue) < 2:  # both wait for the first batch
        time.sleep(0.01)
    release[0].set()
    first.join(30)
    try:
        assert not first.is_alive() and "first" in answered
        assert entered[1].wait(30) and batches == [1, 2]
        assert not any(n in answered for n in ("second", "third"))
    finally:
        release[1].set()
        for thread in later:
            thread.join(30)
    try:
        assert set(answered) == {"first", "second", "third"} and store.runs.count() == 3
    finally:
        store.close()
