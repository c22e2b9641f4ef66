"""Compare, Leaderboard and outlier flags over gRPC, against hand-computed figures."""

from __future__ import annotations

import statistics

import grpc
import pytest
from factories import CARDS, make_run

from gpubench.v1 import collector_pb2 as pb

T4, H200, ADA = "Tesla T4", "NVIDIA H200", "NVIDIA RTX 6000 Ada Generation"
T4_MEMORY = CARDS[T4].memory_total_bytes  # 15360 MiB


@pytest.fixture
def populated(collector):
    """B0 runs: 4 T4 runs, 3 H200 runs, 5 runs on 2x RTX 6000 Ada (one an outlier), and
    runs that must not count: an out-of-memory T4 run, a B3 run, a torch T4 run."""
    stub = collector.collector_stub()
    md = collector.metadata()
    runs: dict[str, list] = {"t4": [], "h200": [], "ada": []}

    def put(key, run):
        stub.SubmitRun(pb.SubmitRunRequest(run=run), metadata=md)
        if key:
            runs[key].append(run)

    for seconds, ips, energy, peak, batch in (
        (16.0, 100.0, 1000.0, 13.0e9, 128),
        (17.0, 110.0, 1100.0, 13.2e9, 128),
        (18.0, 120.0, 1200.0, 12.8e9, 120),
        (19.0, 130.0, 1300.0, 13.1e9, 128),
    ):
        put("t4", make_run(gpu_name=T4, epoch2_seconds=seconds, train_images_per_second=ips,
                           energy_per_epoch_joules=energy, peak_memory_bytes=int(peak),
                           batch_per_gpu=batch))
    for seconds, batch in ((5.0, 128), (5.2, 256), (4.8, 128)):
        put("h200", make_run(gpu_name=H200, epoch2_seconds=seconds, batch_per_gpu=batch))
    for seconds in (2.0, 2.2, 2.1, 2.1, 9.0):
        put("ada", make_run(gpu_name=ADA, gpu_count=2, epoch2_seconds=seconds, batch_per_gpu=512))
    put(None, make_run(gpu_name=T4, status="out_of_memory", batch_per_gpu=256))
    put(None, make_run(gpu_name=T4, model="B3", epoch2_seconds=55.0))
    put(None, make_run(gpu_name=T4, backend="torch", epoch2_seconds=30.0))
    return collector, runs


def smoke_run(**fields):
    """A run of `gpubench-agent run --limit-images 240` at the native image size: 192
    training images an epoch instead of the standard 1709."""
    seconds = fields.pop("epoch2_seconds")
    return make_run(epoch2_seconds=seconds, train_images_per_second=192 / (seconds * 0.82),
                    config__image_count=240, config__train_images=192,
                    config__validation_images=48, **fields)


def compare(collector, **fields) -> pb.CompareResponse:
    return collector.collector_stub().Compare(pb.CompareRequest(**fields),
                                              metadata=collector.metadata())


def test_compare_figures_match_hand_computed_values(populated) -> None:
    collector, _ = populated
    reply = compare(collector, model="B0", backend="tensorflow")
    assert reply.baseline == "1x Tesla T4"  # the slowest
    assert reply.batch_rule == "given"  # runs of schema 1 with --batch N
    assert (reply.benchmark_version, reply.backend, reply.precision, reply.image_size,
            reply.train_images) == ("1", "tensorflow", "float32", 224, 1709)
    ada, h200, t4 = reply.groups  # fastest first
    assert (ada.gpu_name, ada.gpu_count, h200.gpu_name, t4.gpu_name) == (ADA, 2, H200, T4)

    assert t4.runs == 4  # the out-of-memory, B3 and torch runs do not count
    assert t4.epoch2_median_seconds == pytest.approx(17.5)
    assert (t4.epoch2_min_seconds, t4.epoch2_max_seconds) == (16.0, 19.0)
    assert t4.train_images_per_second_median == pytest.approx(115.0)
    assert t4.energy_per_epoch_median_joules == pytest.approx(1150.0)
    # median of 1709 / energy over the four runs: the middle two are 1709/1100 and 1709/1200
    assert t4.images_per_joule == pytest.approx((1709 / 1100 + 1709 / 1200) / 2)
    assert (t4.max_batch_per_gpu, t4.max_global_batch) == (128, 128)
    assert t4.peak_memory_median_bytes == 13_050_000_000  # (13.0e9 + 13.1e9) / 2
    assert t4.memory_total_bytes == T4_MEMORY
    assert t4.peak_memory_share == pytest.approx(13.05e9 / T4_MEMORY)
    assert t4.speedup == 1.0 and t4.is_baseline

    assert h200.runs == 3 and h200.epoch2_median_seconds == pytest.approx(5.0)
    assert h200.max_batch_per_gpu == 256
    assert h200.speedup == pytest.approx(17.5 / 5.0)

    # 2x RTX 6000 Ada: 9.0 s is an outlier (z = 0.6745 * 6.9 / 0.1 = 46.5) and left out.
    assert ada.runs == 4 and ada.outliers_excluded == 1
    assert ada.epoch2_median_seconds == pytest.approx(2.1)
    assert (ada.epoch2_min_seconds, ada.epoch2_max_seconds) == (2.0, 2.2)
    assert (ada.max_batch_per_gpu, ada.max_global_batch) == (512, 1024)
    assert ada.speedup == pytest.approx(17.5 / 2.1)
    assert any("outlier" in w for w in reply.warnings)


def test_outliers_can_be_included(populated) -> None:
    collector, _ = populated
    ada = compare(collector, model="B0", backend="tensorflow", include_outliers=True).groups[0]
    assert (ada.runs, ada.outliers_excluded) == (5, 0)
    assert ada.epoch2_median_seconds == pytest.approx(2.1)
    assert ada.epoch2_max_seconds == 9.0


def test_a_named_baseline_and_a_gpu_filter(populated) -> None:
    collector, _ = populated
    reply = compare(collector, model="B0", backend="tensorflow", baseline_gpu="nvidia h200",
                    gpu_names=[H200, T4])
    assert reply.baseline == "1x NVIDIA H200"
    assert [(g.gpu_name, round(g.speedup, 4)) for g in reply.groups] == [
        (H200, 1.0), (T4, round(5.0 / 17.5, 4))]


def test_mixing_backends_is_refused_unless_allowed(populated) -> None:
    collector, _ = populated
    with pytest.raises(grpc.RpcError) as caught:
        compare(collector, model="B0")
    assert caught.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "backend (tensorflow, torch" in caught.value.details()
    reply = compare(collector, model="B0", allow_mixed=True)
    assert reply.backend == "mixed"
    t4 = next(g for g in reply.groups if g.gpu_name == T4)
    assert t4.runs == 5
    assert t4.epoch2_median_seconds == pytest.approx(18.0)  # 16, 17, 18, 19, 30


def test_a_smoke_run_on_fewer_images_is_kept_apart(populated) -> None:
    collector, runs = populated
    smoke = smoke_run(gpu_name=T4, epoch2_seconds=1.9)
    collector.collector_stub().SubmitRun(pb.SubmitRunRequest(run=smoke),
                                         metadata=collector.metadata())
    with pytest.raises(grpc.RpcError) as caught:
        compare(collector, model="B0", backend="tensorflow")
    assert caught.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "differ in train_images (1709, 192; pin one with --train-images)" in (
        caught.value.details())

    mixed = compare(collector, model="B0", backend="tensorflow", allow_mixed=True)
    assert (mixed.train_images, mixed.image_size) == (0, 224)
    t4 = next(g for g in mixed.groups if g.gpu_name == T4)
    assert (t4.runs, t4.epoch2_median_seconds) == (5, 17.0)  # 1.9, 16, 17, 18, 19

    pinned = compare(collector, model="B0", backend="tensorflow", train_images=1709)
    assert pinned.train_images == 1709
    t4 = next(g for g in pinned.groups if g.gpu_name == T4)
    assert (t4.runs, t4.outliers_excluded) == (4, 0)
    assert t4.epoch2_median_seconds == pytest.approx(17.5)
    only_smoke = compare(collector, model="B0", train_images=192)
    assert [(g.gpu_name, g.runs) for g in only_smoke.groups] == [(T4, 1)]

    # Not an outlier of the full runs' group, nor does it move their scores.
    stub, md = collector.collector_stub(), collector.metadata()
    stored = stub.GetRun(pb.GetRunRequest(run_id=smoke.run_id), metadata=md)
    assert (stored.outlier, stored.outlier_score) == (False, 0.0)
    full = stub.GetRun(pb.GetRunRequest(run_id=runs["t4"][1].run_id), metadata=md)  # 17 s
    assert full.outlier_score == pytest.approx(0.6745 * -0.5)  # median 17.5, MAD 1.0


def kernels_run(**fields):
    """A torch run with the backend's own kernels on (batched augmentation, fused batch
    norm, channels-first): up to 4x faster than Keras's code path on the same card."""
    return make_run(backend="torch", config__batched_augmentation=True,
                    config__fused_batchnorm=True, config__channels_first=True, **fields)


def test_runs_computed_differently_are_kept_apart(populated) -> None:
    collector, _ = populated
    stub, md = collector.collector_stub(), collector.metadata()
    # (173 img/s at most: under what a T4 may reach with the kernels, 190 img/s)
    fast = [kernels_run(gpu_name=T4, epoch2_seconds=s) for s in (12.0, 12.2, 12.4)]
    on_device = kernels_run(gpu_name=H200, epoch2_seconds=1.5, config__data_on_device=True)
    for run in [*fast, on_device]:
        stub.SubmitRun(pb.SubmitRunRequest(run=run), metadata=md)

    # The torch runs: one through Keras's code path, three with the kernels, one with
    # the kernels and the data on the device.
    with pytest.raises(grpc.RpcError) as caught:
        compare(collector, model="B0", backend="torch")
    assert caught.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert ("differ in settings (keras, kernels, kernels+data-on-device; "
            "pin one with --settings)") in caught.value.details()

    pinned = compare(collector, model="B0", backend="torch", settings="kernels")
    assert (pinned.settings, pinned.backend) == ("kernels", "torch")
    [t4] = pinned.groups
    assert (t4.gpu_name, t4.runs) == (T4, 3)
    assert t4.epoch2_median_seconds == pytest.approx(12.2)
    keras = compare(collector, model="B0", settings="keras", backend="tensorflow")
    assert keras.settings == "keras"
    assert next(g for g in keras.groups if g.gpu_name == T4).runs == 4  # the tensorflow runs

    mixed = compare(collector, model="B0", backend="torch", allow_mixed=True)
    assert mixed.settings == "mixed"
    t4 = next(g for g in mixed.groups if g.gpu_name == T4)
    assert t4.runs == 4
    assert t4.epoch2_median_seconds == pytest.approx(12.3)  # 12.0, 12.2, 12.4, 30
    assert next(g for g in mixed.groups if g.gpu_name == H200).epoch2_median_seconds == 1.5

    # The kernels' fast runs are no outliers of Keras's slower torch run, nor it of them.
    assert not any(
        stub.GetRun(pb.GetRunRequest(run_id=r.run_id), metadata=md).outlier for r in fast)

    # The leaderboard ranks one settings label at a time.
    for settings, runs in (("kernels", 3), ("keras", 1)):
        board = stub.Leaderboard(pb.LeaderboardRequest(model="B0", settings=settings,
                                                       batch_rule="given"), metadata=md)
        assert board.settings == settings
        torch_t4 = [(e.settings, e.runs) for e in board.entries
                    if e.gpu_name == T4 and e.backend == "torch"]
        assert torch_t4 == [(settings, runs)]

    with pytest.raises(grpc.RpcError) as caught:
        compare(collector, model="B0", settings="channels-first+kernels")
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "settings: unknown 'channels-first+kernels'" in caught.value.details()


def searched_run(rule: str, batch: int, largest: int, **fields):
    """A run of schema 2 whose batch `rule` chose `batch`, its search confirming `largest`."""
    return make_run(batch_per_gpu=batch, config__batch_rule=rule,
                    result__largest_batch_per_gpu=largest, **fields)


def test_runs_of_different_batch_rules_are_kept_apart(collector) -> None:
    stub, md = collector.collector_stub(), collector.metadata()
    # On a T4: the steps rule's 128 (the speed answer) and the largest batch that fits.
    steps = [searched_run("steps", 128, largest, gpu_name=T4, epoch2_seconds=s)
             for s, largest in ((17.0, 200), (17.2, 208), (17.4, 200))]
    largest = [searched_run("largest", batch, batch, gpu_name=T4, epoch2_seconds=s)
               for s, batch in ((15.0, 200), (15.2, 208))]
    on_h200 = searched_run("steps", 256, 1024, gpu_name=H200, epoch2_seconds=5.0)
    for run in [*steps, *largest, on_h200]:
        stub.SubmitRun(pb.SubmitRunRequest(run=run), metadata=md)

    with pytest.raises(grpc.RpcError) as caught:
        compare(collector, model="B0")
    assert caught.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert ("the B0 runs differ in batch_rule (largest, steps; pin one with --batch-rule); "
            "or compare them anyway with allow_mixed (--allow-mixed)") == caught.value.details()

    pinned = compare(collector, model="B0", batch_rule="steps", baseline_gpu=T4)
    assert pinned.batch_rule == "steps"
    h200, t4 = pinned.groups
    assert (t4.gpu_name, t4.runs, t4.max_batch_per_gpu, t4.largest_batch_per_gpu_max) == (
        T4, 3, 128, 208)
    assert t4.epoch2_median_seconds == pytest.approx(17.2)
    assert (h200.largest_batch_per_gpu_max, h200.speedup) == (1024, pytest.approx(17.2 / 5.0))
    [fits] = compare(collector, model="B0", batch_rule="largest").groups
    assert (fits.runs, fits.max_batch_per_gpu, fits.largest_batch_per_gpu_max) == (2, 208, 208)
    assert fits.epoch2_median_seconds == pytest.approx(15.1)
    # The faster runs of the largest batch are no outliers of the steps rule's.
    assert not any(stub.GetRun(pb.GetRunRequest(run_id=r.run_id), metadata=md).outlier
                   for r in largest)

    mixed = compare(collector, model="B0", allow_mixed=True)
    assert mixed.batch_rule == "mixed"
    t4 = next(g for g in mixed.groups if g.gpu_name == T4)
    assert (t4.runs, t4.largest_batch_per_gpu_max) == (5, 208)

    with pytest.raises(grpc.RpcError) as caught:
        compare(collector, model="B0", batch_rule="biggest")
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "batch_rule: unknown 'biggest' (one of steps, largest, given, quick)" in (
        caught.value.details())


def test_bad_compare_requests(populated) -> None:
    collector, _ = populated
    for fields, code, words in (
        ({}, grpc.StatusCode.INVALID_ARGUMENT, "model: missing"),
        ({"model": "B9"}, grpc.StatusCode.INVALID_ARGUMENT, "model: unknown 'B9'"),
        ({"model": "B0", "precision": "fp8"}, grpc.StatusCode.INVALID_ARGUMENT, "precision"),
        ({"model": "B0", "backend": "tensorflow", "baseline_gpu": "GTX 480"},
         grpc.StatusCode.NOT_FOUND, "baseline_gpu (--baseline): no runs of 1x GTX 480"),
    ):
        with pytest.raises(grpc.RpcError) as caught:
            compare(collector, **fields)
        assert caught.value.code() == code
        assert words in caught.value.details()
    empty = compare(collector, model="B7")
    assert list(empty.groups) == [] and "no OK runs of B7" in empty.warnings[0]


def test_outlier_flags_and_scores_follow_inserts_and_deletes(populated) -> None:
    collector, runs = populated
    stub = collector.collector_stub()
    md = collector.metadata()

    def stored(run):
        return stub.GetRun(pb.GetRunRequest(run_id=run.run_id), metadata=md)

    slow = stored(runs["ada"][4])
    assert slow.outlier
    assert slow.outlier_score == pytest.approx(0.6745 * 6.9 / 0.1)
    assert stored(runs["ada"][1]).outlier_score == pytest.approx(0.6745)  # 2.2 s
    assert stored(runs["ada"][2]).outlier_score == pytest.approx(0.0)  # 2.1 s, the median
    assert not any(stored(r).outlier for r in runs["t4"] + runs["h200"])

    # Without the 2.0 s run: median 2.15, MAD 0.05; the 2.1 s runs move to -0.6745.
    stub.DeleteRun(pb.DeleteRunRequest(run_id=runs["ada"][0].run_id), metadata=md)
    assert stored(runs["ada"][2]).outlier_score == pytest.approx(-0.6745)
    assert stored(runs["ada"][4]).outlier_score == pytest.approx(0.6745 * 6.85 / 0.05)


def test_a_group_of_identical_times_falls_back_to_the_mean_deviation(collector) -> None:
    stub = collector.collector_stub()
    md = collector.metadata()
    times = [10.0, 10.0, 10.0, 10.0, 10.0, 14.0]
    runs = [make_run(gpu_name=H200, epoch2_seconds=t) for t in times]
    for run in runs:
        stub.SubmitRun(pb.SubmitRunRequest(run=run), metadata=md)
    # MAD is 0; the mean absolute deviation is 4/6; z = 4 / (1.253314 * 4/6) = 4.79.
    last = stub.GetRun(pb.GetRunRequest(run_id=runs[-1].run_id), metadata=md)
    assert last.outlier_score == pytest.approx(4 / (1.253314 * (4 / 6)))
    assert last.outlier
    assert statistics.median(times) == 10.0


def test_a_tight_group_keeps_its_runs_whatever_their_z_score(collector) -> None:
    stub = collector.collector_stub()
    md = collector.metadata()
    # The epoch 2 of the default B0 on one H200, five runs (docs/results/h200-default-run,
    # call5-default-b0*.json and runs/h200-b0-default.json): within 4%, yet three agree
    # so closely that the MAD is 0.16 ms and the slowest scores 66.
    times = [0.686665, 0.697729, 0.697858, 0.698017, 0.713439]
    runs = [make_run(gpu_name=H200, epoch2_seconds=t) for t in times]
    for run in runs:
        stub.SubmitRun(pb.SubmitRunRequest(run=run), metadata=md)
    stored = [stub.GetRun(pb.GetRunRequest(run_id=r.run_id), metadata=md) for r in runs]
    assert abs(stored[-1].outlier_score) > 3.5
    assert not any(s.outlier for s in stored)
    # One run 20% slower than the group is an outlier.
    slow = make_run(gpu_name=H200, epoch2_seconds=0.838)
    stub.SubmitRun(pb.SubmitRunRequest(run=slow), metadata=md)
    assert stub.GetRun(pb.GetRunRequest(run_id=slow.run_id), metadata=md).outlier
    assert not stub.GetRun(pb.GetRunRequest(run_id=runs[-1].run_id), metadata=md).outlier


# The factory's runs: Keras's own code path, the batch given (--batch N).
KERAS_GIVEN = {"settings": "keras", "batch_rule": "given"}


def test_leaderboard_ranks_by_median_epoch2_without_outliers(populated) -> None:
    collector, _ = populated
    reply = collector.collector_stub().Leaderboard(pb.LeaderboardRequest(model="B0",
                                                                         **KERAS_GIVEN),
                                                   metadata=collector.metadata())
    rows = [(e.rank, e.gpu_name, e.gpu_count, e.backend, e.runs) for e in reply.entries]
    assert rows == [
        (1, ADA, 2, "tensorflow", 4),
        (2, H200, 1, "tensorflow", 3),
        (3, T4, 1, "tensorflow", 4),
        (4, T4, 1, "torch", 1),
    ]
    first = reply.entries[0]
    assert first.best_epoch2_seconds == 2.0
    assert first.epoch2_median_seconds == pytest.approx(2.1)
    assert first.max_batch_per_gpu == 512
    # A smoke run at another image size is no entry of the standard benchmark's board.
    smoke = make_run(gpu_name="Tesla V100", epoch2_seconds=0.5, image_size=64)
    collector.collector_stub().SubmitRun(pb.SubmitRunRequest(run=smoke),
                                         metadata=collector.metadata())
    again = collector.collector_stub().Leaderboard(pb.LeaderboardRequest(model="B0",
                                                                         **KERAS_GIVEN),
                                                   metadata=collector.metadata())
    assert "Tesla V100" not in {e.gpu_name for e in again.entries}
    # Nor is a smoke run on a subset of the images (native size, 192 training images).
    fewer = smoke_run(gpu_name="Tesla P100", epoch2_seconds=0.4)
    collector.collector_stub().SubmitRun(pb.SubmitRunRequest(run=fewer),
                                         metadata=collector.metadata())
    again = collector.collector_stub().Leaderboard(pb.LeaderboardRequest(model="B0",
                                                                         **KERAS_GIVEN),
                                                   metadata=collector.metadata())
    assert "Tesla P100" not in {e.gpu_name for e in again.entries}
    assert len(again.entries) == 4
    limited = collector.collector_stub().Leaderboard(
        pb.LeaderboardRequest(model="B0", limit=2, precision="float32", **KERAS_GIVEN),
        metadata=collector.metadata())
    assert [e.rank for e in limited.entries] == [1, 2]


def test_the_clients_refusal_carries_the_differences_as_data(populated) -> None:
    """A refusal to compare unlike runs says how they differ in data, not only in words:
    CompareResponse.mixed, which gpubench.Client reads into the refusal's `mixed`."""
    from gpubench.client import Client
    from gpubench.errors import RequestRefused

    collector, _ = populated
    mixed = compare(collector, model="B0", allow_mixed=True).mixed
    assert [(m.dimension, list(m.values), m.flag) for m in mixed] == [
        ("backend", ["tensorflow", "torch"], "--backend")]
    assert not compare(collector, model="B0", backend="tensorflow", allow_mixed=True).mixed
    with Client(collector.address, collector.admin_token) as client:
        with pytest.raises(RequestRefused) as caught:
            client.compare("B0")
    assert caught.value.status_code == "FAILED_PRECONDITION"
    assert [(m.dimension, list(m.values)) for m in caught.value.mixed] == [
        ("backend", ["tensorflow", "torch"])]
