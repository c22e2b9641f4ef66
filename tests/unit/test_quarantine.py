"""Finding the rows a bulk insert refuses, on the store's real insert into DuckDB."""

from __future__ import annotations

from pathlib import Path

import pytest
from factories import make_run

from gpubench.collector.quarantine import first_line, insert_sorting_out, refused_by_database
from gpubench.collector.rows import run_row, utc_now
from gpubench.collector.store import Store


def _row(**fields: object) -> dict:
    row = run_row(make_run(**fields), "lab")
    row["received_at"] = utc_now()
    return row


@pytest.mark.parametrize("bad_at", [(0,), (57,), (199,), (3, 4, 150)])
def test_only_the_rows_the_database_refuses_are_set_aside(tmp_path: Path, bad_at) -> None:
    rows = [_row(label=str(i)) for i in range(200)]
    for i in bad_at:
        rows[i]["train_images"] = 3_000_000_000  # past the INTEGER column
    store = Store(tmp_path / "c.duckdb")
    calls = []

    def insert(part: list) -> None:
        calls.append(len(part))
        store.flusher._insert(part)

    try:
        refused = insert_sorting_out(rows, insert, refused_by_database)
        assert sorted(rows.index(row) for row, _ in refused) == sorted(bad_at)
        assert all("out of range" in first_line(exc) for _, exc in refused)
        assert store.count() == 200 - len(bad_at)
        # Bisection, not a row at a time: about 2 log2(200) calls per refused row.
        assert len(calls) <= 1 + 2 * 8 * len(bad_at)
    finally:
        store.close()


def test_a_batch_the_database_takes_is_one_insert(tmp_path: Path) -> None:
    store = Store(tmp_path / "c.duckdb")
    calls = []
    try:
        rows = [_row() for _ in range(50)]
        assert insert_sorting_out(rows, lambda part: calls.append(store.flusher._insert(part)),
                                  refused_by_database) == []
        assert len(calls) == 1 and store.count() == 50
    finally:
        store.close()


def test_an_error_not_about_the_rows_is_raised_not_set_aside() -> None:
    def disk_full(part: list) -> None:
        raise OSError(28, "No space left on device")

    with pytest.raises(OSError, match="No space left"):
        insert_sorting_out([{"run_id": "a"}, {"run_id": "b"}], disk_full,
                           refused_by_database)


def test_the_first_line_leaves_out_duckdbs_sql_excerpt() -> None:
    error = ValueError("Conversion Error: out of range\n\nLINE 1: INSERT INTO runs ...\n  ^^^")
    assert first_line(error) == "Conversion Error: out of range"
    assert first_line(ValueError("")) == "ValueError"
