"""Validation of submitted runs: every rule, named by its field."""

from __future__ import annotations

import math
from collections.abc import Callable
from datetime import datetime, timedelta, timezone

import pytest
from factories import make_run
from gpubench.collector import validation
from gpubench.collector.validation import InvalidRun

from gpubench import SCHEMA_VERSION
from gpubench.v1 import run_pb2

GIB = 1 << 30


def test_a_realistic_run_is_valid() -> None:
    for gpu in ("Tesla T4", "NVIDIA RTX 6000 Ada Generation", "NVIDIA H200"):
        for model in ("B0", "B3", "B7"):
            assert validation.problems(make_run(gpu_name=gpu, model=model)) == []
    assert validation.problems(make_run(gpu_name="NVIDIA H200", gpu_count=2)) == []


def test_failed_runs_need_no_measured_epoch() -> None:
    for status in ("out_of_memory", "error", "interrupted"):
        assert validation.problems(make_run(status=status)) == []


def test_a_cpu_only_run_is_valid() -> None:
    assert validation.problems(make_run(gpu_count=0)) == []


def _set(path: str, value: object) -> Callable[[run_pb2.Run], None]:
    def change(run: run_pb2.Run) -> None:
        *parents, leaf = path.split(".")
        target = run
        for part in parents:
            target = getattr(target, part)
        setattr(target, leaf, value)

    return change


def _clear(field: str) -> Callable[[run_pb2.Run], None]:
    return lambda run: run.ClearField(field)


def _epochs_without_measured(run: run_pb2.Run) -> None:
    del run.result.epochs[1]


def _duplicate_epoch(run: run_pb2.Run) -> None:
    run.result.epochs[1].number = 1


def _peak_above_card(run: run_pb2.Run) -> None:
    run.result.memory[0].allocator_peak_bytes = run.gpus[0].memory_total_bytes + 1


def _memory_of_unlisted_gpu(run: run_pb2.Run) -> None:
    run.result.memory[0].gpu_index = 7


def _too_many_gpus(run: run_pb2.Run) -> None:
    run.config.gpu_count = 2
    run.config.global_batch = run.config.batch_per_gpu * 2


def _gpu_twice(run: run_pb2.Run) -> None:
    run.gpus.add().CopyFrom(run.gpus[0])
    run.config.gpu_count = 1


def _many_warnings(run: run_pb2.Run) -> None:
    run.result.warnings.extend(["slow"] * (validation.MAX_WARNINGS + 1))


# (what is wrong, how to break a valid run, the field the message must name, words in it)
RULES = [
    ("missing run_id", _set("run_id", ""), "run.run_id", "missing"),
    ("run_id not a UUID", _set("run_id", "run-1"), "run.run_id", "UUID"),
    ("run_id not canonical", _set("run_id", "{12345678-1234-5678-1234-567812345678}"),
     "run.run_id", "UUID"),
    ("no schema version", _set("schema_version", 0), "run.schema_version", "missing"),
    ("newer schema", _set("schema_version", SCHEMA_VERSION + 1), "run.schema_version", "newer"),
    ("no benchmark version", _set("benchmark_version", ""), "run.benchmark_version", "missing"),
    ("long label", _set("label", "x" * 201), "run.label", "longer than 200"),
    ("no created_at", _clear("created_at"), "run.created_at", "missing"),
    ("unknown model", _set("config.model", "B9"), "run.config.model", "unknown 'B9'"),
    ("no model", _set("config.model", ""), "run.config.model", "missing"),
    ("unknown precision", _set("config.precision", "fp8"), "run.config.precision", "unknown"),
    ("unknown backend", _set("software.backend", "mxnet"), "run.software.backend", "unknown"),
    ("unknown pipeline", _set("config.pipeline", "magic"), "run.config.pipeline", "unknown"),
    ("batch 0", _set("config.batch_per_gpu", 0), "run.config.batch_per_gpu", "must be >= 1, got 0"),
    ("global batch off", _set("config.global_batch", 100), "run.config.global_batch",
     "batch_per_gpu x gpu_count"),
    ("more GPUs than listed", _too_many_gpus, "run.config.gpu_count", "lists 1 GPU"),
    ("image size 0", _set("config.image_size", 0), "run.config.image_size", "must be 1.."),
    ("no epochs", _set("config.epochs", 0), "run.config.epochs", "must be >= 1"),
    ("validation split 1", _set("config.validation_split", 1.0), "run.config.validation_split",
     "must be <= 0.99"),
    ("more train images than images", _set("config.train_images", 5000),
     "run.config.train_images", "more than the dataset"),
    ("NaN epoch-2 time", _set("result.epoch2_seconds", math.nan), "run.result.epoch2_seconds",
     "finite"),
    ("infinite epoch-2 time", _set("result.epoch2_seconds", math.inf),
     "run.result.epoch2_seconds", "finite"),
    ("negative epoch-2 time", _set("result.epoch2_seconds", -1.0), "run.result.epoch2_seconds",
     "must be >= 0"),
    ("zero epoch-2 time on an OK run", _set("result.epoch2_seconds", 0.0),
     "run.result.epoch2_seconds", "> 0"),
    ("negative epoch wall time", lambda r: setattr(r.result.epochs[0], "wall_seconds", -3.0),
     "run.result.epochs[0].wall_seconds", "must be >= 0"),
    ("NaN loss", lambda r: setattr(r.result.epochs[1], "loss", math.nan),
     "run.result.epochs[1].loss", "finite"),
    ("accuracy above 1", lambda r: setattr(r.result.epochs[1], "accuracy", 1.5),
     "run.result.epochs[1].accuracy", "must be <= 1"),
    ("negative images/s", _set("result.train_images_per_second", -5.0),
     "run.result.train_images_per_second", "must be >= 0"),
    ("infinite energy", _set("result.energy_per_epoch_joules", math.inf),
     "run.result.energy_per_epoch_joules", "finite"),
    ("OK run without its measured epoch", _epochs_without_measured, "run.result.epochs",
     "measured epoch 2"),
    ("OK run without measured_epoch", _set("result.measured_epoch", 0),
     "run.result.measured_epoch", "missing"),
    ("epoch listed twice", _duplicate_epoch, "run.result.epochs[1].number", "twice"),
    ("no status", _set("result.status", run_pb2.RUN_STATUS_UNSPECIFIED), "run.result.status",
     "missing"),
    ("peak memory above the card", _peak_above_card, "run.result.memory[0].allocator_peak_bytes",
     "more than the card's memory"),
    ("memory of an unlisted GPU", _memory_of_unlisted_gpu, "run.result.memory[0].gpu_index",
     "not in run.gpus"),
    ("GPU without a name", lambda r: setattr(r.gpus[0], "name", ""), "run.gpus[0].name", "missing"),
    ("GPU name too long", lambda r: setattr(r.gpus[0], "name", "G" * 201), "run.gpus[0].name",
     "longer than 200"),
    ("GPU without memory", lambda r: setattr(r.gpus[0], "memory_total_bytes", 0),
     "run.gpus[0].memory_total_bytes", "missing"),
    ("GPU listed twice", _gpu_twice, "run.gpus[1].index", "listed twice"),
    ("hostname not hashed", _set("host.hostname_hash", "gpu-box-17"), "run.host.hostname_hash",
     "sha256"),
    ("long OS string", _set("host.os", "L" * 201), "run.host.os", "longer than 200"),
    ("long error message", _set("result.error_message", "e" * 4001), "run.result.error_message",
     "longer than 4000"),
    ("too many warnings", _many_warnings, "run.result.warnings", "more than 64 entries"),
    ("long backend version", _set("software.backend_version", "9" * 65),
     "run.software.backend_version", "longer than 64"),
]


@pytest.mark.parametrize(
    ("change", "field", "words"),
    [pytest.param(change, field, words, id=name) for name, change, field, words in RULES],
)
def test_each_rule_names_its_field(
    change: Callable[[run_pb2.Run], None], field: str, words: str
) -> None:
    run = make_run()
    change(run)
    found = validation.problems(run)
    assert any(name == field and words in why for name, why in found), found
    with pytest.raises(InvalidRun) as caught:
        validation.validate(run)
    assert field in str(caught.value)


def test_created_at_in_the_future_is_refused_but_small_skew_is_not() -> None:
    now = datetime(2026, 6, 1, 12, 0, tzinfo=timezone.utc)
    future = make_run(created_at=now + timedelta(hours=2))
    assert [f for f, _ in validation.problems(future, now=now)] == ["run.created_at"]
    skewed = make_run(created_at=now + timedelta(minutes=10))
    assert validation.problems(skewed, now=now) == []
    ancient = make_run(created_at=datetime(2001, 1, 1, tzinfo=timezone.utc))
    assert "before 2020" in validation.problems(ancient, now=now)[0][1]


def test_all_problems_are_collected_and_the_message_shows_the_first_few() -> None:
    run = make_run(model="B0")
    run.config.model = "B9"
    run.config.batch_per_gpu = 0
    run.config.precision = "fp8"
    run.software.backend = "mxnet"
    run.result.epoch2_seconds = math.nan
    run.run_id = ""
    run.label = "x" * 300
    with pytest.raises(InvalidRun) as caught:
        validation.validate(run)
    error = caught.value
    assert len(error.problems) >= 7
    message = str(error)
    assert message.startswith("run.run_id: missing")
    assert f"(and {len(error.problems) - validation.SHOWN_PROBLEMS} more)" in message
    assert message.count(";") == validation.SHOWN_PROBLEMS - 1
    assert error.exit_code == 6  # bad data


def test_peak_memory_exactly_the_card_is_allowed() -> None:
    run = make_run(gpu_name="Tesla T4")
    run.result.memory[0].allocator_peak_bytes = run.gpus[0].memory_total_bytes
    run.result.memory[0].process_peak_bytes = run.gpus[0].memory_total_bytes
    assert validation.problems(run) == []
    run.result.memory[0].process_peak_bytes += 1
    assert [f for f, _ in validation.problems(run)] == ["run.result.memory[0].process_peak_bytes"]


def test_peak_memory_is_checked_against_the_listed_gpu_when_memory_total_is_absent() -> None:
    run = make_run(gpu_name="Tesla T4")
    run.result.memory[0].memory_total_bytes = 0
    run.result.memory[0].allocator_peak_bytes = 17 * GIB  # a T4 has 15 GiB
    assert [f for f, _ in validation.problems(run)] == [
        "run.result.memory[0].allocator_peak_bytes"
    ]
