"""Checks a submitted run record, field by field, before the collector stores it.

Every problem is collected (not just the first) and named by its field path, e.g.
"run.config.batch_per_gpu: must be >= 1, got 0". `validate` raises one
`InvalidRun` carrying them all; its message shows the first few.

Whatever passes here must fit the runs table's columns (32-bit INTEGERs among them):
a value the database refuses is an error the sender cannot act on. The rules below
check what is missing and what must agree; a last pass walks the record's
descriptor and bounds every field: each number by its range in NUMBER_LIMITS (the
one table of ranges), each enum to its known values, each text to MESSAGE
characters at most. A field added to run.proto is never left unbounded.

Names shown to people (GPU and CPU names, the OS, labels, data sets, a published
run's source, and every text dimension of the comparison: the weights, ...) may not
hold control or bidirectional characters, which can make one name look like another;
a GPU name must be ASCII once Unicode-normalised, as NVML writes them. A record that
contradicts itself (collector.plausibility) is refused too.

Before any of that, the record's size and its fields (collector.wire): a run over
MAX_RUN_BYTES serialised is refused, and so is one holding fields its schema does not
have. Those are refused rather than dropped: the collector stores and hashes the
record as sent (its content_sha256 makes resubmission idempotent), so dropping them
would acknowledge a record other than the one sent and lose data without a word; a
newer schema is announced by schema_version, which the collector refuses when it is
newer than the one it reads, so unknown fields at a known version are a mistake the
sender should hear about.
"""

from __future__ import annotations

import math
import re
import unicodedata
import uuid
from collections.abc import Iterable, Sized
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone

from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import Message

from gpubench import comparison_key, models, record
from gpubench.collector import plausibility, wire
from gpubench.errors import InvalidRecord
from gpubench.settings import BATCH_RULES
from gpubench.v1 import run_pb2
from gpubench.versions import SCHEMA_VERSION

# How many problems the error message lists before "(and N more)".
SHOWN_PROBLEMS = 5
# How far in the future created_at may be (clocks of GPU hosts drift; time zones are not an excuse).
CLOCK_SKEW = timedelta(hours=1)
# Nothing was benchmarked before the project existed.
EARLIEST = datetime(2020, 1, 1, tzinfo=timezone.utc)

SHORT = 64  # versions, hashes, modes
NAME = 200  # GPU and CPU names, OS, labels, dataset names
LONG = record.MAX_TEXT_CHARS  # image references, warnings
MESSAGE = record.MAX_MESSAGE_CHARS  # error messages

MAX_GPUS = 64
MAX_EPOCHS = 1000
MAX_TRIALS = 64
MAX_WARNINGS = record.MAX_WARNINGS
MAX_IMAGE_SIZE = 4096
# No GPU has a terabyte of memory yet; a figure above this is a unit mistake.
MAX_MEMORY_BYTES = 2**40
MAX_SECONDS = 30 * 24 * 3600.0
# Images in a data set, a split or an epoch (ImageNet-21k has 14 million); the runs
# table keeps train_images in a 32-bit INTEGER, which this stays far under.
MAX_IMAGES = 100_000_000
# Images in one GPU's batch; times MAX_GPUS (the global batch) still far under 2**31.
MAX_BATCH = 1 << 20
# A host's memory: the largest servers have tens of TiB.
MAX_HOST_MEMORY_BYTES = 2**50
MAX_CPU_CORES = 100_000
# NVML's GPU index; a host has a few dozen GPUs at most.
MAX_GPU_INDEX = 1023
# One GPU's power limit; a run's power is that of all its GPUs.
MAX_GPU_WATTS = 10_000.0
MAX_WATTS = MAX_GPUS * MAX_GPU_WATTS
MAX_JOULES = MAX_WATTS * MAX_SECONDS
MAX_TEMPERATURE_C = 200.0  # silicon is long dead before this
MAX_CLOCK_MHZ = 100_000.0
MAX_IMAGES_PER_SECOND = 1e9
# Cross-entropy of a softmax clipped at Keras's epsilon stays under about 16.
MAX_LOSS = 1e6
# Telemetry samples behind an epoch's figures: 100 a second for MAX_SECONDS.
MAX_SAMPLES = int(100 * MAX_SECONDS)
# A run's seed: the protocol's is 12; refused from 2**31 on like the other counts.
MAX_SEED = 2**31 - 1
# How batch_per_gpu was chosen is Config.batch_rule, one of BATCH_RULES; what a batch-size
# trial was is BatchTrial.kind; both may be empty (records of schema 1).
TRIAL_KINDS = ("probe", "confirm", "run")

# Every number of a run record, by field (relative to the package gpubench.v1): the
# least and the most it may be. The lows are 0 for counts that may be absent; the
# rules below say where an absent (0) value is refused. Limits are far beyond any real
# run and inside what the runs table's columns hold (INTEGER for image_size,
# gpu_count, batch_per_gpu, global_batch, train_images, schema_version and
# largest_batch_per_gpu; UBIGINT for bytes; DOUBLE for figures).
NUMBER_LIMITS: dict[str, tuple[float, float]] = {
    "Run.schema_version": (0, SCHEMA_VERSION),
    "Host.cpu_cores": (0, MAX_CPU_CORES),
    "Host.ram_bytes": (0, MAX_HOST_MEMORY_BYTES),
    "Gpu.index": (0, MAX_GPU_INDEX),
    "Gpu.memory_total_bytes": (0, MAX_MEMORY_BYTES),
    "Gpu.power_limit_watts": (0, MAX_GPU_WATTS),
    "Gpu.pcie_generation": (0, 16),
    "Gpu.pcie_width": (0, 64),  # lanes; PCIe's widest link is x32
    "Config.image_size": (0, MAX_IMAGE_SIZE),
    # A model's parameters: a trillion at most, past any model one card trains.
    "Config.parameter_count": (0, 1e12),
    "Config.batch_per_gpu": (0, MAX_BATCH),
    "Config.global_batch": (0, MAX_BATCH * MAX_GPUS),
    "Config.gpu_count": (0, MAX_GPUS),
    "Config.epochs": (0, MAX_EPOCHS),
    "Config.image_count": (0, MAX_IMAGES),
    "Config.validation_split": (0, 0.99),
    "Config.train_images": (0, MAX_IMAGES),
    "Config.validation_images": (0, MAX_IMAGES),
    "Config.seed": (0, MAX_SEED),
    "Config.memory_limit_bytes": (0, MAX_MEMORY_BYTES),
    "BatchTrial.batch": (0, MAX_BATCH),
    "BatchTrial.peak_memory_bytes": (0, MAX_MEMORY_BYTES),
    "BatchTrial.seconds": (0, MAX_SECONDS),
    "BatchTrial.reserved_peak_bytes": (0, MAX_MEMORY_BYTES),
    "Epoch.number": (0, MAX_EPOCHS),
    "Epoch.wall_seconds": (0, MAX_SECONDS),
    "Epoch.train_seconds": (0, MAX_SECONDS),
    "Epoch.validation_seconds": (0, MAX_SECONDS),
    "Epoch.energy_joules": (0, MAX_JOULES),
    "Epoch.mean_power_watts": (0, MAX_WATTS),
    "Epoch.max_power_watts": (0, MAX_WATTS),
    "Epoch.max_temperature_c": (0, MAX_TEMPERATURE_C),
    "Epoch.mean_sm_clock_mhz": (0, MAX_CLOCK_MHZ),
    "Epoch.mean_gpu_utilization": (0, 100),
    "Epoch.loss": (0, MAX_LOSS),
    "Epoch.accuracy": (0, 1),
    "Epoch.val_loss": (0, MAX_LOSS),
    "Epoch.val_accuracy": (0, 1),
    "Epoch.samples": (0, MAX_SAMPLES),
    "GpuMemory.gpu_index": (0, MAX_GPU_INDEX),
    "GpuMemory.allocator_peak_bytes": (0, MAX_MEMORY_BYTES),
    "GpuMemory.process_peak_bytes": (0, MAX_MEMORY_BYTES),
    "GpuMemory.device_peak_bytes": (0, MAX_MEMORY_BYTES),
    "GpuMemory.allocator_reserved_peak_bytes": (0, MAX_MEMORY_BYTES),
    "GpuMemory.memory_total_bytes": (0, MAX_MEMORY_BYTES),
    "Result.measured_epoch": (0, MAX_EPOCHS),
    "Result.epoch2_seconds": (0, MAX_SECONDS),
    # Epoch 1 minus epoch 2: below 0 when epoch 2 was the slower (a card that throttled).
    "Result.startup_seconds": (-MAX_SECONDS, MAX_SECONDS),
    "Result.train_images_per_second": (0, MAX_IMAGES_PER_SECOND),
    "Result.step_time_median_seconds": (0, MAX_SECONDS),
    "Result.step_time_cv": (0, 1000),
    "Result.energy_per_epoch_joules": (0, MAX_JOULES),
    "Result.mean_power_watts": (0, MAX_WATTS),
    "Result.max_power_watts": (0, MAX_WATTS),
    "Result.max_temperature_c": (0, MAX_TEMPERATURE_C),
    "Result.mean_sm_clock_mhz": (0, MAX_CLOCK_MHZ),
    "Result.idle_temperature_c": (0, MAX_TEMPERATURE_C),
    "Result.idle_wait_seconds": (0, MAX_SECONDS),
    "Result.largest_batch_per_gpu": (0, MAX_BATCH),
    "Result.search_seconds": (0, MAX_SECONDS),
    "Result.total_seconds": (0, MAX_SECONDS),
    # Keras on JAX: a compiled run needs a few hundred programs, one run operation by
    # operation a few thousand (docs/results/h200-jax.md).
    "XlaPrograms.compiled": (0, 1_000_000),
    "XlaPrograms.loaded": (0, 1_000_000),
    "XlaPrograms.seconds": (0, MAX_SECONDS),
}
# A number NUMBER_LIMITS forgot (a test keeps the table complete): what a 32-bit
# INTEGER column holds.
DEFAULT_NUMBER_LIMITS = (0, 2**31 - 1)

_HEX64 = re.compile(r"^[0-9a-f]{64}$")
# Why a published run (Run.published) from an agent's token is refused.
PUBLISHED_BY_OPERATORS = ("published runs are loaded by the collector's operator "
                          "(gpubench-collector import, or an admin token), not submitted")
# Unicode categories a name may not hold: controls, format characters (the bidirectional
# overrides and isolates, zero-width joiners and marks), surrogates, line and paragraph
# separators.
_UNSAFE_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})

# Fields checked alike, by message.
GPU_TEXTS = ("driver_version", "cuda_version", "compute_capability", "ecc_mode",
             "persistence_mode")
SOFTWARE_TEXTS = ("backend_version", "keras_version", "python_version", "cuda_runtime_version",
                  "cudnn_version")


class InvalidRun(InvalidRecord):
    """A run record with one or more invalid fields."""

    def __init__(self, problems: list[tuple[str, str]]) -> None:
        shown = "; ".join(f"{name}: {why}" for name, why in problems[:SHOWN_PROBLEMS])
        if len(problems) > SHOWN_PROBLEMS:
            shown += f" (and {len(problems) - SHOWN_PROBLEMS} more)"
        super().__init__(problems[0][0], problems[0][1])
        self.args = (shown,)
        self.problems = problems

    def __str__(self) -> str:
        return self.args[0]


class _Checker:
    """Collects (field, problem) pairs."""

    def __init__(self) -> None:
        self.problems: list[tuple[str, str]] = []

    def fail(self, name: str, problem: str) -> None:
        self.problems.append((name, problem))

    def text(self, name: str, value: str, limit: int, *, required: bool = False) -> None:
        if required and not value:
            self.fail(name, "missing")
        elif len(value) > limit:
            self.fail(name, f"longer than {limit} characters ({len(value)})")

    def texts(self, at: str, message: object, names: tuple[str, ...], limit: int) -> None:
        """`text` for each of `message`'s fields `names`; the path `at.name` is only
        formatted for a field that fails (every submission passes here)."""
        for name in names:
            value = getattr(message, name)
            if len(value) > limit:
                self.text(f"{at}.{name}", value, limit)

    def choice(self, name: str, value: str, allowed: Iterable[str]) -> None:
        allowed = tuple(allowed)
        if not value:
            self.fail(name, f"missing (one of {', '.join(allowed)})")
        elif value not in allowed:
            self.fail(name, f"unknown {value[:SHORT]!r} (one of {', '.join(allowed)})")

    def count(self, name: str, items: Sized, limit: int) -> None:
        n = len(items)
        if n > limit:
            self.fail(name, f"more than {limit} entries ({n})")


def problems(
    run: run_pb2.Run, *, now: datetime | None = None, may_publish: bool = False
) -> list[tuple[str, str]]:
    """Every problem of the record, as (field path, what is wrong); empty when valid.

    A published record (Run.published) is a problem unless `may_publish` (the
    collector's operator loads those, never an agent).
    """
    # Size first: an oversized record is refused before anything walks it.
    too_large = wire.size_problem(run)
    if too_large:
        return [("run", too_large)]
    unknown = wire.unknown_field_problems(run, "run")
    if unknown:
        return unknown
    now = now or datetime.now(timezone.utc)
    c = _Checker()
    _identity(c, run, now, may_publish)
    _host(c, run.host)
    gpu_memory = _gpus(c, run)
    _software(c, run.software)
    _config(c, run)
    _result(c, run, gpu_memory)
    if not c.problems:  # a field already refused would only be named twice
        _safe_dimensions(c, run)
    failed = {name for name, _ in c.problems}
    _bounds(c, run, RUN_BOUNDS, "run", failed)
    if not c.problems:  # figures already refused would only be named twice
        c.problems.extend(plausibility.inconsistencies(run))
    return c.problems


def validate(
    run: run_pb2.Run, *, now: datetime | None = None, may_publish: bool = False
) -> None:
    """Raise InvalidRun naming every bad field; return quietly for a valid record."""
    found = problems(run, now=now, may_publish=may_publish)
    if found:
        raise InvalidRun(found)


def unsafe_character(text: str) -> str:
    """The first control or bidirectional character of `text`, described
    ("U+202E RIGHT-TO-LEFT OVERRIDE"); "" when there is none."""
    for char in text:
        if unicodedata.category(char) in _UNSAFE_CATEGORIES:
            return _describe(char)
    return ""


def _describe(char: str) -> str:
    return f"U+{ord(char):04X} {unicodedata.name(char, 'unnamed')}"


def _safe_name(c: _Checker, name: str, value: str) -> None:
    """A name shown to people: no control or bidirectional characters."""
    found = unsafe_character(value)
    if found:
        c.fail(name, f"contains a control or bidirectional character ({found})")


def _safe_dimensions(c: _Checker, run: run_pb2.Run) -> None:
    """Every text dimension of the comparison key (gpubench.comparison_key: what Compare
    keeps apart, shows and names in its refusals) obeys the names' rules, whichever
    fields it is read from: a dimension added later cannot carry a control or
    bidirectional character to a terminal."""
    for dimension in comparison_key.DIMENSIONS:
        value = dimension.of(run)
        found = unsafe_character(value) if isinstance(value, str) else ""
        if found:
            c.fail(f"run (its {dimension.words}, a dimension of the comparison)",
                   f"contains a control or bidirectional character ({found})")


def _gpu_name(c: _Checker, name: str, value: str) -> None:
    """A GPU name: not blank, safe, and ASCII once normalised (NVML's names are). A run
    with no GPU lists none; a GPU without a name is not a CPU run."""
    if value and not record.normalize_gpu_name(value):
        c.fail(name, "blank: white space only (a run with no GPU lists none in run.gpus)")
        return
    found = unsafe_character(value)
    if found:
        c.fail(name, f"contains a control or bidirectional character ({found})")
        return
    odd = next((ch for ch in record.normalize_gpu_name(value) if not ch.isascii()), "")
    if odd:
        c.fail(name, f"must be ASCII, as NVML writes GPU names ({_describe(odd)})")


def _identity(c: _Checker, run: run_pb2.Run, now: datetime, may_publish: bool) -> None:
    if run.schema_version == 0:
        c.fail("run.schema_version", "missing")
    elif run.schema_version > SCHEMA_VERSION:
        c.fail(
            "run.schema_version",
            f"is {run.schema_version}, newer than this collector understands ({SCHEMA_VERSION})",
        )
    if not run.run_id:
        c.fail("run.run_id", "missing")
    else:
        try:
            canonical = str(uuid.UUID(run.run_id))
        except ValueError:
            canonical = ""
        if canonical != run.run_id:
            c.fail("run.run_id", f"not a UUID in canonical form, got {run.run_id[:SHORT]!r}")
    c.text("run.benchmark_version", run.benchmark_version, SHORT, required=True)
    c.text("run.label", run.label, NAME)
    _safe_name(c, "run.label", run.label)
    if run.published and not may_publish:
        c.fail("run.published", PUBLISHED_BY_OPERATORS)
    elif run.published and not run.source:
        c.fail("run.source", "missing: a published run names its source")
    c.text("run.source", run.source, LONG)
    _safe_name(c, "run.source", run.source)
    if not run.HasField("created_at"):
        c.fail("run.created_at", "missing")
    else:
        try:
            created = run.created_at.ToDatetime(tzinfo=timezone.utc)
        except (ValueError, OverflowError):
            c.fail("run.created_at", "not a valid time")
        else:
            if created > now + CLOCK_SKEW:
                c.fail("run.created_at", f"{created.isoformat()} is in the future")
            elif created < EARLIEST:
                c.fail("run.created_at", f"{created.isoformat()} is before {EARLIEST.year}")


def _host(c: _Checker, host: run_pb2.Host) -> None:
    c.text("run.host.cpu_model", host.cpu_model, NAME)
    _safe_name(c, "run.host.cpu_model", host.cpu_model)
    c.text("run.host.os", host.os, NAME)
    _safe_name(c, "run.host.os", host.os)
    c.text("run.host.agent_version", host.agent_version, SHORT)
    c.text("run.host.container_image", host.container_image, LONG)
    c.text("run.host.container_image_digest", host.container_image_digest, LONG)
    if host.hostname_hash and not _HEX64.match(host.hostname_hash):
        c.fail("run.host.hostname_hash", "must be a sha256 hex digest (64 lowercase hex digits)")


def _gpus(c: _Checker, run: run_pb2.Run) -> dict[int, int]:
    """Checks the GPU list; returns each listed GPU's memory by index."""
    c.count("run.gpus", run.gpus, MAX_GPUS)
    memory: dict[int, int] = {}
    for i, gpu in enumerate(run.gpus[:MAX_GPUS]):
        at = f"run.gpus[{i}]"
        c.text(f"{at}.name", gpu.name, NAME, required=True)
        _gpu_name(c, f"{at}.name", gpu.name)
        if gpu.memory_total_bytes == 0:
            c.fail(f"{at}.memory_total_bytes", "missing")
        elif gpu.memory_total_bytes > MAX_MEMORY_BYTES:
            c.fail(
                f"{at}.memory_total_bytes", f"{gpu.memory_total_bytes} bytes is more than a GPU has"
            )
        c.texts(at, gpu, GPU_TEXTS, SHORT)
        if gpu.uuid_hash and not _HEX64.match(gpu.uuid_hash):
            c.fail(f"{at}.uuid_hash", "must be a sha256 hex digest (64 lowercase hex digits)")
        if gpu.index in memory:
            c.fail(f"{at}.index", f"GPU index {gpu.index} is listed twice")
        memory[gpu.index] = gpu.memory_total_bytes
    return memory


def _software(c: _Checker, software: run_pb2.Software) -> None:
    c.choice("run.software.backend", software.backend, record.BACKENDS)
    c.texts("run.software", software, SOFTWARE_TEXTS, SHORT)


def _model(c: _Checker, cfg: run_pb2.Config) -> None:
    """A standard workload (B0, B3, B7, the built-in transformers) by name, or any other
    model by a name and the fingerprint of its architecture; the unit of its speed."""
    if cfg.unit:
        c.choice("run.config.unit", cfg.unit, models.UNITS)
    c.text("run.config.input_spec", cfg.input_spec, SHORT)
    fingerprint = cfg.model_fingerprint
    if fingerprint and not re.fullmatch(r"[0-9a-f]{64}", fingerprint):
        c.fail("run.config.model_fingerprint", "must be 64 hex digits (a SHA-256)")
    if models.is_efficientnet(cfg.model):
        if fingerprint:
            c.fail("run.config.model_fingerprint", f"{cfg.model} is told by its name: none")
        return
    if not cfg.model:
        c.fail("run.config.model", f"missing (one of {', '.join(models.STANDARD_MODELS)}, or "
                                   "a model's name with its fingerprint)")
    elif not fingerprint and not models.is_standard(cfg.model):
        c.fail("run.config.model", f"unknown {cfg.model[:SHORT]!r} (one of "
                                   f"{', '.join(models.STANDARD_MODELS)}, or another model "
                                   "with its run.config.model_fingerprint)")
    elif not models.is_record_name(cfg.model):
        c.fail("run.config.model", "a model's name is a letter, then letters, digits and "
                                   ". _ - (64 at most)")


def _config(c: _Checker, run: run_pb2.Run) -> None:
    cfg = run.config
    _model(c, cfg)
    c.choice("run.config.precision", cfg.precision, record.PRECISIONS)
    if cfg.pipeline:
        c.choice("run.config.pipeline", cfg.pipeline, record.PIPELINES)
    if cfg.pipeline_mode:
        c.choice("run.config.pipeline_mode", cfg.pipeline_mode, record.PIPELINE_MODES)
    if cfg.image_size < 1 and not (cfg.model_fingerprint and
                                   not cfg.input_spec.startswith("photos")):
        c.fail("run.config.image_size", f"must be 1..{MAX_IMAGE_SIZE}, got {cfg.image_size}")
    if cfg.batch_per_gpu < 1:
        c.fail("run.config.batch_per_gpu", f"must be >= 1, got {cfg.batch_per_gpu}")
    expected = cfg.batch_per_gpu * max(cfg.gpu_count, 1)
    if cfg.batch_per_gpu >= 1 and cfg.global_batch != expected:
        c.fail(
            "run.config.global_batch",
            f"must be batch_per_gpu x gpu_count = {expected}, got {cfg.global_batch}",
        )
    if cfg.gpu_count > len(run.gpus):
        c.fail(
            "run.config.gpu_count",
            f"is {cfg.gpu_count} but run.gpus lists {len(run.gpus)} GPU(s)",
        )
    if cfg.epochs < 1:
        c.fail("run.config.epochs", f"must be >= 1, got {cfg.epochs}")
    c.text("run.config.dataset_name", cfg.dataset_name, NAME)
    _safe_name(c, "run.config.dataset_name", cfg.dataset_name)
    c.text("run.config.dataset_fingerprint", cfg.dataset_fingerprint, SHORT)
    c.text("run.config.weights", cfg.weights, NAME)
    _safe_name(c, "run.config.weights", cfg.weights)
    if cfg.train_images > cfg.image_count > 0:
        c.fail(
            "run.config.train_images",
            f"{cfg.train_images} is more than the dataset's {cfg.image_count} images",
        )
    if cfg.batch_rule:
        c.choice("run.config.batch_rule", cfg.batch_rule, BATCH_RULES)


def _result(c: _Checker, run: run_pb2.Run, gpu_memory: dict[int, int]) -> None:
    res = run.result
    if res.status == run_pb2.RUN_STATUS_UNSPECIFIED:
        c.fail("run.result.status", "missing")
    c.text("run.result.error_message", res.error_message, MESSAGE)
    c.count("run.result.epochs", res.epochs, MAX_EPOCHS)
    numbers: set[int] = set()
    for i, epoch in enumerate(res.epochs[:MAX_EPOCHS]):
        at = f"run.result.epochs[{i}]"
        if epoch.number < 1:
            c.fail(f"{at}.number", f"must be >= 1, got {epoch.number}")
        elif epoch.number in numbers:
            c.fail(f"{at}.number", f"epoch {epoch.number} is listed twice")
        numbers.add(epoch.number)
        c.texts(at, epoch, ("energy_source", "max_power_source"), SHORT)
    if res.status == run_pb2.RUN_STATUS_OK:
        if res.measured_epoch == 0:
            c.fail("run.result.measured_epoch", "missing for an OK run")
        elif res.measured_epoch not in numbers:
            c.fail(
                "run.result.epochs",
                f"an OK run must include its measured epoch {res.measured_epoch}",
            )
        if res.epoch2_seconds == 0:  # below 0 the bounds pass says so
            c.fail("run.result.epoch2_seconds", "must be > 0 for an OK run")
    c.count("run.result.memory", res.memory, MAX_GPUS)
    for i, mem in enumerate(res.memory[:MAX_GPUS]):
        at = f"run.result.memory[{i}]"
        total = mem.memory_total_bytes or gpu_memory.get(mem.gpu_index, 0)
        if mem.gpu_index not in gpu_memory:
            c.fail(f"{at}.gpu_index", f"GPU {mem.gpu_index} is not in run.gpus")
        for name in ("allocator_peak_bytes", "process_peak_bytes", "device_peak_bytes"):
            value = getattr(mem, name)
            if total and value > total:
                c.fail(
                    f"{at}.{name}",
                    f"{value} bytes is more than the card's memory ({total} bytes)",
                )
    c.count("run.result.throttle_reasons", res.throttle_reasons, MAX_WARNINGS)
    for i, reason in enumerate(res.throttle_reasons[:MAX_WARNINGS]):
        c.text(f"run.result.throttle_reasons[{i}]", reason, SHORT)
    c.count("run.result.warnings", res.warnings, MAX_WARNINGS)
    for i, warning in enumerate(res.warnings[:MAX_WARNINGS]):
        c.text(f"run.result.warnings[{i}]", warning, LONG)
    c.count("run.result.memory_notes", res.memory_notes, MAX_WARNINGS)
    for i, note in enumerate(res.memory_notes[:MAX_WARNINGS]):
        c.text(f"run.result.memory_notes[{i}]", note, LONG)
    c.count("run.result.batch_trials", res.batch_trials, MAX_TRIALS)
    for i, trial in enumerate(res.batch_trials[:MAX_TRIALS]):
        at = f"run.result.batch_trials[{i}]"
        if trial.batch < 1:
            c.fail(f"{at}.batch", f"must be >= 1, got {trial.batch}")
        c.text(f"{at}.message", trial.message, LONG)
        if trial.kind:
            c.choice(f"{at}.kind", trial.kind, TRIAL_KINDS)


# The field types the bounds pass tells apart.
_FLOAT_TYPES = frozenset({FieldDescriptor.TYPE_DOUBLE, FieldDescriptor.TYPE_FLOAT})
_INTEGER_TYPES = frozenset({
    FieldDescriptor.TYPE_INT64, FieldDescriptor.TYPE_UINT64, FieldDescriptor.TYPE_INT32,
    FieldDescriptor.TYPE_FIXED64, FieldDescriptor.TYPE_FIXED32, FieldDescriptor.TYPE_UINT32,
    FieldDescriptor.TYPE_SFIXED32, FieldDescriptor.TYPE_SFIXED64, FieldDescriptor.TYPE_SINT32,
    FieldDescriptor.TYPE_SINT64,
})
_TEXT_TYPES = frozenset({FieldDescriptor.TYPE_STRING, FieldDescriptor.TYPE_BYTES})
# Messages checked as a whole by the rules above (created_at: a valid time, 2020 to now).
_CHECKED_WHOLE = frozenset({"google.protobuf.Timestamp"})


@dataclass
class Bounds:
    """The bounds of one message type's fields: numbers (name, least, most, integer),
    enums (name, known values), texts (name, most characters), messages (name, their
    bounds). Repeated fields are listed apart, so that the common case (a single
    value) costs one getattr and one comparison."""

    numbers: list[tuple[str, float, float, bool]] = field(default_factory=list)
    enums: list[tuple[str, frozenset[int]]] = field(default_factory=list)
    texts: list[tuple[str, int]] = field(default_factory=list)
    messages: list[tuple[str, Bounds]] = field(default_factory=list)
    repeated: Bounds | None = None


def _is_repeated(descriptor: FieldDescriptor) -> bool:
    # `label` is gone from newer protobuf releases, `is_repeated` new in them.
    if hasattr(descriptor, "is_repeated"):
        return bool(descriptor.is_repeated)
    return descriptor.label == FieldDescriptor.LABEL_REPEATED


def number_limits(descriptor: FieldDescriptor) -> tuple[float, float]:
    """A numeric field's (least, most), from NUMBER_LIMITS or DEFAULT_NUMBER_LIMITS."""
    name = descriptor.full_name.removeprefix(descriptor.file.package + ".")
    return NUMBER_LIMITS.get(name, DEFAULT_NUMBER_LIMITS)


def message_bounds(descriptor: Descriptor) -> Bounds:
    """The bounds of every field of a message type and of the messages in it."""
    single, repeated = Bounds(), Bounds()
    for f in descriptor.fields:
        bounds = repeated if _is_repeated(f) else single
        if f.type == FieldDescriptor.TYPE_MESSAGE:
            if f.message_type.full_name not in _CHECKED_WHOLE:
                bounds.messages.append((f.name, message_bounds(f.message_type)))
        elif f.type == FieldDescriptor.TYPE_ENUM:
            bounds.enums.append((f.name, frozenset(f.enum_type.values_by_number)))
        elif f.type in _INTEGER_TYPES or f.type in _FLOAT_TYPES:
            low, high = number_limits(f)
            bounds.numbers.append((f.name, low, high, f.type in _INTEGER_TYPES))
        elif f.type in _TEXT_TYPES:
            bounds.texts.append((f.name, MESSAGE))
        # bool: any value fits
    single.repeated = repeated
    return single


RUN_BOUNDS = message_bounds(run_pb2.Run.DESCRIPTOR)
# Items of a repeated field the bounds pass looks at: more are refused by count anyway.
_LISTED = max(MAX_GPUS, MAX_EPOCHS, MAX_TRIALS, MAX_WARNINGS)


def _bounds(c: _Checker, message: Message, bounds: Bounds, at: str, failed: set[str]) -> None:
    """Bound every field of `message` (path `at`); a field the rules above refused
    already (its path in `failed`) is not named twice. A path is only formatted for a
    field that fails (every submission passes here)."""
    for name, low, high, integer in bounds.numbers:
        value = getattr(message, name)
        if not low <= value <= high:  # NaN and the infinities fail it too
            _fail(c, failed, f"{at}.{name}", _number_problem(value, low, high, integer))
    for name, known in bounds.enums:
        value = getattr(message, name)
        if value not in known:
            _fail(c, failed, f"{at}.{name}", f"unknown value {value}")
    for name, limit in bounds.texts:
        value = getattr(message, name)
        if len(value) > limit:
            _fail(c, failed, f"{at}.{name}", f"longer than {limit} characters ({len(value)})")
    for name, inner in bounds.messages:
        _bounds(c, getattr(message, name), inner, f"{at}.{name}", failed)
    each = bounds.repeated
    if each is None:
        return
    for name, low, high, integer in each.numbers:
        for i, value in enumerate(getattr(message, name)[:_LISTED]):
            if not low <= value <= high:
                _fail(c, failed, f"{at}.{name}[{i}]", _number_problem(value, low, high, integer))
    for name, known in each.enums:
        for i, value in enumerate(getattr(message, name)[:_LISTED]):
            if value not in known:
                _fail(c, failed, f"{at}.{name}[{i}]", f"unknown value {value}")
    for name, limit in each.texts:
        for i, value in enumerate(getattr(message, name)[:_LISTED]):
            if len(value) > limit:
                _fail(c, failed, f"{at}.{name}[{i}]",
                      f"longer than {limit} characters ({len(value)})")
    for name, inner in each.messages:
        for i, value in enumerate(getattr(message, name)[:_LISTED]):
            _bounds(c, value, inner, f"{at}.{name}[{i}]", failed)


def _fail(c: _Checker, failed: set[str], name: str, problem: str) -> None:
    if name not in failed:
        c.fail(name, problem)


def _number_problem(value: float, low: float, high: float, integer: bool) -> str:
    if not integer:
        if math.isnan(value) or math.isinf(value):
            return f"must be a finite number, got {value}"
        return f"must be <= {high:g}, got {value:g}" if value > high else (
            f"must be >= {low:g}, got {value:g}")
    # Integers exactly: past a float's digits, :g would round them.
    return f"must be <= {high:.0f}, got {value}" if value > high else (
        f"must be >= {low:.0f}, got {value}")
