"""gpubench.Client against a real collector (gRPC on port 0, a DuckDB file)."""

from __future__ import annotations

import io
import statistics
from datetime import datetime, timedelta, timezone
from typing import Any

import pandas as pd
import pytest
from factories import CARDS, TRAIN_IMAGES
from rich.console import Console

from gpubench import frames, tables
from gpubench.client import Client, RequestLimited
from gpubench.errors import AccessDenied, ExitCode, NotFound, RequestRefused

GIB = 1024**3
T4 = "Tesla T4"
ADA = "NVIDIA RTX 6000 Ada Generation"


@pytest.fixture
def client(collector: Any) -> Any:
    with Client(collector.address, collector.make_token("lab")) as c:
        yield c


def test_submit_get_round_trip(client: Client, make_run: Any) -> None:
    run = make_run(label="lab workstation")
    ack = client.submit_run(run)
    assert ack.run_id == run.run_id and len(ack.content_sha256) == 64
    stored = client.get_run(run.run_id)
    assert stored.run == run
    assert stored.submitter == "lab"
    # Resubmitting the same run is acknowledged the same way (the agent's retry).
    again = client.submit_run(run)
    assert (again.run_id, again.content_sha256) == (ack.run_id, ack.content_sha256)
    assert again.received_at == ack.received_at


def test_list_runs_pages_filters_and_flattens(client: Client, make_run: Any) -> None:
    now = datetime.now(timezone.utc)
    runs = [make_run(gpu_name=T4, created_at=now - timedelta(hours=i + 1)) for i in range(5)] + [
        make_run(gpu_name=ADA, gpu_count=2, model="B7", created_at=now - timedelta(days=3))
    ]
    for run in runs:
        client.submit_run(run)

    # Pages of two: every run once, newest first.
    ids = [s.run.run_id for s in client.iter_runs(page_size=2)]
    assert ids == [r.run_id for r in runs]

    frame = client.list_runs(gpu="tesla")
    assert list(frame.columns) == frames.FLAT_RUN_COLUMNS
    assert len(frame) == 5 and set(frame["gpu_config"]) == {"1x Tesla T4"}
    assert client.list_runs(gpu="ada", gpu_count=2)["model"].tolist() == ["B7"]
    assert len(client.list_runs(limit=3)) == 3
    assert len(client.list_runs(since=(now - timedelta(days=1)).isoformat())) == 5
    assert client.list_runs(until=now - timedelta(days=1))["run_id"].tolist() == [runs[-1].run_id]

    row = client.list_runs(model="B7").iloc[0]
    ada = runs[-1]
    assert row["epoch2_s"] == pytest.approx(ada.result.epoch2_seconds)
    assert row["peak_memory_gib"] == pytest.approx(ada.result.memory[0].allocator_peak_bytes / GIB)
    assert row["submitter"] == "lab" and row["status"] == "ok"
    assert isinstance(row["received_at"], pd.Timestamp)


def test_bad_since_names_the_field(client: Client) -> None:
    with pytest.raises(Exception, match="since: 'yesterday' is not an ISO 8601"):
        client.list_runs(since="yesterday")


def _submit_group(client: Client, make_run: Any, gpu: str, count: int, **figures: list) -> None:
    keys = list(figures)
    for values in zip(*figures.values(), strict=True):
        client.submit_run(
            make_run(gpu_name=gpu, gpu_count=count, **dict(zip(keys, values, strict=True)))
        )


def test_compare_figures_match_the_submitted_runs(client: Client, make_run: Any) -> None:
    t4 = {
        "epoch2_seconds": [17.0, 17.6, 16.4],
        "train_images_per_second": [120.0, 118.0, 125.0],
        "energy_per_epoch_joules": [1160.0, 1210.0, 1120.0],
        "peak_memory_bytes": [12 * GIB, 13 * GIB, 12 * GIB + GIB // 2],
    }
    ada = {
        "epoch2_seconds": [2.4, 2.3, 2.6],
        "train_images_per_second": [870.0, 905.0, 800.0],
        "energy_per_epoch_joules": [1250.0, 1200.0, 1360.0],
        "peak_memory_bytes": [40 * GIB, 41 * GIB, 40 * GIB],
    }
    _submit_group(client, make_run, T4, 1, **t4)
    _submit_group(client, make_run, ADA, 2, **ada)

    frame = client.compare("B0", baseline=T4)
    assert frame["gpu_config"].tolist() == ["2x " + ADA, "1x " + T4]  # fastest first
    first, base = frame.iloc[0], frame.iloc[1]
    assert bool(base["is_baseline"]) and not bool(first["is_baseline"])
    assert frame.attrs["baseline"] == "1x Tesla T4"
    assert frame.attrs["model"] == "B0" and frame.attrs["precision"] == "float32"

    median = statistics.median
    assert base["epoch2_median_s"] == pytest.approx(17.0)
    assert (base["epoch2_min_s"], base["epoch2_max_s"]) == pytest.approx((16.4, 17.6))
    assert first["epoch2_median_s"] == pytest.approx(2.4)
    assert first["speedup"] == pytest.approx(17.0 / 2.4)
    assert base["speedup"] == pytest.approx(1.0)
    assert first["images_per_s_median"] == pytest.approx(870.0)
    assert first["energy_per_epoch_j"] == pytest.approx(1250.0)
    assert first["images_per_joule"] == pytest.approx(
        median(TRAIN_IMAGES / e for e in ada["energy_per_epoch_joules"])
    )
    assert base["peak_memory_median_gib"] == pytest.approx(12.5)
    card = CARDS[T4].memory_total_bytes
    assert base["memory_total_gib"] == pytest.approx(card / GIB)
    assert base["peak_memory_share"] == pytest.approx(12.5 * GIB / card)
    assert first["timed_batch_per_gpu"] == CARDS[ADA].batch_per_gpu["B0"]
    assert first["timed_global_batch"] == 2 * CARDS[ADA].batch_per_gpu["B0"]
    assert (first["runs"], base["runs"]) == (3, 3)

    # Without a named baseline the slowest group is the reference; --gpu narrows it down.
    assert client.compare("B0").attrs["baseline"] == "1x Tesla T4"
    only = client.compare("B0", gpus=[ADA])
    assert only["gpu_config"].tolist() == ["2x " + ADA]
    assert only.iloc[0]["speedup"] == pytest.approx(1.0)


def test_compare_refuses_mixed_runs_unless_asked(client: Client, make_run: Any) -> None:
    client.submit_run(make_run(gpu_name=T4, precision="float32"))
    client.submit_run(make_run(gpu_name=T4, precision="mixed_float16", epoch2_seconds=9.0))
    with pytest.raises(RequestRefused, match="precision") as caught:
        client.compare("B0")
    assert caught.value.exit_code == ExitCode.FAILURE and not caught.value.retryable
    mixed = client.compare("B0", allow_mixed=True)
    assert mixed.attrs["precision"] == "mixed" and mixed.iloc[0]["runs"] == 2
    assert client.compare("B0", precision="mixed_float16").iloc[0]["epoch2_median_s"] == 9.0


def test_compare_pins_a_batch_rule(client: Client, make_run: Any) -> None:
    client.submit_run(make_run(gpu_name=T4, batch_per_gpu=128, config__batch_rule="steps",
                               result__largest_batch_per_gpu=200))
    client.submit_run(make_run(gpu_name=T4, batch_per_gpu=200, epoch2_seconds=15.0,
                               config__batch_rule="largest", result__largest_batch_per_gpu=200))
    with pytest.raises(RequestRefused, match="batch_rule .*--batch-rule"):
        client.compare("B0")
    reply = client.compare_response("B0", batch_rule="largest")
    assert reply.batch_rule == "largest"
    assert [(g.max_batch_per_gpu, g.largest_batch_per_gpu_max) for g in reply.groups] == [
        (200, 200)]
    steps = client.compare("B0", batch_rule="steps").iloc[0]
    assert (steps["timed_batch_per_gpu"], steps["largest_batch_per_gpu"]) == (128, 200)


def test_compare_unknown_baseline_is_not_found(client: Client, make_run: Any) -> None:
    client.submit_run(make_run(gpu_name=T4))
    with pytest.raises(NotFound, match="GTX 1070"):
        client.compare("B0", baseline="NVIDIA GeForce GTX 1070")


def test_leaderboard(client: Client, make_run: Any) -> None:
    for gpu, seconds in ((T4, 17.0), (T4, 18.0), (ADA, 3.9), ("NVIDIA H200", 5.0)):
        client.submit_run(make_run(gpu_name=gpu, epoch2_seconds=seconds))
    # The factory's runs: Keras's own code path, the batch given.
    board = client.leaderboard("B0", settings="keras", batch_rule="given")
    assert list(board.columns) == frames.LEADERBOARD_COLUMNS
    assert board["gpu_name"].tolist() == [ADA, "NVIDIA H200", T4]
    assert board["rank"].tolist() == [1, 2, 3]
    t4 = board.iloc[2]
    assert (t4["runs"], t4["best_epoch2_s"], t4["epoch2_median_s"]) == (2, 17.0, 17.5)
    assert len(client.leaderboard("B0", limit=1, settings="keras", batch_rule="given")) == 1
    assert client.leaderboard("B0").empty  # no run of the default run's settings


def test_delete_only_by_submitter_or_admin(collector: Any, make_run: Any) -> None:
    run = make_run()
    with (
        Client(collector.address, collector.make_token("alice")) as alice,
        Client(collector.address, collector.make_token("bob")) as bob,
    ):
        alice.submit_run(run)
        with pytest.raises(AccessDenied, match="deleting run") as caught:
            bob.delete_run(run.run_id)
        assert caught.value.exit_code == ExitCode.AUTH
        assert alice.delete_run(run.run_id) == run.run_id
        with pytest.raises(NotFound, match=f"run_id {run.run_id}: no such run") as caught:
            alice.get_run(run.run_id)
        assert caught.value.exit_code == ExitCode.NOT_FOUND


def test_export_parquet_and_csv(client: Client, make_run: Any, tmp_path: Any) -> None:
    runs = [make_run(gpu_name=T4, epoch2_seconds=17.0 + i / 10) for i in range(7)]
    for run in runs:
        client.submit_run(run)
    parquet, csv = tmp_path / "runs.parquet", tmp_path / "runs.csv"
    # Pages of three: the export must follow the page tokens to the end.
    assert client.export(parquet, page_size=3) == 7
    assert client.export(csv, format="csv") == 7
    for frame in (pd.read_parquet(parquet), pd.read_csv(csv)):
        assert list(frame.columns) == frames.FLAT_RUN_COLUMNS
        assert sorted(frame["epoch2_s"]) == pytest.approx([r.result.epoch2_seconds for r in runs])
        assert set(frame["run_id"]) == {r.run_id for r in runs}
    with pytest.raises(Exception, match="format: 'xlsx'"):
        client.export(tmp_path / "x.xlsx", format="xlsx")


def test_token_administration(collector: Any, make_run: Any) -> None:
    with Client(collector.address, collector.admin_token) as admin:
        created = admin.create_token("ci-runner")
        assert created.token.name == "ci-runner" and not created.token.admin and created.secret
        assert "ci-runner" in {t.name for t in admin.list_tokens()}
        with Client(collector.address, created.secret) as runner:
            runner.submit_run(make_run())
            with pytest.raises(AccessDenied, match="not an admin"):
                runner.list_tokens()
            assert admin.revoke_token("ci-runner").revoked
            with pytest.raises(AccessDenied, match="did not accept the token") as caught:
                runner.submit_run(make_run())
            assert not caught.value.retryable
        with pytest.raises(NotFound, match="token 'nobody': no such token"):
            admin.revoke_token("nobody")
        with pytest.raises(RequestRefused, match="creating token 'admin'"):
            admin.create_token("admin")


def test_address_and_token_from_the_environment(
    collector: Any, make_run: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GPUBENCH_COLLECTOR", collector.address)
    monkeypatch.setenv("GPUBENCH_TOKEN", collector.make_token("env"))
    with Client() as client:
        assert client.address == collector.address
        client.submit_run(make_run())
        assert client.list_runs()["submitter"].tolist() == ["env"]


def test_rate_limit_is_retryable(collector_factory: Any, make_run: Any) -> None:
    limited = collector_factory(rate_limit=1)
    with Client(limited.address, limited.make_token("burst")) as client:
        client.submit_run(make_run())
        with pytest.raises(RequestLimited, match="rate limit") as caught:
            for _ in range(5):
                client.submit_run(make_run())
    assert caught.value.retryable and caught.value.status_code == "RESOURCE_EXHAUSTED"


def test_outliers_left_out_unless_asked(client: Client, make_run: Any) -> None:
    seconds = [17.0, 17.2, 16.8, 17.1, 60.0]  # the last: a throttled or shared GPU
    for value in seconds:
        client.submit_run(make_run(gpu_name=T4, epoch2_seconds=value))
    flagged = client.list_runs()
    assert flagged.loc[flagged["epoch2_s"] == 60.0, "outlier"].tolist() == [True]
    usual = client.compare("B0").iloc[0]
    assert (usual["runs"], usual["outliers_excluded"]) == (4, 1)
    assert usual["epoch2_median_s"] == pytest.approx(statistics.median(seconds[:4]))
    assert usual["epoch2_max_s"] == pytest.approx(17.2)
    everything = client.compare("B0", include_outliers=True).iloc[0]
    assert (everything["runs"], everything["outliers_excluded"]) == (5, 0)
    assert everything["epoch2_max_s"] == pytest.approx(60.0)
    shown = io.StringIO()
    Console(file=shown, width=200).print(tables.compare_table(client.compare("B0")))
    assert "4/1 (+1 outlier)" in shown.getvalue()  # 4 runs of 1 submitter
