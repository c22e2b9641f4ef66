"""The store on a real DuckDB file: migrations, extracted columns, reopening."""

from __future__ import annotations

from pathlib import Path

import pytest
from factories import make_run
from gpubench.collector import migrations
from gpubench.collector import store as store_module
from gpubench.collector.errors import SchemaTooNew
from gpubench.collector.store import CompareQuery, RunFilter, Store, run_row


def test_a_fresh_database_records_every_migration_once(tmp_path: Path) -> None:
    db = tmp_path / "c.duckdb"
    store = Store(db)
    applied = store.applied_migrations()
    store.close()
    assert applied == [m.name for m in migrations.MIGRATIONS]
    store = Store(db)  # reopening applies nothing new
    try:
        assert store.applied_migrations() == applied
    finally:
        store.close()


def test_a_database_from_a_newer_collector_is_refused(tmp_path: Path) -> None:
    db = tmp_path / "c.duckdb"
    store = Store(db)
    store._cursor().execute(
        "INSERT INTO schema_migrations VALUES ('0099_from_the_future', now())"
    )
    store.close()
    with pytest.raises(SchemaTooNew, match="0099_from_the_future"):
        Store(db)


def test_pending_and_unknown_migrations() -> None:
    first = migrations.MIGRATIONS[0].name
    assert [m.name for m in migrations.pending({first})] == [
        m.name for m in migrations.MIGRATIONS[1:]]
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
        assert store.count() == 3
        for run, ack in zip(runs, acks, strict=True):
            stored = store.get(run.run_id)
            assert stored.run == run
            assert stored.received_at.ToDatetime() == ack.received_at
        listed, token = store.list(RunFilter(submitter="lab"), page_size=2)
        assert len(listed) == 2 and token
    finally:
        store.close()


def test_upgrading_a_database_fills_the_group_figures(tmp_path: Path) -> None:
    db = tmp_path / "c.duckdb"
    store = Store(db)
    store.submit_many([make_run(epoch2_seconds=s) for s in (16.0, 17.0, 19.0)], "lab")
    # As a database from before the figures existed: no table, no record of it.
    store._cursor().execute("DROP TABLE group_figures")
    store._cursor().execute(
        "DELETE FROM schema_migrations WHERE name IN "
        "('0003_group_figures', '0004_group_figures_by_train_images')"
    )
    store.close()
    store = Store(db)
    try:
        assert store.applied_migrations()[-2:] == [
            "0003_group_figures", "0004_group_figures_by_train_images"]
        [t4] = store.compare_groups(CompareQuery(model="B0"))
        assert (t4.gpu_name, t4.runs, t4.epoch2_median_seconds) == ("Tesla T4", 3, 17.0)
    finally:
        store.close()



# The outlier group before train_images was part of it (migration 0003's table order).
GROUP_BEFORE_TRAIN_IMAGES = (
    "model", "gpu_name", "gpu_count", "backend", "precision", "image_size", "benchmark_version",
)


def _smoke_run(seconds: float) -> object:
    """A run made with `gpubench-agent run --limit-images 240` at the native size."""
    return make_run(epoch2_seconds=seconds, train_images_per_second=192 / (seconds * 0.82),
                    config__image_count=240, config__train_images=192,
                    config__validation_images=48)


def test_upgrading_from_0003_keys_figures_and_outliers_by_train_images(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = tmp_path / "c.duckdb"
    full = [make_run(epoch2_seconds=s) for s in (16.0, 17.0, 18.0, 19.0)]
    smoke = _smoke_run(1.9)
    # The database as a collector with migrations 0001-0003 wrote it: one group for all.
    with monkeypatch.context() as old:
        old.setattr(migrations, "MIGRATIONS", migrations.MIGRATIONS[:3])
        old.setattr(store_module, "OUTLIER_GROUP", GROUP_BEFORE_TRAIN_IMAGES)
        store = Store(db)
        store.submit_many([*full, smoke], "lab")
        assert store.get(smoke.run_id).outlier  # 15 s faster than the full runs' median
        figures = store._cursor().execute(
            "SELECT with_outliers, runs, outliers_excluded FROM group_figures ORDER BY ALL"
        ).fetchall()
        assert figures == [(False, 4, 1), (True, 5, 0)]
        store.close()
    store = Store(db)
    try:
        assert store.applied_migrations()[-1] == "0004_group_figures_by_train_images"
        # The smoke run is alone in its group now: no outlier, score 0.
        stored = store.get(smoke.run_id)
        assert (stored.outlier, stored.outlier_score) == (False, 0.0)
        # 16-19 s: median 17.5, MAD 1.0.
        assert store.get(full[1].run_id).outlier_score == pytest.approx(0.6745 * -0.5)
        [standard] = store.compare_groups(CompareQuery(model="B0", train_images=1709))
        assert (standard.runs, standard.outliers_excluded) == (4, 0)
        assert standard.epoch2_median_seconds == pytest.approx(17.5)
        assert standard.train_images == (1709,)
        [small] = store.compare_groups(CompareQuery(model="B0", train_images=192))
        assert (small.runs, small.epoch2_median_seconds, small.train_images) == (1, 1.9, (192,))
        rows = store._cursor().execute(
            "SELECT train_images, with_outliers, runs FROM group_figures ORDER BY ALL"
        ).fetchall()
        assert rows == [(192, False, 1), (192, True, 1), (1709, False, 4), (1709, True, 4)]
    finally:
        store.close()


def test_a_fresh_database_keeps_smoke_runs_apart(tmp_path: Path) -> None:
    store = Store(tmp_path / "c.duckdb")
    try:
        smoke = _smoke_run(1.9)
        store.submit_many([*(make_run(epoch2_seconds=s) for s in (16.0, 17.0, 18.0)), smoke],
                          "lab")
        assert not store.get(smoke.run_id).outlier
        groups = store.compare_groups(CompareQuery(model="B0"))
        assert sorted((g.train_images, g.runs) for g in groups) == [((192,), 1), ((1709,), 3)]
        [both] = store.compare_groups(CompareQuery(model="B0", allow_mixed=True))
        assert (both.runs, both.train_images) == (4, (192, 1709))
    finally:
        store.close()
