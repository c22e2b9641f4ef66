"""Run ids as listings show them and GetRun takes them (the shortest unique prefix), and
the comparison key and the largest batch in what a notebook gets (DataFrames, the
export), against a real collector, in one process and through front-ends."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import duckdb
import pandas as pd
import pytest
from factories import REFERENCE_RUNS, import_reference_runs

from gpubench import frames
from gpubench.client import Client
from gpubench.errors import NotFound, RequestRefused

# Three ids sharing their first 11 characters.
SHARED = "5b0f5c2e-0f"
IDS = [f"{SHARED}{tail}" for tail in ("11-4000-8000-000000000001", "22-4000-8000-000000000002",
                                      "23-4000-8000-000000000003")]


def test_short_ids_are_unique_prefixes_and_get_run_takes_them(collector: Any,
                                                              make_run: Any) -> None:
    with Client(collector.address, token=collector.admin_token) as client:
        for run_id in IDS:
            client.submit_run(make_run(run_id=run_id))
        client.submit_run(make_run(run_id="c0ffee00-1111-4222-8333-444444444444"))
        listed = {s.run.run_id: s.short_id for s in client.iter_runs()}
        # One past the longest prefix each shares with another; 8 characters at least.
        assert listed == {IDS[0]: f"{SHARED}1", IDS[1]: f"{SHARED}22", IDS[2]: f"{SHARED}23",
                          "c0ffee00-1111-4222-8333-444444444444": "c0ffee00"}
        for run_id, short in listed.items():
            got = client.get_run(short)
            assert got.run.run_id == run_id and got.short_id == short
        assert client.get_run(IDS[1].upper()[:13]).run.run_id == IDS[1]  # case aside
        with pytest.raises(RequestRefused, match=r"3 stored run ids start with it.*give more"):
            client.get_run(SHARED[:8])
        with pytest.raises(RequestRefused, match="4 of its first characters"):
            client.get_run("5b0")
        with pytest.raises(NotFound, match="no stored run id starts with it"):
            client.get_run("deadbeef")
        # The frames carry it, for the terminal's tables.
        frame = client.list_runs()
        assert sorted(frame["short_id"]) == sorted(listed.values())


def test_the_reference_runs_are_listed_by_their_first_8_characters(collector_factory: Any,
                                                                  tmp_path: Path) -> None:
    """docs/results/runs/' ids differ early, so `runs list` shows each in 8 characters and
    `runs show` takes them."""
    db = tmp_path / "references.duckdb"
    import_reference_runs(db)
    running = collector_factory(db_path=db)
    with Client(running.address, token=running.admin_token) as client:
        listed = list(client.iter_runs())
        assert len(listed) == len(list(REFERENCE_RUNS.glob("*.json")))
        assert all(len(stored.short_id) == 8 for stored in listed), \
            [stored.short_id for stored in listed]
        published = [stored for stored in listed if stored.run.published]
        assert len(published) == 3
        for stored in published:
            assert client.get_run(stored.short_id).run.run_id == stored.run.run_id


def test_dataframes_and_the_export_carry_the_key_and_the_largest_batch(
        collector: Any, make_run: Any, tmp_path: Path) -> None:
    # One GPU, two ways of running: TensorFlow through Keras (90 s), torch's own kernels
    # (33 s). A group-by that ignores the key would mix them into one median.
    fast = {"backend": "torch", "config__batched_augmentation": True,
            "config__fused_batchnorm": True, "config__channels_first": True,
            "config__batch_rule": "steps", "result__largest_batch_per_gpu": 150}
    with Client(collector.address, token=collector.admin_token) as client:
        for seconds in (33.0, 33.5, 32.8):
            client.submit_run(make_run(model="B3", epoch2_seconds=seconds, **fast))
        for seconds in (90.0, 91.0, 89.0):
            client.submit_run(make_run(model="B3", epoch2_seconds=seconds,
                                       config__batch_rule="steps"))
        export = tmp_path / "runs.parquet"
        assert client.export(export) == 6
        runs = pd.read_parquet(export)
        assert {*frames.SHARED, "largest_batch_per_gpu", "timed_batch_per_gpu"} <= set(runs)
        key = ", ".join(frames.SHARED)
        groups = duckdb.sql(f"SELECT {key}, median(epoch2_s) AS median FROM runs "
                            f"GROUP BY {key} ORDER BY median").df()
        assert groups["median"].tolist() == [33.0, 90.0]
        assert groups["settings"].tolist() == ["kernels", "keras"]
        # A comparison's DataFrame saves to Parquet with its attrs (plain values only).
        compared = client.compare("B3", backend="torch")
        path = tmp_path / "compare.parquet"
        compared.to_parquet(path)
        back = pd.read_parquet(path)
        assert back.attrs["settings"] == "kernels" and back.attrs["model"] == "B3"
        assert back.iloc[0]["largest_batch_per_gpu"] == 150
        assert back.iloc[0]["settings"] == "kernels" and back.iloc[0]["batch_rule"] == "steps"
        # The leaderboard's entries carry both batches too.
        board = client.leaderboard("B3", settings="kernels", batch_rule="steps")
        assert (board.iloc[0]["timed_batch_per_gpu"], board.iloc[0]["largest_batch_per_gpu"]) \
            == (make_run(model="B3").config.batch_per_gpu, 150)
        assert {*frames.SHARED} <= set(board.columns)
