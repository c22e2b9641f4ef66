"""The store on a real DuckDB file: migrations, extracted columns, reopening."""

from __future__ import annotations

import re
import threading
import time
from pathlib import Path

import pytest
from factories import make_run

from gpubench import record
from gpubench.collector import columns, migrations, outliers, queries
from gpubench.collector.aggregates import CompareQuery
from gpubench.collector.errors import RunConflict, SchemaTooNew
from gpubench.collector.queries import RunFilter
from gpubench.collector.rows import run_row
from gpubench.collector.store import Store
from gpubench.v1 import run_pb2


def test_a_fresh_database_records_every_migration_once(tmp_path: Path) -> None:
    db = tmp_path / "c.duckdb"
    store = Store(db)
    applied = store.database.applied_migrations()
    store.close()
    assert applied == [m.name for m in migrations.MIGRATIONS]
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


def test_upgrading_a_database_from_0002_gives_its_figures(tmp_path: Path) -> None:
    db = tmp_path / "c.duckdb"
    store = Store(db)
    store.submit_many([make_run(epoch2_seconds=s) for s in (16.0, 17.0, 19.0)], "lab")
    # As a database from before the figures existed: no settings, batch rule or later
    # columns, no record of them (the quarantine of 0006 kept: it is not runs').
    undone = [m.name for m in migrations.MIGRATIONS[2:] if m.name != "0006_quarantine"]
    dropped = [c for name in undone for c in COLUMNS_ADDED[name]]
    for statement in (f"ALTER TABLE runs DROP COLUMN {c}" for c in dropped):
        store.database.cursor().execute(statement)
    store.database.cursor().execute(
        "DELETE FROM schema_migrations WHERE list_contains(?, name)", [undone])
    store.close()
    store = Store(db)
    try:
        assert store.database.applied_migrations()[-len(undone):] == undone
        [t4] = store.aggregates.compare_groups(CompareQuery(model="B0"))
        assert (t4.gpu_name, t4.runs, t4.epoch2_median_seconds) == ("Tesla T4", 3, 17.0)
    finally:
        store.close()



# The outlier group before train_images was part of it (migration 0003's table order).
GROUP_BEFORE_TRAIN_IMAGES = (
    "model", "gpu_name", "gpu_count", "backend", "precision", "image_size", "benchmark_version",
)
# ... and before settings was (migration 0004's).
GROUP_BEFORE_SETTINGS = (
    "model", "gpu_name", "gpu_count", "backend", "precision", "image_size", "train_images",
    "benchmark_version",
)
# ... and before the batch rule was (migration 0005's).
GROUP_BEFORE_BATCH_RULE = (
    "model", "gpu_name", "gpu_count", "backend", "precision", "image_size", "train_images",
    "settings", "benchmark_version",
)
# ... and before the pipeline, weights, data, epochs and memory limit were (0007's).
GROUP_BEFORE_0008 = (
    "model", "gpu_name", "gpu_count", "backend", "precision", "image_size", "train_images",
    "settings", "batch_rule", "benchmark_version",
)
# The runs table's columns each migration added.
_ADDED = re.compile(r"ALTER TABLE runs ADD COLUMN (\w+)")
COLUMNS_ADDED = {m.name: tuple(_ADDED.findall(" ".join(m.statements)))
                 for m in migrations.MIGRATIONS}


def _upgraded(store: Store, first: str) -> list[str]:
    """The migrations applied from `first` on, in order (later ones may follow)."""
    applied = store.database.applied_migrations()
    return applied[applied.index(first):]


def _as_an_older_collector(
    patch: pytest.MonkeyPatch, migrations_applied: int, outlier_group: tuple[str, ...]
) -> None:
    """The store as a collector that knew only the first `migrations_applied` migrations
    (no runs.settings column before 0005, no batch rule before 0007) and keyed its
    outlier groups by `outlier_group`. The quarantine table, which this store's code
    reads, is there too."""
    known = migrations.MIGRATIONS[:migrations_applied]
    quarantine = next(m for m in migrations.MIGRATIONS if m.name == "0006_quarantine")
    patch.setattr(migrations, "MIGRATIONS",
                  known if quarantine in known else (*known, quarantine))
    patch.setattr(outliers, "OUTLIER_GROUP", outlier_group)
    run_columns = columns.RUN_COLUMNS
    for migration, added in COLUMNS_ADDED.items():
        if migration not in {m.name for m in known}:
            for name in added:
                run_columns = run_columns.remove(run_columns.get_field_index(name))
    patch.setattr(columns, "RUN_COLUMNS", run_columns)
    patch.setattr(columns, "INSERT_ROWS", columns.insert_rows_sql(run_columns))
    if "0008_like_for_like_and_flags" not in {m.name for m in known}:
        # No flags nor published runs to leave out, nor columns that say so.
        patch.setattr(outliers, "SCORED_RUNS", "status = 'ok' AND epoch2_seconds IS NOT NULL")
        patch.setattr(queries, "STORED_COLUMNS",
                      queries.STORED_COLUMNS.replace("flagged, flag_reasons", "false, ''"))


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
        _as_an_older_collector(old, 3, GROUP_BEFORE_TRAIN_IMAGES)
        store = Store(db)
        store.submit_many([*full, smoke], "lab")
        assert store.runs.get(smoke.run_id).outlier  # 15 s faster than the full runs' median
        assert not any(store.runs.get(r.run_id).outlier for r in full)
        store.close()
    store = Store(db)
    try:
        assert _upgraded(store, "0004_group_figures_by_train_images")[:4] == [
            "0004_group_figures_by_train_images", "0005_settings", "0007_batch_rule",
            "0008_like_for_like_and_flags"]
        # The smoke run is alone in its group now: no outlier, score 0.
        stored = store.runs.get(smoke.run_id)
        assert (stored.outlier, stored.outlier_score) == (False, 0.0)
        # 16-19 s: median 17.5, MAD 1.0.
        assert store.runs.get(full[1].run_id).outlier_score == pytest.approx(0.6745 * -0.5)
        [standard] = store.aggregates.compare_groups(CompareQuery(model="B0", train_images=1709))
        assert (standard.runs, standard.outliers_excluded) == (4, 0)
        assert standard.epoch2_median_seconds == pytest.approx(17.5)
        assert standard.values["train_images"] == (1709,)
        [small] = store.aggregates.compare_groups(CompareQuery(model="B0", train_images=192))
        assert (small.runs, small.epoch2_median_seconds,
                small.values["train_images"]) == (1, 1.9, (192,))
        rows = [(g.values["train_images"], outliers_in, g.runs)
                for outliers_in in (False, True)
                for g in store.aggregates.compare_groups(
                    CompareQuery(model="B0", include_outliers=outliers_in))]
        assert sorted(rows) == [((192,), False, 1), ((192,), True, 1), ((1709,), False, 4),
                                ((1709,), True, 4)]
    finally:
        store.close()


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


def test_upgrading_from_0004_fills_settings_from_the_records_and_keys_groups_by_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = tmp_path / "c.duckdb"
    # On an H200: a T4 is expected to train B0 with torch's kernels at about 76 img/s, and
    # 4 s an epoch (521 img/s) would be flagged as more than it can.
    h200 = "NVIDIA H200"
    keras = [make_run(gpu_name=h200, backend="torch", epoch2_seconds=s)
             for s in (16.0, 17.0, 17.5, 18.0, 19.0)]
    kernels = [_kernels_run(4.0, gpu_name=h200), _kernels_run(4.2, gpu_name=h200)]
    on_device = _kernels_run(3.0, gpu_name=h200, config__data_on_device=True)
    jit = make_run(gpu_name=h200, backend="torch", epoch2_seconds=15.0,
                   config__jit_compile=True)
    # The database as a collector with migrations 0001-0004 wrote it: one group for all.
    with monkeypatch.context() as old:
        _as_an_older_collector(old, 4, GROUP_BEFORE_SETTINGS)
        store = Store(db)
        store.submit_many([*keras, *kernels, on_device, jit], "lab")
        assert all(store.runs.get(r.run_id).outlier for r in [*kernels, on_device])
        assert "settings" not in {
            c for (c,) in store.database.cursor().execute(
                "SELECT column_name FROM information_schema.columns WHERE table_name = 'runs'"
            ).fetchall()}
        store.close()
    store = Store(db)
    try:
        assert _upgraded(store, "0005_settings")[:3] == ["0005_settings", "0007_batch_rule",
                                                         "0008_like_for_like_and_flags"]
        settings = dict(store.database.cursor().execute(
            "SELECT run_id, settings FROM runs").fetchall())
        assert {settings[r.run_id] for r in keras} == {"keras"}
        assert [settings[r.run_id] for r in kernels] == ["kernels", "kernels"]
        assert settings[on_device.run_id] == "kernels+data-on-device"
        assert settings[jit.run_id] == "jit"
        # Each settings is its own group now: the fast runs are no outliers of Keras's.
        assert not any(store.runs.get(r.run_id).outlier for r in [*kernels, on_device])
        [fast] = store.aggregates.compare_groups(CompareQuery(model="B0", settings="kernels"))
        assert (fast.runs, fast.outliers_excluded, fast.values["settings"]) == (2, 0, ("kernels",))
        assert fast.epoch2_median_seconds == pytest.approx(4.1)
        [slow] = store.aggregates.compare_groups(CompareQuery(model="B0", settings="keras"))
        assert (slow.runs, slow.epoch2_median_seconds) == (5, 17.5)
        groups = store.aggregates.compare_groups(CompareQuery(model="B0"))
        assert sorted(g.values["settings"] for g in groups) == [
            ("jit",), ("keras",), ("kernels",), ("kernels+data-on-device",)]
        assert sorted((g.values["settings"], g.runs) for g in groups) == [
            (("jit",), 1), (("keras",), 5), (("kernels",), 2),
            (("kernels+data-on-device",), 1)]
        # A run submitted after the upgrade gets its settings from its row.
        later = _kernels_run(4.1, gpu_name=h200)
        store.submit_many([later], "lab")
        [fast] = store.aggregates.compare_groups(CompareQuery(model="B0", settings="kernels"))
        assert (fast.runs, fast.epoch2_median_seconds) == (3, 4.1)
    finally:
        store.close()


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


def test_upgrading_from_0006_fills_the_batch_rule_from_the_records_and_keys_groups_by_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = tmp_path / "c.duckdb"
    given = [make_run(epoch2_seconds=s, batch_per_gpu=128) for s in (17.0, 17.1, 17.2, 17.3)]
    searched = [_searched_by_schema_1(9.0, 200), _searched_by_schema_1(9.4, 208)]
    steps = _by_rule("steps", 17.15, 128, largest=216)
    unsaid = make_run(epoch2_seconds=17.2,
                      config__batch_choice=run_pb2.BATCH_CHOICE_UNSPECIFIED)
    # The database as a collector with migrations 0001-0006 wrote it: one group for all.
    with monkeypatch.context() as old:
        _as_an_older_collector(old, 6, GROUP_BEFORE_BATCH_RULE)
        store = Store(db)
        store.submit_many([*given, *searched, steps, unsaid], "lab")
        assert all(store.runs.get(r.run_id).outlier for r in searched)  # 8 s faster: outliers
        store.close()
    store = Store(db)
    try:
        assert _upgraded(store, "0007_batch_rule")[:2] == ["0007_batch_rule",
                                                           "0008_like_for_like_and_flags"]
        found = {r: (rule, largest) for r, rule, largest in store.database.cursor().execute(
            "SELECT run_id, batch_rule, largest_batch_per_gpu FROM runs").fetchall()}
        assert {found[r.run_id] for r in given} == {("given", 0)}
        assert [found[r.run_id] for r in searched] == [("largest", 200), ("largest", 208)]
        assert found[steps.run_id] == ("steps", 216)
        assert found[unsaid.run_id] == ("", 0)
        # Each rule is its own group now: the searched runs are no outliers of the given.
        assert not any(store.runs.get(r.run_id).outlier for r in searched)
        [largest] = store.aggregates.compare_groups(CompareQuery(model="B0", batch_rule="largest"))
        assert (largest.runs, largest.outliers_excluded, largest.values["batch_rule"]) == (
            2, 0, ("largest",))
        assert (largest.max_batch_per_gpu, largest.largest_batch_per_gpu_max) == (208, 208)
        [fixed] = store.aggregates.compare_groups(CompareQuery(model="B0", batch_rule="given"))
        assert (fixed.runs, fixed.largest_batch_per_gpu_max) == (4, 0)
        assert fixed.epoch2_median_seconds == pytest.approx(17.15)
        groups = store.aggregates.compare_groups(CompareQuery(model="B0"))
        assert sorted(g.values["batch_rule"] for g in groups) == [
            ("",), ("given",), ("largest",), ("steps",)]
        assert sorted((*g.values["batch_rule"], g.runs, g.largest_batch_per_gpu_max)
                      for g in groups) == [("", 1, 0), ("given", 4, 0), ("largest", 2, 208),
                                           ("steps", 1, 216)]
        # Mixed on purpose, the figures come from the runs: the memory answer of them all.
        [both] = store.aggregates.compare_groups(CompareQuery(model="B0", allow_mixed=True))
        assert (both.runs, both.largest_batch_per_gpu_max) == (8, 216)
        assert both.values["batch_rule"] == ("", "given", "largest", "steps")
    finally:
        store.close()


def test_upgrading_from_0007_flags_what_the_checks_would_refuse_and_folds_gpu_names(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = tmp_path / "c.duckdb"
    honest = [make_run(epoch2_seconds=s) for s in (17.0, 17.2, 17.4)]
    spaced = make_run(epoch2_seconds=17.1)
    spaced.gpus[0].name = "Tesla T4 "
    # Stored before the checks existed: epoch 2 of a nanosecond, its epochs saying 17 s.
    fabricated = make_run()
    fabricated.result.epoch2_seconds = 1e-9
    streamed = make_run(epoch2_seconds=30.0, config__pipeline="cached",
                        config__pipeline_mode="streaming")
    with monkeypatch.context() as old:
        _as_an_older_collector(old, 7, GROUP_BEFORE_0008)
        store = Store(db)
        store.submit_many([*honest, spaced, fabricated, streamed], "lab")
        store.close()
    store = Store(db)
    try:
        assert _upgraded(store, "0008_like_for_like_and_flags")[:3] == [
            "0008_like_for_like_and_flags", "0009_gpu_catalogue_flags", "0010_group_submitters"]
        flagged = store.runs.get(fabricated.run_id)
        assert flagged.flagged and not flagged.outlier
        assert any(r.startswith("inconsistent: run.result.epoch2_seconds: is 1e-09 s")
                   for r in flagged.flag_reasons), flagged.flag_reasons
        assert not any(store.runs.get(r.run_id).flagged for r in [*honest, spaced, streamed])
        names = {r: n for r, n in store.database.cursor().execute(
            "SELECT run_id, gpu_name FROM runs").fetchall()}
        assert names[spaced.run_id] == "Tesla T4"
        # The streamed run is a pipeline of its own now (it was an outlier of the seed
        # runs); the spaced name is one T4 with the others.
        assert not store.runs.get(streamed.run_id).outlier
        [seed] = store.aggregates.compare_groups(CompareQuery(model="B0", pipeline="seed"))
        assert (seed.gpu_name, seed.runs, seed.outliers_excluded) == ("Tesla T4", 4, 0)
        [alone] = store.aggregates.compare_groups(CompareQuery(model="B0", pipeline="streaming"))
        assert (alone.runs, alone.epoch2_median_seconds) == (1, 30.0)
        [asked] = store.aggregates.compare_groups(CompareQuery(model="B0", pipeline="seed",
                                                    include_flagged=True))
        assert asked.runs == 5 and asked.flagged_included == 1
    finally:
        store.close()


def test_upgrading_flags_runs_stored_before_the_gpu_catalogue(tmp_path: Path) -> None:
    db = tmp_path / "c.duckdb"
    store = Store(db)
    honest = [make_run(epoch2_seconds=s) for s in (16.0, 17.0, 18.0)]
    look_alike = make_run(gpu_name="Tesla T4", epoch2_seconds=17.0)
    look_alike.gpus[0].name = "TesIa T4"
    store.submit_many([*honest, look_alike], "lab")
    # As a collector before migration 0009 stored it: unflagged, in the T4's group.
    cursor = store.database.cursor()
    cursor.execute("UPDATE runs SET flagged = false, flag_reasons = '' WHERE run_id = ?",
                   [look_alike.run_id])
    cursor.execute("DELETE FROM schema_migrations WHERE name = '0009_gpu_catalogue_flags'")
    store.close()
    store = Store(db)
    try:
        assert store.database.applied_migrations()[-1] == "0009_gpu_catalogue_flags"
        stored = store.runs.get(look_alike.run_id)
        assert stored.flagged
        assert stored.flag_reasons[0].startswith(
            "unrecognised GPU 'TesIa T4': looks like the catalogued Tesla T4")
        assert not any(store.runs.get(run.run_id).flagged for run in honest)
        groups = store.aggregates.compare_groups(CompareQuery(model="B0"))
        assert [(g.gpu_name, g.runs) for g in groups] == [("Tesla T4", 3)]
    finally:
        store.close()


def test_upgrading_unflags_the_runs_of_cards_the_catalogue_lists_now(tmp_path: Path) -> None:
    db = tmp_path / "c.duckdb"
    store = Store(db)
    # An RTX 3090's runs, flagged "unrecognised GPU" by a catalogue that did not list it.
    runs = [make_run(gpu_name="NVIDIA GeForce RTX 3090", epoch2_seconds=s) for s in (8.0, 8.4)]
    store.submit_many(runs, "lab")
    cursor = store.database.cursor()
    cursor.execute("UPDATE runs SET flagged = true, flag_reasons = ?",
                   ["unrecognised GPU 'NVIDIA GeForce RTX 3090': no card in the collector's "
                    "catalogue has this name (gpu_specs.json); its figures are held to the best "
                    "of every card"])
    cursor.execute("DELETE FROM schema_migrations WHERE name = '0012_gpu_catalogue_cards'")
    store.close()
    store = Store(db)
    try:
        assert "0012_gpu_catalogue_cards" in store.database.applied_migrations()
        assert not any(store.runs.get(run.run_id).flagged for run in runs)
        groups = store.aggregates.compare_groups(CompareQuery(model="B0"))
        assert [(g.gpu_name, g.runs, g.uncatalogued) for g in groups] == [
            ("NVIDIA GeForce RTX 3090", 2, False)]
    finally:
        store.close()


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
