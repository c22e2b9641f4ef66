"""Checks a submitted run record, field by field, before the collector stores it.

Every problem is collected (not just the first) and named by its field path, e.g.
"run.config.batch_per_gpu: must be >= 1, got 0". `validate` raises one
`InvalidRun` carrying them all; its message shows the first few.
"""

from __future__ import annotations

import math
import re
import uuid
from collections.abc import Iterable, Sized
from datetime import datetime, timedelta, timezone

from gpubench import SCHEMA_VERSION, record
from gpubench.errors import InvalidRecord
from gpubench.v1 import run_pb2

# How many problems the error message lists before "(and N more)".
SHOWN_PROBLEMS = 5
# How far in the future created_at may be (clocks of GPU hosts drift; time zones are not an excuse).
CLOCK_SKEW = timedelta(hours=1)
# Nothing was benchmarked before the project existed.
EARLIEST = datetime(2020, 1, 1, tzinfo=timezone.utc)

SHORT = 64  # versions, hashes, modes
NAME = 200  # GPU and CPU names, OS, labels, dataset names
LONG = 1000  # image references, warnings
MESSAGE = 4000  # error messages

MAX_GPUS = 64
MAX_EPOCHS = 1000
MAX_TRIALS = 64
MAX_WARNINGS = 64
MAX_IMAGE_SIZE = 4096
# No GPU has a terabyte of memory yet; a figure above this is a unit mistake.
MAX_MEMORY_BYTES = 2**40
MAX_SECONDS = 30 * 24 * 3600.0

_HEX64 = re.compile(r"^[0-9a-f]{64}$")

RUN_STATUSES = frozenset(run_pb2.RunStatus.values())
# Fields checked alike, by message.
GPU_TEXTS = ("driver_version", "cuda_version", "compute_capability", "ecc_mode",
             "persistence_mode")
SOFTWARE_TEXTS = ("backend_version", "keras_version", "python_version", "cuda_runtime_version",
                  "cudnn_version")
# Durations: from 0 to MAX_SECONDS. startup_seconds (epoch 1 minus epoch 2) is held to
# that too, so a run whose first epoch was the faster one is refused.
RESULT_SECONDS = ("epoch2_seconds", "startup_seconds", "step_time_median_seconds",
                  "idle_wait_seconds")
RESULT_FIGURES = ("train_images_per_second", "step_time_cv", "energy_per_epoch_joules",
                  "mean_power_watts", "max_power_watts", "max_temperature_c",
                  "mean_sm_clock_mhz", "idle_temperature_c")
EPOCH_SECONDS = ("wall_seconds", "train_seconds", "validation_seconds")
EPOCH_FIGURES = ("energy_joules", "mean_power_watts", "max_power_watts", "max_temperature_c",
                 "mean_sm_clock_mhz", "loss", "val_loss")


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

    def number(
        self, name: str, value: float, *, low: float = 0.0, high: float = math.inf,
        positive: bool = False,
    ) -> None:
        if -math.inf < value < math.inf and low <= value <= high and (value > 0 or not positive):
            return  # the usual case, in one comparison chain (NaN fails it)
        if math.isnan(value) or math.isinf(value):
            self.fail(name, f"must be a finite number, got {value}")
        elif positive and value <= 0:
            self.fail(name, f"must be > 0, got {value:g}")
        elif value < low:
            self.fail(name, f"must be >= {low:g}, got {value:g}")
        elif value > high:
            self.fail(name, f"must be <= {high:g}, got {value:g}")

    def numbers(
        self, at: str, message: object, names: tuple[str, ...], *, high: float = math.inf
    ) -> None:
        """`number` (>= 0, at most `high`) for each of `message`'s fields `names`; the path
        `at.name` is only formatted for a field that fails."""
        for name in names:
            value = getattr(message, name)
            if not 0.0 <= value <= high or value == math.inf:  # NaN fails the first test
                self.number(f"{at}.{name}", value, high=high)

    def count(self, name: str, items: Sized, limit: int) -> None:
        n = len(items)
        if n > limit:
            self.fail(name, f"more than {limit} entries ({n})")


def problems(run: run_pb2.Run, *, now: datetime | None = None) -> list[tuple[str, str]]:
    """Every problem of the record, as (field path, what is wrong); empty when valid."""
    now = now or datetime.now(timezone.utc)
    c = _Checker()
    _identity(c, run, now)
    _host(c, run.host)
    gpu_memory = _gpus(c, run)
    _software(c, run.software)
    _config(c, run)
    _result(c, run, gpu_memory)
    return c.problems


def validate(run: run_pb2.Run, *, now: datetime | None = None) -> None:
    """Raise InvalidRun naming every bad field; return quietly for a valid record."""
    found = problems(run, now=now)
    if found:
        raise InvalidRun(found)


def _identity(c: _Checker, run: run_pb2.Run, now: datetime) -> None:
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
    c.text("run.host.os", host.os, NAME)
    c.text("run.host.agent_version", host.agent_version, SHORT)
    c.text("run.host.container_image", host.container_image, LONG)
    c.text("run.host.container_image_digest", host.container_image_digest, LONG)
    if host.hostname_hash and not _HEX64.match(host.hostname_hash):
        c.fail("run.host.hostname_hash", "must be a sha256 hex digest (64 lowercase hex digits)")
    if host.cpu_cores > 100_000:
        c.fail("run.host.cpu_cores", f"must be <= 100000, got {host.cpu_cores}")


def _gpus(c: _Checker, run: run_pb2.Run) -> dict[int, int]:
    """Checks the GPU list; returns each listed GPU's memory by index."""
    c.count("run.gpus", run.gpus, MAX_GPUS)
    memory: dict[int, int] = {}
    for i, gpu in enumerate(run.gpus[:MAX_GPUS]):
        at = f"run.gpus[{i}]"
        c.text(f"{at}.name", gpu.name, NAME, required=True)
        if gpu.memory_total_bytes == 0:
            c.fail(f"{at}.memory_total_bytes", "missing")
        elif gpu.memory_total_bytes > MAX_MEMORY_BYTES:
            c.fail(
                f"{at}.memory_total_bytes", f"{gpu.memory_total_bytes} bytes is more than a GPU has"
            )
        c.texts(at, gpu, GPU_TEXTS, SHORT)
        if gpu.uuid_hash and not _HEX64.match(gpu.uuid_hash):
            c.fail(f"{at}.uuid_hash", "must be a sha256 hex digest (64 lowercase hex digits)")
        c.number(f"{at}.power_limit_watts", gpu.power_limit_watts, high=10_000)
        if gpu.index in memory:
            c.fail(f"{at}.index", f"GPU index {gpu.index} is listed twice")
        memory[gpu.index] = gpu.memory_total_bytes
    return memory


def _software(c: _Checker, software: run_pb2.Software) -> None:
    c.choice("run.software.backend", software.backend, record.BACKENDS)
    c.texts("run.software", software, SOFTWARE_TEXTS, SHORT)


def _config(c: _Checker, run: run_pb2.Run) -> None:
    cfg = run.config
    c.choice("run.config.model", cfg.model, record.MODELS)
    c.choice("run.config.precision", cfg.precision, record.PRECISIONS)
    if cfg.pipeline:
        c.choice("run.config.pipeline", cfg.pipeline, record.PIPELINES)
    if not 1 <= cfg.image_size <= MAX_IMAGE_SIZE:
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
    c.text("run.config.dataset_fingerprint", cfg.dataset_fingerprint, SHORT)
    c.text("run.config.weights", cfg.weights, NAME)
    c.number("run.config.validation_split", cfg.validation_split, high=0.99)
    if cfg.train_images > cfg.image_count > 0:
        c.fail(
            "run.config.train_images",
            f"{cfg.train_images} is more than the dataset's {cfg.image_count} images",
        )


def _result(c: _Checker, run: run_pb2.Run, gpu_memory: dict[int, int]) -> None:
    res = run.result
    if res.status == run_pb2.RUN_STATUS_UNSPECIFIED:
        c.fail("run.result.status", "missing")
    elif res.status not in RUN_STATUSES:
        c.fail("run.result.status", f"unknown value {res.status}")
    c.text("run.result.error_message", res.error_message, MESSAGE)
    c.numbers("run.result", res, RESULT_SECONDS, high=MAX_SECONDS)
    c.numbers("run.result", res, RESULT_FIGURES)
    c.count("run.result.epochs", res.epochs, MAX_EPOCHS)
    numbers: set[int] = set()
    for i, epoch in enumerate(res.epochs[:MAX_EPOCHS]):
        at = f"run.result.epochs[{i}]"
        if epoch.number < 1:
            c.fail(f"{at}.number", f"must be >= 1, got {epoch.number}")
        elif epoch.number in numbers:
            c.fail(f"{at}.number", f"epoch {epoch.number} is listed twice")
        numbers.add(epoch.number)
        c.numbers(at, epoch, EPOCH_SECONDS, high=MAX_SECONDS)
        c.numbers(at, epoch, EPOCH_FIGURES)
        c.numbers(at, epoch, ("mean_gpu_utilization",), high=100)
        c.numbers(at, epoch, ("accuracy", "val_accuracy"), high=1)
        c.texts(at, epoch, ("energy_source",), SHORT)
    if res.status == run_pb2.RUN_STATUS_OK:
        if res.measured_epoch == 0:
            c.fail("run.result.measured_epoch", "missing for an OK run")
        elif res.measured_epoch not in numbers:
            c.fail(
                "run.result.epochs",
                f"an OK run must include its measured epoch {res.measured_epoch}",
            )
        if res.epoch2_seconds <= 0 and math.isfinite(res.epoch2_seconds):
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
    c.count("run.result.batch_trials", res.batch_trials, MAX_TRIALS)
    for i, trial in enumerate(res.batch_trials[:MAX_TRIALS]):
        at = f"run.result.batch_trials[{i}]"
        if trial.batch < 1:
            c.fail(f"{at}.batch", f"must be >= 1, got {trial.batch}")
        c.number(f"{at}.seconds", trial.seconds, high=MAX_SECONDS)
        c.text(f"{at}.message", trial.message, LONG)
