"""Each outlier group's scores kept until the group changes (collector.outliers
GroupScores), on a real DuckDB file: a read scores its runs against the runs it sees."""

from __future__ import annotations

from pathlib import Path

import pytest
from factories import make_run

from gpubench.collector import columns, outliers
from gpubench.collector.aggregates import CompareQuery
from gpubench.collector.database import transaction
from gpubench.collector.queries import RunFilter
from gpubench.collector.rows import run_row, utc_now
from gpubench.collector.store import Store


@pytest.fixture
def store(tmp_path: Path):
    opened = Store(tmp_path / "c.duckdb")
    yield opened
    opened.close()


def _scores(store: Store, con) -> dict[int, tuple[float, float, float]]:
    gids, *figures = store.runs._scores.of(con, "model = 'B0'", [])
    return {gid: values for gid, *values in zip(gids, *figures, strict=True)}


def test_a_run_is_scored_against_the_runs_its_read_sees(store: Store) -> None:
    store.submit_many([make_run(epoch2_seconds=s) for s in (16.0, 17.0, 18.0, 19.0)], "lab")
    slow = make_run(epoch2_seconds=30.0)
    store.submit_many([slow], "lab")
    assert store.runs.get(slow.run_id).outlier  # its group's median 18, MAD 1
    before = store.database.own_cursor()
    with before as con, transaction(con):
        seen = _scores(store, con)  # kept at the group's version in this snapshot
        # Two more slow runs committed meanwhile: the median moves to 19, the MAD to 3.
        store.submit_many([make_run(epoch2_seconds=s) for s in (29.0, 31.0)], "lab")
        after = store.database.cursor()
        with transaction(after):
            moved = _scores(store, after)
        # The read that began before them still scores against its own runs.
        assert _scores(store, con) == seen
    [(med, mad, _)] = seen.values()
    [(med_now, mad_now, _)] = moved.values()
    assert (med, mad) == pytest.approx((18.0, 1.0))
    assert (med_now, mad_now) == pytest.approx((19.0, 3.0))
    assert not store.runs.get(slow.run_id).outlier  # 30 s: (30 - 19) / 3 * 0.6745 < 3.5


def _answers(store: Store) -> tuple:
    """What the reads that score runs answer: the outliers counted, Compare's groups,
    a page of runs with their flags (the floats as pytest.approx)."""
    groups = store.aggregates.compare_groups(CompareQuery(model="B0"))
    page, _ = store.runs.list(RunFilter(), page_size=50)
    return (store.runs.counts()["runs_outlier"],
            [(g.config_name, g.runs, g.outliers_excluded, g.submitters,
              pytest.approx(g.epoch2_median_seconds)) for g in groups],
            [(r.run.run_id, r.outlier, pytest.approx(r.outlier_score)) for r in page])


def test_kept_scores_answer_as_scores_computed_afresh(tmp_path: Path) -> None:
    # Runs into two groups in turns, each read between (so that scores are kept), a
    # run deleted: the answers equal a fresh store's (nothing kept) over the same file.
    path = tmp_path / "c.duckdb"
    store = Store(path)
    try:
        for i, seconds in enumerate((16.0, 17.0, 40.0, 18.0, 19.0, 16.5, 60.0)):
            store.submit_many([make_run(epoch2_seconds=seconds),
                               make_run(epoch2_seconds=seconds / 2, gpu_name="NVIDIA H200")],
                              f"lab{i % 3}")
            _answers(store)
        store.delete(store.runs.list(RunFilter(), page_size=1)[0][0].run.run_id)
        kept = _answers(store)
    finally:
        store.close()
    fresh = Store(path)
    try:
        assert kept == _answers(fresh)
    finally:
        fresh.close()
    assert kept[0] >= 1  # the 60 s and 40 s runs among 16-19 s ones
    assert any(outlier for _, outlier, _ in kept[2])


def test_the_groups_table_is_made_again_when_the_database_opens(tmp_path: Path) -> None:
    path = tmp_path / "c.duckdb"
    store = Store(path)
    runs = [make_run(epoch2_seconds=s) for s in (16.0, 17.0, 18.0, 19.0)]
    store.submit_many(runs, "lab")
    store.database.cursor().execute(f"DROP TABLE {outliers.GROUPS}")  # as before it was
    store.close()
    store = Store(path)
    # A run written beside the store's writes (by an earlier version, say): its group
    # is new to the table, which the next opening makes again from the runs.
    slow = make_run(epoch2_seconds=40.0)
    others = [make_run(epoch2_seconds=s, model="B3") for s in (9.0, 9.5, 10.0, 10.5, 30.0)]
    store.database.cursor().execute(columns.INSERT_ROWS, columns.column_lists(
        [{**run_row(r, "lab"), "received_at": utc_now()} for r in (slow, *others)]))
    store.close()
    store = Store(path)
    try:
        assert store.runs.get(slow.run_id).outlier
        assert not store.runs.get(runs[0].run_id).outlier
        assert store.runs.get(others[-1].run_id).outlier  # scored: its group is known
        [group] = store.aggregates.compare_groups(CompareQuery(model="B3"))
        assert (group.runs, group.outliers_excluded) == (4, 1)
    finally:
        store.close()
