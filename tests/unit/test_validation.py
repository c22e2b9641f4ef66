"""Validation of submitted runs: every rule, named by its field."""

from __future__ import annotations

import math
import re
import sys
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from factories import make_run
from google.protobuf.descriptor import FieldDescriptor

from gpubench import comparison_key
from gpubench.collector import validation
from gpubench.collector.validation import InvalidRun
from gpubench.v1 import run_pb2
from gpubench.versions import SCHEMA_VERSION

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
    # The weights are a dimension of the comparison: shown and named as names are.
    ("weights with a right-to-left override", _set("config.weights", "imagenet\u202e"),
     "run.config.weights", "U+202E RIGHT-TO-LEFT OVERRIDE"),
    ("weights with a zero-width space", _set("config.weights", "image\u200bnet"),
     "run.config.weights", "U+200B ZERO WIDTH SPACE"),
    ("weights with a newline", _set("config.weights", "imagenet\nB0 5.0 s"),
     "run.config.weights", "U+000A"),
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


# -- every field bounded: a run acknowledged is a run the database can hold ------------------

# The largest value each protobuf scalar type can carry on the wire.
TYPE_MAXIMUM = {
    FieldDescriptor.TYPE_UINT32: 2**32 - 1,
    FieldDescriptor.TYPE_UINT64: 2**64 - 1,
    FieldDescriptor.TYPE_INT32: 2**31 - 1,
    FieldDescriptor.TYPE_INT64: 2**63 - 1,
    FieldDescriptor.TYPE_DOUBLE: sys.float_info.max,
}
# The runs table's 32-bit INTEGER columns and the fields they are read from.
INTEGER_COLUMNS = {
    "schema_version": "Run.schema_version",
    "image_size": "Config.image_size",
    "gpu_count": "Config.gpu_count",
    "batch_per_gpu": "Config.batch_per_gpu",
    "global_batch": "Config.global_batch",
    "train_images": "Config.train_images",
}


def _full_run() -> run_pb2.Run:
    """A realistic run with at least one entry in every repeated field."""
    run = make_run(config__batch_rule="largest", config__memory_limit_bytes=16 * GIB)
    run.result.batch_trials.add(batch=128, fits=True, peak_memory_bytes=12 * GIB, seconds=40.0,
                                reserved_peak_bytes=13 * GIB, kind="probe")
    run.result.throttle_reasons.append("sw_power_cap")
    run.result.warnings.append("epoch 1 ran hot")
    run.result.memory_notes.append("CUDA graphs: the allocator peak covers the whole run")
    run.result.largest_batch_per_gpu = 128
    run.result.search_seconds = 95.0
    return run


def _leaf_fields(
    descriptor: Any = run_pb2.Run.DESCRIPTOR, at: str = "run", parents: tuple = ()
) -> list[tuple[str, tuple, Any]]:
    """(field path, the path's parts, the field descriptor) for every scalar field of a
    Run, through every message in it (the first entry of repeated ones)."""
    found = []
    for field in descriptor.fields:
        repeated = validation._is_repeated(field)
        path = f"{at}.{field.name}[0]" if repeated else f"{at}.{field.name}"
        parts = (*parents, (field.name, repeated))
        if field.type == FieldDescriptor.TYPE_MESSAGE:
            found += _leaf_fields(field.message_type, path, parts)
        else:
            found.append((path, parts, field))
    return found


def _set_leaf(run: run_pb2.Run, parts: tuple, value: object) -> None:
    target = run
    for name, repeated in parts[:-1]:
        target = getattr(target, name)[0] if repeated else getattr(target, name)
    name, repeated = parts[-1]
    if repeated:
        getattr(target, name)[0] = value
    else:
        setattr(target, name, value)


NUMBERS = [(path, parts, f) for path, parts, f in _leaf_fields()
           if f.type in TYPE_MAXIMUM]
TEXTS = [(path, parts, f) for path, parts, f in _leaf_fields()
         if f.type == FieldDescriptor.TYPE_STRING]
ENUMS = [(path, parts, f) for path, parts, f in _leaf_fields()
         if f.type == FieldDescriptor.TYPE_ENUM]


def test_the_full_run_is_valid_and_the_walk_finds_every_kind_of_field() -> None:
    assert validation.problems(_full_run()) == []
    types = {f.type for _, _, f in _leaf_fields()}
    # A field of another type would need a row in TYPE_MAXIMUM (or a rule of its own).
    assert types <= {*TYPE_MAXIMUM, FieldDescriptor.TYPE_STRING, FieldDescriptor.TYPE_ENUM,
                     FieldDescriptor.TYPE_BOOL}
    assert len(NUMBERS) >= 60 and "run.result.batch_trials[0].reserved_peak_bytes" in {
        p for p, _, _ in NUMBERS}


def test_every_number_has_a_limit_of_its_own() -> None:
    """A field added to run.proto gets a limit chosen for it, not the fallback."""
    named = {
        f.full_name.removeprefix("gpubench.v1.") for _, _, f in NUMBERS
        if not f.full_name.startswith("google.protobuf.")
    }
    assert named == set(validation.NUMBER_LIMITS)


def test_every_limit_fits_the_column_it_is_stored_in() -> None:
    for column, name in INTEGER_COLUMNS.items():
        low, high = validation.NUMBER_LIMITS[name]
        assert 0 <= low and high < 2**31, column
    assert validation.NUMBER_LIMITS["Result.largest_batch_per_gpu"][1] < 2**31
    for name, (_, high) in validation.NUMBER_LIMITS.items():
        assert high < 2**63, name  # UBIGINT holds 2**64 - 1; a BIGINT 2**63 - 1


@pytest.mark.parametrize(("path", "parts", "field"), NUMBERS, ids=[p for p, _, _ in NUMBERS])
def test_every_number_at_its_types_maximum_is_refused_naming_it(
    path: str, parts: tuple, field: Any
) -> None:
    run = _full_run()
    _set_leaf(run, parts, TYPE_MAXIMUM[field.type])
    # created_at's seconds and nanos are checked as one time.
    named = "run.created_at" if path.startswith("run.created_at.") else path
    found = validation.problems(run)
    assert any(name == named for name, _ in found), found
    with pytest.raises(InvalidRun, match=re.escape(named)):
        validation.validate(run)


# Figures that may be below 0: start-up, when epoch 2 was the slower epoch.
SIGNED = {"run.result.startup_seconds"}


@pytest.mark.parametrize(
    ("path", "parts"),
    [(p, parts) for p, parts, f in NUMBERS if f.type == FieldDescriptor.TYPE_DOUBLE],
    ids=[p for p, _, f in NUMBERS if f.type == FieldDescriptor.TYPE_DOUBLE],
)
def test_every_figure_refuses_nan_infinity_and_negatives(path: str, parts: tuple) -> None:
    negative = () if path in SIGNED else ((-1.0, "must be >= 0"),)
    for value, words in ((math.nan, "finite"), (math.inf, "finite"), (-math.inf, "finite"),
                         *negative):
        run = _full_run()
        _set_leaf(run, parts, value)
        assert any(name == path and words in why for name, why in validation.problems(run))


@pytest.mark.parametrize(("path", "parts"), [(p, parts) for p, parts, _ in TEXTS],
                         ids=[p for p, _, _ in TEXTS])
def test_every_text_is_bounded(path: str, parts: tuple) -> None:
    run = _full_run()
    _set_leaf(run, parts, "x" * 100_000)
    assert any(name == path for name, _ in validation.problems(run))


@pytest.mark.parametrize(("path", "parts"), [(p, parts) for p, parts, _ in ENUMS],
                         ids=[p for p, _, _ in ENUMS])
def test_every_enum_refuses_values_it_does_not_define(path: str, parts: tuple) -> None:
    run = _full_run()
    _set_leaf(run, parts, 99)
    assert (path, "unknown value 99") in validation.problems(run)


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ({"config__train_images": 3_000_000_000, "config__image_count": 0},
         ["run.config.train_images"]),
        ({"config__batch_per_gpu": 3_000_000_000, "config__global_batch": 3_000_000_000},
         ["run.config.batch_per_gpu", "run.config.global_batch"]),
        ({"config__batch_per_gpu": 1_500_000_000, "config__global_batch": 3_000_000_000,
          "gpu_count": 2}, ["run.config.batch_per_gpu", "run.config.global_batch"]),
        ({"config__image_count": 3_000_000_000}, ["run.config.image_count"]),
        ({"config__epochs": 3_000_000_000}, ["run.config.epochs"]),
        ({"config__image_size": 3_000_000_000}, ["run.config.image_size"]),
    ],
    ids=["train_images", "batch_per_gpu", "global_batch", "image_count", "epochs",
         "image_size"],
)
def test_counts_a_32_bit_column_cannot_hold_are_refused(fields: dict, named: list) -> None:
    found = validation.problems(make_run(**fields))
    assert [name for name, why in found if "must be <=" in why] == named, found


def test_the_limits_are_far_above_a_real_run() -> None:
    # ImageNet on 8 H200s: 1,024,934 training images in an epoch of an hour.
    run = make_run(gpu_name="NVIDIA H200", gpu_count=8, model="B7", batch_per_gpu=4096,
                   epoch2_seconds=3600.0, train_images_per_second=1_024_934 / (3600 * 0.82),
                   config__image_count=1_281_167, config__train_images=1_024_934,
                   config__validation_images=256_233, config__epochs=90)
    assert validation.problems(run) == []


@pytest.mark.parametrize("rule", ["", *validation.BATCH_RULES])
def test_the_batch_rules(rule: str) -> None:
    assert validation.problems(make_run(config__batch_rule=rule)) == []


def test_an_unknown_batch_rule_or_trial_kind_is_refused() -> None:
    run = make_run(config__batch_rule="biggest")
    run.result.batch_trials.add(batch=64, fits=True, kind="guess")
    found = dict(validation.problems(run))
    assert found["run.config.batch_rule"].startswith("unknown 'biggest' (one of steps,")
    assert found["run.result.batch_trials[0].kind"].startswith("unknown 'guess' (one of probe,")
    for kind in ("", *validation.TRIAL_KINDS):
        run.result.batch_trials[0].kind = kind
        run.config.batch_rule = "largest"
        assert validation.problems(run) == []


def test_a_model_other_than_the_efficientnets_comes_with_its_fingerprint() -> None:
    run = make_run()
    run.config.model, run.config.unit = "ConvNeXtTiny", "images"
    run.config.input_spec, run.config.parameter_count = "photos 224x224x3", 28_589_128
    assert [p for p in validation.problems(run) if p[0] == "run.config.model"] == [
        ("run.config.model", "unknown 'ConvNeXtTiny' (one of B0, B3, B7, ViT-B16, GPT2-small, "
                             "or another model with its run.config.model_fingerprint)")]
    run.config.model_fingerprint = "not hex"
    assert ("run.config.model_fingerprint", "must be 64 hex digits (a SHA-256)") in \
        validation.problems(run)
    run.config.model_fingerprint = "0f" * 32
    assert validation.problems(run) == []
    run.config.unit = "words"
    assert [name for name, _ in validation.problems(run)] == ["run.config.unit"]
    b0 = make_run()
    b0.config.model_fingerprint = "0f" * 32  # B0 is told by its name alone
    assert [name for name, _ in validation.problems(b0)] == ["run.config.model_fingerprint"]


def test_every_text_dimension_of_the_comparison_obeys_the_names_rules(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A dimension added later, read from a field with no rule of its own: refused too.
    mode = replace(comparison_key.DIMENSIONS[-1], name="mode", words="mode", numeric=False,
                   of=lambda run: run.result.error_message)
    monkeypatch.setattr(comparison_key, "DIMENSIONS", (*comparison_key.DIMENSIONS, mode))
    run = make_run()
    run.result.error_message = "fast\u2066 mode"
    assert validation.problems(run) == [
        ("run (its mode, a dimension of the comparison)",
         "contains a control or bidirectional character (U+2066 LEFT-TO-RIGHT ISOLATE)")]
    run.result.error_message = "fast mode"
    assert validation.problems(run) == []
