"""One submitter, one voice, against a live collector: a flood of runs from one token
neither moves an honest median nor makes the honest runs outliers; the leaderboard says
how many submitters stand behind a figure, marks one source, and marks and can keep
only the corroborated figures."""

from __future__ import annotations

from typing import Any

import fabrication
import pytest
from factories import make_run

from gpubench.v1 import collector_pb2 as pb
from gpubench.v1 import run_pb2

T4 = "Tesla T4"
# The factory's runs: Keras's own code path, the batch given (--batch N).
KERAS_GIVEN = {"settings": "keras", "batch_rule": "given"}
# Honest repeats of the real run: a few percent apart, as the project's own are.
HONEST_FACTORS = (0.98, 0.99, 1.0, 1.01, 1.02)


class Voices:
    """The collector and tokens of several submitters (the admin token is the operator)."""

    def __init__(self, collector: Any) -> None:
        self.collector = collector
        self.stub = collector.collector_stub()
        self.md = collector.metadata()
        self.tokens = {name: collector.tokens.create(name, admin=False)[1]
                       for name in ("lab-a", "lab-b", "stranger")}

    def submit(self, run: run_pb2.Run, who: str | None = None) -> None:
        token = self.tokens[who] if who else None
        self.stub.SubmitRun(pb.SubmitRunRequest(run=run), metadata=self.collector.metadata(token))

    def leaderboard(self, **fields: Any) -> pb.LeaderboardResponse:
        return self.stub.Leaderboard(pb.LeaderboardRequest(model="B0", **fields),
                                     metadata=self.md)

    def compare(self, **fields: Any) -> pb.CompareResponse:
        return self.stub.Compare(pb.CompareRequest(model="B0", **fields), metadata=self.md)

    def stored(self, run: run_pb2.Run) -> pb.StoredRun:
        return self.stub.GetRun(pb.GetRunRequest(run_id=run.run_id), metadata=self.md)


@pytest.fixture
def voices(collector: Any) -> Voices:
    return Voices(collector)


def _honest(voices: Voices, who: str | None = None) -> list[run_pb2.Run]:
    runs = [fabrication.scaled(f) for f in HONEST_FACTORS]
    for run in runs:
        voices.submit(run, who)
    return runs


def test_a_flood_of_fast_runs_from_one_token_moves_nothing(voices: Voices) -> None:
    honest = _honest(voices)
    [before] = voices.leaderboard().entries
    flood = fabrication.flood()
    for run in flood:
        voices.submit(run, "stranger")
    [after] = voices.leaderboard().entries
    moved = abs(after.epoch2_median_seconds - before.epoch2_median_seconds)
    assert moved <= 0.02 * before.epoch2_median_seconds
    assert not any(voices.stored(run).outlier for run in honest)
    assert all(voices.stored(run).flagged for run in flood)


def test_a_flood_under_the_ceiling_is_one_voice(voices: Voices) -> None:
    # Three submitters agree; a fourth sends more runs than all of them together, 1.08x
    # faster: under every ceiling and too close to be outliers. Counted run by run, its
    # runs would be the median.
    honest = _honest(voices) + _honest(voices, "lab-a") + _honest(voices, "lab-b")
    [before] = voices.leaderboard().entries
    flood = [fabrication.scaled(1.08) for _ in range(20)]
    for run in flood:
        voices.submit(run, "stranger")
    assert not any(voices.stored(run).flagged or voices.stored(run).outlier for run in flood)
    [after] = voices.leaderboard().entries
    assert (after.runs, after.submitters) == (35, 4)
    assert after.epoch2_median_seconds == pytest.approx(before.epoch2_median_seconds,
                                                        rel=0.02)
    assert not any(voices.stored(run).outlier for run in honest)
    # Compare's figures are taken the same way: its group holds every run, one voice each.
    [group] = voices.compare().groups
    assert (group.runs, group.submitters) == (35, 4)
    assert group.epoch2_median_seconds == pytest.approx(before.epoch2_median_seconds,
                                                        rel=0.02)
    assert group.train_images_per_second_median == pytest.approx(
        before.train_images_per_second_median, rel=0.02)
    [mixed] = voices.compare(allow_mixed=True, include_flagged=True).groups
    assert mixed.epoch2_median_seconds == pytest.approx(group.epoch2_median_seconds)


def test_a_faster_flood_is_outliers_beside_agreeing_submitters(voices: Voices) -> None:
    honest = _honest(voices) + _honest(voices, "lab-a") + _honest(voices, "lab-b")
    flood = [fabrication.scaled(1.2) for _ in range(20)]
    for run in flood:
        voices.submit(run, "stranger")
    # Scored about the submitters' median, the flood stands out, not the honest runs.
    assert all(voices.stored(run).outlier for run in flood)
    assert not any(voices.stored(run).outlier for run in honest)
    [entry] = voices.leaderboard().entries
    assert (entry.runs, entry.submitters) == (15, 3)


def test_the_leaderboard_says_who_stands_behind_each_figure(voices: Voices) -> None:
    for seconds in (17.0, 17.2):
        voices.submit(make_run(gpu_name=T4, epoch2_seconds=seconds), "lab-a")
    [t4] = voices.leaderboard(**KERAS_GIVEN).entries
    assert (t4.runs, t4.submitters, t4.corroborated) == (2, 1, False)
    assert voices.leaderboard(corroborated_only=True, **KERAS_GIVEN).entries == []
    # A second submitter that agrees corroborates it.
    voices.submit(make_run(gpu_name=T4, epoch2_seconds=17.5), "lab-b")
    [t4] = voices.leaderboard(corroborated_only=True, **KERAS_GIVEN).entries
    assert (t4.runs, t4.submitters, t4.corroborated, t4.corroborated_by) == \
        (3, 2, True, "2 submitters")


def test_two_submitters_that_disagree_corroborate_nothing(voices: Voices) -> None:
    voices.submit(make_run(gpu_name=T4, epoch2_seconds=17.0), "lab-a")
    voices.submit(make_run(gpu_name=T4, epoch2_seconds=24.0), "lab-b")
    [t4] = voices.leaderboard(**KERAS_GIVEN).entries
    assert (t4.submitters, t4.corroborated) == (2, False)


def test_the_operators_verified_run_corroborates_one_source(voices: Voices) -> None:
    # The real default run agrees with the catalogue's verified run of its configuration.
    voices.submit(fabrication.real_run(), "lab-a")
    [h200] = voices.leaderboard().entries
    assert (h200.submitters, h200.corroborated) == (1, True)
    assert h200.corroborated_by == \
        "verified run docs/results/h200-default-run/call5-default-b0.json"
