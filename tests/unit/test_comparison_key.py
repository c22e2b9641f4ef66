"""The comparison key is one table (gpubench.comparison_key): every copy of it derives
from that table, so a dimension is everywhere the table is, and nowhere else."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest
from factories import make_run

from gpubench import comparison_key, frames, stored_runs, tables
from gpubench.collector import aggregates, columns, migrations, outliers, rows
from gpubench.comparison_key import DIMENSIONS, NAMES, key_of
from gpubench.v1 import collector_pb2, run_pb2


def _schema_1(run: run_pb2.Run, choice: int) -> run_pb2.Run:
    """`run` as a record of schema 1 says it: no batch rule, a batch choice."""
    run.schema_version = 1
    run.config.batch_rule = ""
    run.config.batch_choice = choice
    return run


def test_a_schema_1_record_reads_its_batch_rule_from_its_batch_choice() -> None:
    old = _schema_1(make_run(), run_pb2.BATCH_CHOICE_GIVEN)
    assert key_of(old).batch_rule == "given"
    assert rows.run_row(old, "")["batch_rule"] == "given"
    assert frames.flat_run(collector_pb2.StoredRun(run=old))["batch_rule"] == "given"


def test_the_agents_after_run_table_finds_schema_1_runs_like_gpubench_compare() -> None:
    from gpubench.agent import summary

    mine = make_run(config__batch_rule="given")
    old = collector_pb2.StoredRun(run=_schema_1(make_run(), run_pb2.BATCH_CHOICE_GIVEN))
    unlike = collector_pb2.StoredRun(run=make_run(config__batch_rule="steps"))
    assert [s.run.run_id for s in summary.others_like(mine, [old, unlike])] == [old.run.run_id]


def test_every_dimension_is_a_column_of_the_runs_and_the_outlier_groups() -> None:
    assert set(NAMES) <= set(columns.RUN_COLUMNS.names)
    assert set(NAMES) <= set(outliers.OUTLIER_GROUP)
    assert aggregates.KEY_COLUMNS == NAMES
    assert set(NAMES) <= set(rows.run_row(make_run(), ""))
    for d in DIMENSIONS:
        kind = columns.RUN_COLUMNS.field(d.name).type
        assert columns.SQL_TYPES[kind] == d.sql_type, d.name


def test_the_migrated_database_stores_no_figures_to_keep_current(tmp_path: Path) -> None:
    # The outlier groups' figures are computed where read (collector.outliers), keyed
    # by every dimension there; no table of them can lag behind a new dimension.
    path = tmp_path / "c.duckdb"
    with duckdb.connect(str(path)) as con:
        migrations.apply(con, path)
        tables = {name for (name,) in con.execute("SHOW TABLES").fetchall()}
    assert "runs" in tables and "group_figures" not in tables


def test_every_dimension_has_its_wire_fields() -> None:
    """The proto is the third place a new dimension touches: its pin, its shared value
    and (unless the leaderboard pins it) its entry's value."""
    for message in (collector_pb2.CompareRequest, collector_pb2.CompareResponse):
        assert set(NAMES) <= set(message.DESCRIPTOR.fields_by_name), message
    entry = set(collector_pb2.LeaderboardEntry.DESCRIPTOR.fields_by_name)
    assert set(comparison_key.ENTRY_DIMENSIONS) <= entry
    for message in (collector_pb2.LeaderboardRequest, collector_pb2.LeaderboardResponse):
        assert set(comparison_key.RANKED_DIMENSIONS) <= set(message.DESCRIPTOR.fields_by_name)


def test_the_flags_words_and_frames_come_from_the_table() -> None:
    from gpubench.cli import compare, leaderboard

    flags = {opt: param.name for param in compare.params for opt in param.opts}
    assert {d.flag: d.name for d in DIMENSIONS}.items() <= flags.items()
    board = {opt for param in leaderboard.params for opt in param.opts}
    assert {d.flag for d in DIMENSIONS if d.leaderboard_help} <= board
    assert frames.SHARED == NAMES and set(NAMES) <= set(frames.FLAT_RUN_COLUMNS)
    assert tables.DIMENSION_WORDS == {d.name: d.words for d in DIMENSIONS}


def test_estimate_groups_runs_apart_in_all_but_the_images_and_epochs() -> None:
    """estimate scales by the images and epochs asked for; everything else that changes
    what was timed keeps runs apart."""
    base = make_run(config__epochs=5, config__train_images=1709)
    assert stored_runs.setup_of(base) == stored_runs.setup_of(
        make_run(config__epochs=3, config__train_images=192))
    assert stored_runs.setup_of(base) != stored_runs.setup_of(make_run(backend="torch"))
    assert set(stored_runs.setup_of(base).as_dict()) == {
        "gpu_config", *(n for n in NAMES if n not in ("train_images", "epochs"))}
    assert stored_runs.setup_of(base).backend == base.software.backend


def test_a_key_is_a_frozen_ordered_mapping() -> None:
    key = key_of(make_run())
    assert dict(key) == {d.name: d.of(make_run()) for d in DIMENSIONS}
    assert key == key_of(make_run()) and hash(key) == hash(key_of(make_run()))
    with pytest.raises(KeyError, match="not a dimension"):
        comparison_key.Key({"colour": "red"})
    with pytest.raises(AttributeError):
        key.colour  # noqa: B018
