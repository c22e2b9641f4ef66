"""Fabricated runs against a live collector: a record that contradicts itself is refused
with its field named; one that claims more than the card can do is stored, flagged and
kept out of Compare and the leaderboard; look-alike GPU names are folded or refused;
Compare keeps apart every difference that changes what was timed; the leaderboard takes
the newest benchmark version in numeric order; published runs stand apart."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import grpc
import pytest
from factories import make_run

from gpubench import record
from gpubench.v1 import collector_pb2 as pb
from gpubench.v1 import run_pb2

T4, H200 = "Tesla T4", "NVIDIA H200"
# The factory's runs: Keras's own code path, the batch given (--batch N).
KERAS_GIVEN = {"settings": "keras", "batch_rule": "given"}


class Live:
    """The collector and the calls these tests make."""

    def __init__(self, collector: Any) -> None:
        self.collector = collector
        self.stub = collector.collector_stub()
        self.md = collector.metadata()

    def submit(self, run: run_pb2.Run, token: str | None = None) -> None:
        self.stub.SubmitRun(pb.SubmitRunRequest(run=run),
                            metadata=self.collector.metadata(token))

    def refusal(self, run: run_pb2.Run, token: str | None = None) -> str:
        with pytest.raises(grpc.RpcError) as caught:
            self.submit(run, token)
        assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT, caught.value.details()
        return caught.value.details()

    def stored(self, run: run_pb2.Run) -> pb.StoredRun:
        return self.stub.GetRun(pb.GetRunRequest(run_id=run.run_id), metadata=self.md)

    def compare(self, **fields: Any) -> pb.CompareResponse:
        return self.stub.Compare(pb.CompareRequest(**fields), metadata=self.md)

    def refused_compare(self, **fields: Any) -> str:
        with pytest.raises(grpc.RpcError) as caught:
            self.compare(**fields)
        assert caught.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        return caught.value.details()

    def leaderboard(self, **fields: Any) -> pb.LeaderboardResponse:
        return self.stub.Leaderboard(pb.LeaderboardRequest(**fields), metadata=self.md)


@pytest.fixture
def live(collector: Any) -> Live:
    return Live(collector)


def _measured(run: run_pb2.Run) -> run_pb2.Epoch:
    return next(e for e in run.result.epochs if e.number == run.result.measured_epoch)


def _set(**changes: Any) -> Callable[[run_pb2.Run], None]:
    def change(run: run_pb2.Run) -> None:
        for path, value in changes.items():
            target: Any = run
            *parts, last = path.split(".")
            for part in parts:
                target = target[int(part)] if part.isdigit() else getattr(target, part)
            setattr(target, last, value)
    return change


# Each fabrication, and the field its refusal must name. The T4 run's own figures: epoch
# 2 is 17 s (13.94 s of training), 1709 images, 68.5 W on a 70 W card.
INCONSISTENT = [
    ("epoch 2 of a nanosecond, its epoch list saying 17 s",
     _set(**{"result.epoch2_seconds": 1e-9}), "run.result.epoch2_seconds"),
    ("a hundred million images a second",
     _set(**{"result.train_images_per_second": 1e8}), "run.result.train_images_per_second"),
    ("steps that add up to hours", _set(**{"result.step_time_median_seconds": 1000.0}),
     "run.result.step_time_median_seconds"),
    ("a terajoule an epoch", _set(**{"result.epochs.1.energy_joules": 1e12,
                                     "result.energy_per_epoch_joules": 1e12}),
     "run.result.epochs[1].energy_joules"),
    ("an energy that is not the measured epoch's",
     _set(**{"result.energy_per_epoch_joules": 5.0}), "run.result.energy_per_epoch_joules"),
    ("ten kilowatts through a 70 W card",
     _set(**{"result.mean_power_watts": 10_000.0}), "run.result.mean_power_watts"),
    ("more training than the epoch lasted", _set(**{"result.epochs.1.train_seconds": 40.0}),
     "run.result.epochs[1].train_seconds"),
    ("a start-up that is not epoch 1 minus epoch 2",
     _set(**{"result.startup_seconds": 500.0}), "run.result.startup_seconds"),
]


@pytest.mark.parametrize(("change", "field"), [(c, f) for _, c, f in INCONSISTENT],
                         ids=[name for name, _, _ in INCONSISTENT])
def test_an_inconsistent_record_is_refused_naming_its_field(live: Live, change, field) -> None:
    run = make_run(gpu_name=T4)
    live.submit(make_run(gpu_name=T4))  # the honest one is taken
    change(run)
    details = live.refusal(run)
    assert details.startswith(f"{field}: "), details
    with pytest.raises(grpc.RpcError) as caught:
        live.stored(run)
    assert caught.value.code() == grpc.StatusCode.NOT_FOUND


def test_a_slower_second_epoch_is_accepted(live: Live) -> None:
    # A throttling card: epoch 2 (17 s) slower than epoch 1 (15 s).
    run = make_run(gpu_name=T4)
    run.result.epochs[0].wall_seconds = 15.0
    run.result.epochs[0].train_seconds = 12.3
    run.result.epochs[0].validation_seconds = 2.7
    run.result.epochs[0].energy_joules = 68.5 * 15.0
    run.result.startup_seconds = -2.0
    live.submit(run)
    assert live.stored(run).run.result.startup_seconds == -2.0


def _changed(run: run_pb2.Run, **changes: Any) -> run_pb2.Run:
    _set(**changes)(run)
    return run


def _fast(gpu_name: str, seconds: float, **fields: Any) -> run_pb2.Run:
    """A self-consistent run claiming an epoch 2 of `seconds`."""
    return make_run(gpu_name=gpu_name, epoch2_seconds=seconds, **fields)


# Consistent records that claim more than the card can do, and the words of a reason.
IMPLAUSIBLE = [
    ("a T4 past its 8.1 TFLOP/s", lambda: _fast(T4, 0.05), ["can compute", "8 TFLOP/s"]),
    ("an H200 past its memory bandwidth",
     lambda: _fast(H200, 0.02), ["memory of 1x NVIDIA H200 can write", "4,800 GB/s"]),
    ("an H200 7x its fastest verified run", lambda: _fast(H200, 0.07),
     ["1.5x the fastest verified NVIDIA H200 run of float32", "3,425 img/s"]),
    ("a T4 with 80 GiB", lambda: _changed(make_run(gpu_name=T4), **{
        "gpus.0.memory_total_bytes": 80 << 30, "result.memory.0.memory_total_bytes": 80 << 30}),
     ["Tesla T4 has at most 16 GiB", "80.0 GiB"]),
    ("a T4 allowed 700 W", lambda: _changed(make_run(gpu_name=T4),
                                            **{"gpus.0.power_limit_watts": 700.0}),
     ["Tesla T4 allows at most 70 W"]),
    ("a GPU nobody knows, faster than any known",
     lambda: _fast("Quantum GPU 9000", 0.0005), ["as fast as any known"]),
    ("a GPU nobody knows, at an ordinary speed",
     lambda: _fast("Quantum GPU 9000", 6.0), ["unrecognised GPU 'Quantum GPU 9000'"]),
]


@pytest.mark.parametrize(("make", "words"), [(m, w) for _, m, w in IMPLAUSIBLE],
                         ids=[name for name, _, _ in IMPLAUSIBLE])
def test_an_implausible_run_is_stored_flagged_and_left_out(live: Live, make, words) -> None:
    honest = [make_run(gpu_name=T4, epoch2_seconds=s) for s in (17.0, 17.4)]
    honest.append(make_run(gpu_name=H200, epoch2_seconds=5.0))
    for run in honest:
        live.submit(run)
    fake = make()
    live.submit(fake)
    stored = live.stored(fake)
    assert stored.flagged and not stored.outlier
    reasons = " | ".join(stored.flag_reasons)
    assert all(w in reasons for w in words), reasons
    # A card not yet catalogued, flagged for nothing but its name, is shown apart.
    name_only = all(r.startswith("unrecognised GPU") for r in stored.flag_reasons)
    # Not in Compare, its outlier groups or the leaderboard...
    compared = live.compare(model="B0")
    assert sum(g.runs for g in compared.groups) == 3
    assert all(g.flagged_included == 0 for g in compared.groups)
    assert sum(g.runs for g in compared.uncatalogued) == int(name_only)
    board = live.leaderboard(model="B0", **KERAS_GIVEN)
    assert sum(e.runs for e in board.entries) == 3
    assert sum(e.runs for e in board.uncatalogued) == int(name_only)
    # ...unless asked for, and then said.
    asked = live.compare(model="B0", include_flagged=True)
    assert sum(g.runs for g in [*asked.groups, *asked.uncatalogued]) == 4
    assert name_only or any("flagged as implausible included" in w for w in asked.warnings)
    board = live.leaderboard(model="B0", include_flagged=True, **KERAS_GIVEN)
    assert sum(e.runs for e in [*board.entries, *board.uncatalogued]) == 4
    listed = live.stub.ListRuns(pb.ListRunsRequest(), metadata=live.md).runs
    assert [r.flagged for r in listed].count(True) == 1


def test_a_fabricated_leader_does_not_lead(live: Live) -> None:
    for seconds in (5.0, 5.1):
        live.submit(make_run(gpu_name=H200, epoch2_seconds=seconds))
    live.submit(_fast(T4, 0.001))  # "a T4 3,000x faster than an H200"
    board = live.leaderboard(model="B0", **KERAS_GIVEN)
    assert [e.gpu_name for e in board.entries] == [H200]


def test_look_alike_gpu_names_are_folded_or_refused(live: Live) -> None:
    for name in (T4, "Tesla T4 ", "  Tesla  T4", "Ｔｅｓｌａ　Ｔ４"):
        live.submit(_changed(make_run(gpu_name=T4, epoch2_seconds=17.0), **{"gpus.0.name": name}))
    [group] = live.compare(model="B0").groups
    assert (group.gpu_name, group.runs) == (T4, 4)
    assert [g.gpu_name for g in live.compare(model="B0", gpu_names=["tesla t4 "]).groups] == [T4]
    for name, words in (
        ("Tesla\u202eT4", "control or bidirectional character (U+202E RIGHT-TO-LEFT OVERRIDE)"),
        ("Tesla T4\u200b", "U+200B ZERO WIDTH SPACE"),
        ("Tesla\tT4", "U+0009"),
        ("Т\u0435sla T4", "must be ASCII, as NVML writes GPU names (U+0422 CYRILLIC CAPITAL"),
    ):
        details = live.refusal(_changed(make_run(gpu_name=T4), **{"gpus.0.name": name}))
        assert details.startswith("run.gpus[0].name: ") and words in details, details
    details = live.refusal(make_run(label="lab \u202egpu"))
    assert details.startswith("run.label: contains a control or bidirectional character")


# Each dimension the comparison key gained, a run unlike the others in it, and the words
# of the refusal (the field and the `gpubench compare` flag that pins it).
UNLIKE = [
    ("pipeline", dict(config__pipeline_mode="streaming"),
     "pipeline (seed, streaming; pin one with --pipeline)", {"pipeline": "seed"}),
    ("weights", dict(config__weights="none"),
     "weights (imagenet, none; pin one with --weights)", {"weights": "imagenet"}),
    ("data", dict(config__dataset_name=record.SYNTHETIC_DATA),
     "data (sha256:a1a1a1a1a1a1a1a1, synthetic-rps; pin one with --data)",
     {"data": "sha256:" + "a1" * 8}),
    ("epochs", dict(config__epochs=5), "epochs (2, 5; pin one with --epochs)", {"epochs": 2}),
]


@pytest.mark.parametrize(("fields", "words", "pin"), [(f, w, p) for _, f, w, p in UNLIKE],
                         ids=[name for name, _, _, _ in UNLIKE])
def test_compare_refuses_each_newly_keyed_difference(live: Live, fields, words, pin) -> None:
    alike = [make_run(gpu_name=T4, epoch2_seconds=s) for s in (17.0, 17.2)]
    unlike = make_run(gpu_name=H200, epoch2_seconds=5.0, **fields)
    for run in [*alike, unlike]:
        live.submit(run)
    details = live.refused_compare(model="B0")
    assert f"the B0 runs differ in {words}" in details, details
    pinned = live.compare(model="B0", **pin)
    assert [(g.gpu_name, g.runs) for g in pinned.groups] == [(T4, 2)]
    # Nor is the unlike run an outlier of the others' group.
    assert not live.stored(unlike).outlier
    mixed = live.compare(model="B0", allow_mixed=True)
    assert len(mixed.groups) == 2


def test_a_memory_limit_is_a_gpu_configuration_of_its_own(live: Live) -> None:
    for seconds in (5.0, 5.1):
        live.submit(make_run(gpu_name=H200, epoch2_seconds=seconds))
    small = make_run(gpu_name=H200, epoch2_seconds=6.0, batch_per_gpu=64,
                     config__memory_limit_bytes=16 << 30)
    live.submit(small)
    reply = live.compare(model="B0", baseline_gpu=H200)
    assert [(g.gpu_name, g.memory_limit_bytes, g.runs) for g in reply.groups] == [
        (H200, 0, 2), (H200, 16 << 30, 1)]
    assert reply.baseline == "1x NVIDIA H200"  # the whole card, not the limited one
    assert reply.groups[1].speedup == pytest.approx(5.05 / 6.0)
    # The leaderboard ranks whole cards only.
    assert sum(e.runs for e in live.leaderboard(model="B0", **KERAS_GIVEN).entries) == 2


def test_the_leaderboard_takes_version_10_over_9(live: Live) -> None:
    live.submit(make_run(gpu_name=H200, epoch2_seconds=5.0, benchmark_version="9"))
    live.submit(make_run(gpu_name=T4, epoch2_seconds=17.0, benchmark_version="10"))
    board = live.leaderboard(model="B0", **KERAS_GIVEN)
    assert board.benchmark_version == "10"
    assert [e.gpu_name for e in board.entries] == [T4]
    older = live.leaderboard(model="B0", benchmark_version="9", **KERAS_GIVEN)
    assert [e.gpu_name for e in older.entries] == [H200]


def _published_t4() -> run_pb2.Run:
    run = make_run(gpu_name=T4, epoch2_seconds=17.0, label="the article's Tesla T4",
                   config__dataset_name="rock-paper-scissors", config__dataset_fingerprint="")
    run.published = True
    run.source = "the article \"EfficientNet B0/B3/B7 on rock-paper-scissors\""
    return run


def test_published_runs_come_from_operators_and_stand_apart(live: Live) -> None:
    lab = live.collector.make_token("lab")
    details = live.refusal(_published_t4(), token=lab)
    assert details.startswith("run.published: published runs are loaded by the collector's "
                              "operator"), details
    mine = [make_run(gpu_name=H200, epoch2_seconds=s, backend="torch") for s in (5.0, 5.2)]
    for run in mine:
        live.submit(run, token=lab)
    article = _published_t4()
    live.submit(article)  # the admin token: an operator
    reply = live.compare(model="B0")  # not refused as mixed: the article's run stands apart
    assert [(g.gpu_name, g.runs) for g in reply.groups] == [(H200, 2)]
    [published] = reply.published
    assert (published.gpu_name, published.runs, published.source) == (T4, 1, article.source)
    assert published.epoch2_median_seconds == 17.0
    assert list(published.differences) == ["backend tensorflow", "data rock-paper-scissors"]
    assert not live.leaderboard(model="B0", backend="tensorflow", **KERAS_GIVEN).entries
    stored = live.stored(article)
    assert stored.run.published and not stored.flagged and not stored.outlier
