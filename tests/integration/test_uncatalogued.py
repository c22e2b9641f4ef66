"""Runs on a card not yet in the GPU catalogue, against a live collector: shown apart in
Compare, the leaderboard, `gpubench compare` and `gpubench leaderboard` and their
downloads, marked "not yet in the catalogue" with how to have the card added; never the
baseline nor ranked with the catalogued cards, even when faster; still held to their own
reported memory and power limit, and to what any card may do."""

from __future__ import annotations

import io
from typing import Any

import fabrication
import grpc
import pandas as pd
import pytest
from click.testing import CliRunner
from factories import make_run

from gpubench import figures
from gpubench.cli import cli
from gpubench.client import Client
from gpubench.collector import ceilings
from gpubench.v1 import collector_pb2 as pb

T4 = "Tesla T4"
NEW = "NVIDIA Rubin R100"  # a card the catalogue does not list (yet), like none it does
KERAS_GIVEN = {"settings": "keras", "batch_rule": "given"}
T4_SECONDS = (17.0, 17.4, 16.8)
NEW_SECONDS = (3.0, 3.2)


@pytest.fixture
def with_new_card(collector: Any) -> Any:
    """Three B0 runs on a T4, two faster ones on the new card and one on it claiming
    more than any card may do."""
    assert ceilings.specs().spec_of(NEW) is None
    stub, md = collector.collector_stub(), collector.metadata()
    for seconds in T4_SECONDS:
        stub.SubmitRun(pb.SubmitRunRequest(run=make_run(gpu_name=T4, epoch2_seconds=seconds)),
                       metadata=md)
    for seconds in NEW_SECONDS:
        stub.SubmitRun(pb.SubmitRunRequest(run=make_run(gpu_name=NEW, epoch2_seconds=seconds)),
                       metadata=md)
    # 1709 images in 0.82 x 0.02 s: 104,207 img/s, over 4x the fastest verified B0 run.
    absurd = make_run(gpu_name=NEW, epoch2_seconds=0.02)
    stub.SubmitRun(pb.SubmitRunRequest(run=absurd), metadata=md)
    collector.absurd = absurd
    return collector


def test_the_new_cards_runs_are_flagged_for_their_name_alone(with_new_card: Any) -> None:
    stub, md = with_new_card.collector_stub(), with_new_card.metadata()
    listed = stub.ListRuns(pb.ListRunsRequest(page_size=100), metadata=md).runs
    new = [r for r in listed if r.run.gpus[0].name == NEW]
    assert len(new) == 3 and all(r.flagged and r.gpu_unrecognised for r in new)
    reasons = {len(r.flag_reasons) for r in new}
    assert reasons == {1, 2}  # the absurd one: its name, and more than any card may do
    absurd = stub.GetRun(pb.GetRunRequest(run_id=with_new_card.absurd.run_id), metadata=md)
    assert "the fastest verified run of any card" in absurd.flag_reasons[1]


def test_the_leaderboard_lists_the_new_card_apart(with_new_card: Any) -> None:
    board = with_new_card.collector_stub().Leaderboard(
        pb.LeaderboardRequest(model="B0", **KERAS_GIVEN), metadata=with_new_card.metadata())
    assert [(e.rank, e.gpu_name, e.runs) for e in board.entries] == [(1, T4, 3)]
    # Faster than the T4, yet after it and unranked; the absurd run is not counted.
    assert [(e.rank, e.gpu_name, e.runs) for e in board.uncatalogued] == [(0, NEW, 2)]
    assert board.uncatalogued[0].epoch2_median_seconds == pytest.approx(3.1)
    flagged = with_new_card.collector_stub().Leaderboard(
        pb.LeaderboardRequest(model="B0", include_flagged=True, **KERAS_GIVEN),
        metadata=with_new_card.metadata())
    assert [e.gpu_name for e in flagged.entries] == [T4]
    assert [(e.gpu_name, e.runs) for e in flagged.uncatalogued] == [(NEW, 3)]


def test_compare_shows_the_new_card_apart_against_the_baseline(with_new_card: Any) -> None:
    stub, md = with_new_card.collector_stub(), with_new_card.metadata()
    reply = stub.Compare(pb.CompareRequest(model="B0"), metadata=md)
    assert reply.baseline == f"1x {T4}"
    assert [g.gpu_name for g in reply.groups] == [T4]
    [new] = reply.uncatalogued
    assert (new.gpu_name, new.runs, new.is_baseline) == (NEW, 2, False)
    assert new.speedup == pytest.approx(17.0 / 3.1)
    assert new.flagged_included == 0
    # It is never a baseline.
    with pytest.raises(grpc.RpcError) as refused:
        stub.Compare(pb.CompareRequest(model="B0", baseline_gpu=NEW), metadata=md)
    assert refused.value.code() == grpc.StatusCode.NOT_FOUND
    # Asked for, the absurd run is counted in, and said to be flagged.
    asked = stub.Compare(pb.CompareRequest(model="B0", include_flagged=True), metadata=md)
    assert [g.gpu_name for g in asked.groups] == [T4]
    assert [(g.runs, g.flagged_included) for g in asked.uncatalogued] == [(3, 1)]


def test_the_new_card_is_held_to_its_own_memory_and_power(collector: Any) -> None:
    stub, md = collector.collector_stub(), collector.metadata()
    run = make_run(gpu_name=NEW)
    run.result.memory[0].allocator_peak_bytes = run.gpus[0].memory_total_bytes + 1
    with pytest.raises(grpc.RpcError) as refused:
        stub.SubmitRun(pb.SubmitRunRequest(run=run), metadata=md)
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "memory" in refused.value.details()
    # The real H200 run renamed, at twice its own power limit over the measured epoch.
    base = fabrication.real_run()
    hot = fabrication.scaled(1.0, gpu_name=NEW, power_watts=2 * base.gpus[0].power_limit_watts)
    with pytest.raises(grpc.RpcError) as refused:
        stub.SubmitRun(pb.SubmitRunRequest(run=hot), metadata=md)
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "power limit" in refused.value.details()


@pytest.fixture
def invoke(with_new_card: Any) -> Any:
    """Run a gpubench command in-process against the collector."""
    runner = CliRunner()

    def run(*args: str) -> Any:
        options = ["--collector", with_new_card.address, "--token",
                   with_new_card.admin_token, "--width", "200"]
        return runner.invoke(cli, [*options, *args], catch_exceptions=False)

    return run


def test_gpubench_leaderboard_lists_it_after_the_ranked_table(invoke: Any) -> None:
    shown = invoke("leaderboard", "--model", "B0", "--settings", "keras",
                   "--batch-rule", "given")
    assert shown.exit_code == 0, shown.output
    text = shown.stdout
    assert text.index(T4) < text.index(figures.NOT_CATALOGUED) < text.index(NEW)
    assert "gpubench-agent inventory" in " ".join(text.split())
    csv = pd.read_csv(io.StringIO(invoke(
        "leaderboard", "--model", "B0", "--settings", "keras", "--batch-rule", "given",
        "--format", "csv").stdout))
    assert csv[["gpu_name", "in_catalogue", "rank"]].values.tolist() == [
        [T4, True, 1], [NEW, False, 0]]


def test_gpubench_compare_shows_it_in_a_section_of_its_own(invoke: Any) -> None:
    shown = invoke("compare", "--model", "B0")
    assert shown.exit_code == 0, shown.output
    text = shown.stdout
    assert text.index(T4) < text.index(figures.NOT_CATALOGUED) < text.index(NEW)
    assert "gpubench-agent inventory" in " ".join(text.split())
    csv = pd.read_csv(io.StringIO(invoke("compare", "--model", "B0", "--format", "csv").stdout))
    assert csv[["gpu_name", "in_catalogue"]].values.tolist() == [[T4, True], [NEW, False]]
    assert csv["speedup"].tolist() == pytest.approx([1.0, 17.0 / 3.1])


def test_the_client_carries_them_apart(with_new_card: Any) -> None:
    with Client(with_new_card.address, with_new_card.admin_token) as client:
        frame = client.compare("B0")
        board = client.leaderboard("B0", **KERAS_GIVEN)
    assert frame["gpu_name"].tolist() == [T4] and frame["in_catalogue"].all()
    [apart] = frame.attrs["uncatalogued"]
    assert apart["gpu_name"] == NEW and apart["in_catalogue"] is False
    assert board[["gpu_name", "in_catalogue"]].values.tolist() == [[T4, True], [NEW, False]]
