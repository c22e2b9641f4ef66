"""Fabricated runs from a stranger's token against a live collector, each made from the
project's real H200 record scaled consistently (tests/fabrication.py): every one is
flagged or refused, none leads the default leaderboard or enters a comparison, and the
real run stays unflagged."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import fabrication
import grpc
import pandas as pd
import pytest
from click.testing import CliRunner

from gpubench import record
from gpubench.cli import cli
from gpubench.collector import ceilings
from gpubench.v1 import collector_pb2 as pb
from gpubench.v1 import run_pb2

H200 = "NVIDIA H200"
REFERENCE_RUNS = Path(__file__).resolve().parents[2] / "docs" / "results" / "runs"


class Submitters:
    """The collector, its operator (the admin token) and one ordinary user's token."""

    def __init__(self, collector: Any) -> None:
        self.collector = collector
        self.stub = collector.collector_stub()
        self.md = collector.metadata()
        _, self.stranger = collector.tokens.create("stranger", admin=False)

    def submit(self, run: run_pb2.Run, token: str | None = None) -> None:
        self.stub.SubmitRun(pb.SubmitRunRequest(run=run),
                            metadata=self.collector.metadata(token))

    def stored(self, run: run_pb2.Run) -> pb.StoredRun:
        return self.stub.GetRun(pb.GetRunRequest(run_id=run.run_id), metadata=self.md)

    def leaderboard(self, **fields: Any) -> pb.LeaderboardResponse:
        return self.stub.Leaderboard(pb.LeaderboardRequest(model="B0", **fields),
                                     metadata=self.md)

    def compare(self, **fields: Any) -> pb.CompareResponse:
        return self.stub.Compare(pb.CompareRequest(model="B0", **fields), metadata=self.md)


@pytest.fixture
def live(collector: Any) -> Submitters:
    return Submitters(collector)


def test_every_fabricated_case_is_flagged_and_leads_nothing(live: Submitters) -> None:
    real = fabrication.real_run()
    live.submit(real)
    assert not live.stored(real).flagged
    cases = fabrication.cases()
    for case in cases:
        live.submit(case.run, live.stranger)
    for case in cases:
        stored = live.stored(case.run)
        assert stored.flagged and stored.flag_reasons, case.name
    assert not live.stored(real).gpu_unrecognised
    # Listed apart: the runs list says which were flagged for their GPU's name.
    listed = live.stub.ListRuns(pb.ListRunsRequest(page_size=100), metadata=live.md).runs
    apart = {r.run.gpus[0].name for r in listed if r.gpu_unrecognised}
    assert apart == {"NVIDIA H300", "Quantum Accelerator Q1", "NVIDIA-H200", "NVIDIA H2OO",
                     "NVIDlA H200", "nvidia h200", "NVIDIA H200 Ultra"}
    board = live.leaderboard()
    assert [(e.gpu_name, e.runs) for e in board.entries] == [(H200, 1)]
    assert [(g.gpu_name, g.runs) for g in live.compare().groups] == [(H200, 1)]
    # A name no card has and none imitates exactly may be a card not yet catalogued:
    # within what such a card may do, it is shown apart, never ranked with the H200.
    assert [(e.gpu_name, e.rank) for e in board.uncatalogued] == [("NVIDIA H200 Ultra", 0)]
    assert [g.gpu_name for g in live.compare().uncatalogued] == ["NVIDIA H200 Ultra"]
    # Asked for, they are there, and said to be flagged.
    asked = live.compare(include_flagged=True, allow_mixed=True)
    assert sum(g.flagged_included for g in [*asked.groups, *asked.uncatalogued]) == \
        len(cases) - 1  # all but the H200 Ultra's, flagged only for its name


@pytest.mark.parametrize(("name", "card"), [
    ("NVIDIA-H200", "H200"), ("NVIDIA H2OO", "H200"), ("NVIDlA H200", "H200"),
    ("nvidia h200", "H200"), ("NVIDIA H200X", "H200"), ("Tesla T4i", "Tesla T4"),
    ("NVIDIA H300", "H100"), ("NVIDIA GeForce RTX 4O9O", "GeForce RTX 4090"),
])
def test_a_look_alike_is_flagged_naming_the_card_it_imitates(live: Submitters, name: str,
                                                            card: str) -> None:
    run = fabrication.scaled(1.0, gpu_name=name)
    live.submit(run, live.stranger)
    stored = live.stored(run)
    assert stored.flagged and stored.gpu_unrecognised
    assert f"unrecognised GPU {name!r}: looks like the catalogued {card}" in \
        stored.flag_reasons[0]


@pytest.mark.parametrize("name", ["NVIDIA Rubin R100", "NVIDIA H200 Ultra",
                                  "Tesla T4 PCIe"])
def test_a_name_like_no_card_s_is_not_yet_in_the_catalogue(live: Submitters,
                                                          name: str) -> None:
    # Whole skeletons are compared: a catalogued name inside another is no look-alike.
    run = fabrication.scaled(1.0, gpu_name=name)
    live.submit(run, live.stranger)
    [reason] = live.stored(run).flag_reasons
    assert reason.startswith(f"unrecognised GPU {name!r}: not yet in the catalogue")


@pytest.mark.parametrize(("name", "card"), [
    ("NVIDIA A100-SXM-80GB", "A100 SXM 80GB"), ("NVIDIA A100-SXM-64GB", "A100 SXM 64GB"),
    ("NVIDIA A100-SXM4-80GB MIG 1g.10gb", "A100 SXM4 80GB"),
    ("NVIDIA H100 80GB HBM3 MIG 3g.40gb", "H100"),
    ("NVIDIA A100-PCIE-40GB MIG 1c.2g.10gb", "A100 PCIe 40GB"),
])
def test_real_names_and_mig_devices_are_their_cards(live: Submitters, name: str,
                                                    card: str) -> None:
    assert ceilings.specs().spec_of(name).name == card
    run = fabrication.scaled(0.3, gpu_name=name, memory_bytes=10 << 30)
    live.submit(run, live.stranger)
    stored = live.stored(run)
    assert not stored.gpu_unrecognised, stored.flag_reasons
    assert not [r for r in stored.flag_reasons if r.startswith(ceilings.UNRECOGNISED)]


def test_a_float32_run_is_held_to_the_float32_runs(live: Submitters) -> None:
    # 1.3x the real float32 default run is under 4x the fastest bfloat16 run (3,941 img/s),
    # the ceiling once; it is over 1.25x the fastest verified run of its own configuration.
    run = fabrication.scaled(1.3)
    live.submit(run, live.stranger)
    [reason] = live.stored(run).flag_reasons
    assert "more than 1.25x the fastest verified NVIDIA H200 run of kernels+cuda-graphs, " \
           "float32, batch rule steps (2,760 img/s" in reason, reason


def test_energy_of_nothing_is_flagged(live: Submitters) -> None:
    run = fabrication.scaled(1.0, energy_joules=1e-300, power_watts=0.0)
    live.submit(run, live.stranger)
    [reason] = live.stored(run).flag_reasons
    assert "less than 0.05x the power limit of 1x H200 (700 W)" in reason
    assert "1.71e+303 images per joule, at most 70 on these cards" in reason


@pytest.mark.parametrize("name", ["   ", "\u3000", " \u00a0 "])
def test_a_blank_gpu_name_is_refused_naming_the_field(live: Submitters, name: str) -> None:
    with pytest.raises(grpc.RpcError) as caught:
        live.submit(fabrication.scaled(1.0, gpu_name=name), live.stranger)
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert caught.value.details().startswith("run.gpus[0].name: blank: white space only")


def test_cpu_is_only_a_run_with_no_gpu() -> None:
    assert record.gpu_config_name("", 0) == "CPU"
    assert record.gpu_config_name(H200, 1) == "1x NVIDIA H200"


def test_made_up_runs_at_3x_expected_on_every_kind_of_card_never_lead(
        live: Submitters) -> None:
    real = fabrication.real_run()
    live.submit(real)
    made_up = {name: fabrication.on_card(name, 3.0) for name in fabrication.SPREAD}
    for run in made_up.values():
        live.submit(run, live.stranger)
    for name, run in made_up.items():
        stored = live.stored(run)
        assert stored.flagged and not stored.gpu_unrecognised, name
        # The reason says what was expected, the ceiling and the verified run behind it.
        [why] = [r for r in stored.flag_reasons if "expected of it" in r or
                 "fastest verified" in r]
        assert any(f"{v.images_per_second:,} img/s a GPU, {v.record})" in why
                   for v in ceilings.specs().verified), why
    board = live.leaderboard()
    assert [(e.rank, e.gpu_name) for e in board.entries] == [(1, H200)]
    assert [g.gpu_name for g in live.compare().groups] == [H200]
    assert [(e.gpu_name, e.runs) for e in live.leaderboard(include_flagged=True).entries
            if e.gpu_name != H200] == [(name, 1) for name in _by_speed(made_up)]


def _by_speed(runs: dict[str, run_pb2.Run]) -> list[str]:
    """The cards of the runs, the fastest (the shortest epoch 2) first."""
    return sorted(runs, key=lambda name: runs[name].result.epoch2_seconds)


def test_the_cli_and_the_downloads_rank_no_made_up_run(live: Submitters) -> None:
    live.submit(fabrication.real_run())
    for name in fabrication.SPREAD:
        live.submit(fabrication.on_card(name, 3.0), live.stranger)
    options = ["--collector", live.collector.address, "--token",
               live.collector.admin_token, "--width", "200"]
    runner = CliRunner()
    shown = runner.invoke(cli, [*options, "leaderboard", "--model", "B0"],
                          catch_exceptions=False)
    assert shown.exit_code == 0, shown.output
    assert H200 in shown.stdout
    assert not [name for name in fabrication.SPREAD if name in shown.stdout]
    csv = pd.read_csv(io.StringIO(runner.invoke(
        cli, [*options, "leaderboard", "--model", "B0", "--format", "csv"]).stdout))
    assert csv["gpu_name"].tolist() == [H200]
    csv = pd.read_csv(io.StringIO(runner.invoke(
        cli, [*options, "compare", "--model", "B0", "--format", "csv"]).stdout))
    assert csv["gpu_name"].tolist() == [H200]


def test_a_plausible_run_on_a_fast_new_card_is_ranked(live: Submitters) -> None:
    # A B200 has no verified run: 1.2x what the H200's default run scales to is within
    # what real cards reach of their expectation, and it leads.
    live.submit(fabrication.real_run())
    b200 = fabrication.on_card("NVIDIA B200", 1.2)
    live.submit(b200, live.stranger)
    stored = live.stored(b200)
    assert not stored.flagged, stored.flag_reasons
    assert [(e.rank, e.gpu_name) for e in live.leaderboard().entries] == [
        (1, "NVIDIA B200"), (2, H200)]


def test_the_reference_records_are_ranked_unflagged(live: Submitters) -> None:
    measured = [path for path in sorted(REFERENCE_RUNS.glob("*.json"))
                if not json.loads(path.read_text()).get("published")]
    assert measured
    runs = []
    for path in measured:
        data = json.loads(path.read_text())
        run = record.from_dict(data[0] if isinstance(data, list) else data)
        live.submit(run)
        runs.append(run)
    for path, run in zip(measured, runs, strict=True):
        stored = live.stored(run)
        assert not stored.flagged, (path.name, list(stored.flag_reasons))
    ranked = {(e.gpu_name, e.rank) for model in ("B0", "B3", "B7")
              for e in live.stub.Leaderboard(pb.LeaderboardRequest(model=model),
                                             metadata=live.md).entries}
    assert {live.stored(run).run.gpus[0].name for run in runs} <= {g for g, _ in ranked}
