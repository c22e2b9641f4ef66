"""The run record: building, serialising and reading `gpubench.v1.Run` messages.

The protobuf message generated from protos/gpubench/v1/run.proto *is* the record;
this module is the one place that turns it into JSON (the agent's spool, the
CLI's --json) and back, and that refuses records from a newer schema than it
understands.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
import uuid
from collections.abc import Mapping
from datetime import datetime, timezone
from typing import Any

from google.protobuf import json_format

from gpubench.errors import InvalidRecord

# The protocol's tables are defined with the run settings (the workload reads them
# where the wire code is absent); the record's readers find them here too.
from gpubench.settings import (  # noqa: F401
    BACKENDS,
    BATCH_RULES,
    MODELS,
    NATIVE_IMAGE_SIZE,
    PIPELINES,
    PRECISIONS,
    RECORDED_MATH_MODES,
    RULE_GIVEN,
    RULE_LARGEST,
    RULE_QUICK,
    RULE_STEPS,
)
from gpubench.v1 import run_pb2
from gpubench.versions import BENCHMARK_VERSION, SCHEMA_VERSION

Run = run_pb2.Run
RunStatus = run_pb2.RunStatus
BatchChoice = run_pb2.BatchChoice

# The record's limits on text: the collector refuses a run over them
# (collector/gpubench/collector/validation.py) and the agent keeps its records within them.
MAX_MESSAGE_CHARS = 4000  # an error message
MAX_TEXT_CHARS = 1000  # a warning, an image reference
MAX_WARNINGS = 64
# How the input pipeline ran (Config.pipeline_mode): "cached" may have become
# "cached-on-device" (--data-on-device) or "streaming" (the images did not fit the host).
PIPELINE_MODES = ("cached", "cached-on-device", "streaming", "seed")
# The benchmark's synthetic data set (gpubench.agent.workload.synthetic): its fingerprint covers
# PNG bytes, which differ between Pillow builds, so it is known by its name.
SYNTHETIC_DATA = "synthetic-rps"

# The protocol's training set: 80% of the benchmark's 2136 images. The leaderboard ranks
# only runs of it; a smoke run with --limit-images trains on fewer; `gpubench estimate`
# scales epoch times to other data set sizes from it.
STANDARD_TRAIN_IMAGES = 1709


# The config options that change how the network is computed or fed (and so a run's
# speed), in the order `settings_label` names them, with their names there.
SETTINGS_OPTIONS = (
    ("batched_augmentation", "batched-augmentation"),
    ("fused_batchnorm", "fused-batchnorm"),
    ("channels_first", "channels-first"),
    ("data_on_device", "data-on-device"),
    ("jit_compile", "jit"),
    ("cuda_graphs", "cuda-graphs"),
)
# The torch backend's own kernels: named together as "kernels" when all three are on.
KERNELS = ("batched-augmentation", "fused-batchnorm", "channels-first")
KERAS = "keras"  # no option on: Keras's own code path (every TensorFlow run, older runs)


def settings_label(config: run_pb2.Config) -> str:
    """How a run computed and fed the network: the names of the options that were on,
    in SETTINGS_OPTIONS' order, joined with "+".

    All three KERNELS read as the single word "kernels", written first
    ("kernels+data-on-device"); no option on reads "keras". Runs of different labels
    are timed differently and are never compared as one (the collector's Compare
    `settings`, bench/scaling_table.py's rows).
    """
    used = [label for option, label in SETTINGS_OPTIONS if getattr(config, option)]
    if all(kernel in used for kernel in KERNELS):
        used = ["kernels"] + [label for label in used if label not in KERNELS]
    return "+".join(used) or KERAS


# How a record of schema 1, which has no Config.batch_rule, chose its batch.
_RULE_OF_CHOICE = {run_pb2.BATCH_CHOICE_GIVEN: "given", run_pb2.BATCH_CHOICE_SEARCHED: "largest"}


def batch_rule(config: run_pb2.Config) -> str:
    """How the run's batch was chosen: Config.batch_rule ("steps", "largest", "given",
    "quick"); for a record of schema 1, "given" or "largest" as its batch_choice says
    (--batch N or the largest-batch search); "" when neither says."""
    return config.batch_rule or _RULE_OF_CHOICE.get(config.batch_choice, "")


def _every_settings_label() -> frozenset[str]:
    labels = set()
    for mask in range(1 << len(SETTINGS_OPTIONS)):
        flags: dict[str, Any] = {  # Config's bool fields, each of SETTINGS_OPTIONS
            option: bool(mask >> i & 1) for i, (option, _) in enumerate(SETTINGS_OPTIONS)}
        config = run_pb2.Config(**flags)
        labels.add(settings_label(config))
    return frozenset(labels)


# Every label settings_label can give (what Compare's `settings` filter accepts).
SETTINGS_LABELS = _every_settings_label()
# The settings of the default run (torch on one GPU: its own kernels, CUDA graphs): what
# the leaderboard ranks unless asked for another label.
DEFAULT_SETTINGS = "kernels+cuda-graphs"
# Any other model trains on Keras's own code path: its leaderboard ranks those runs.
KERAS_SETTINGS = "keras"


def default_settings(model: str) -> str:
    """The settings label a model's leaderboard ranks unless asked: the default run's for
    the EfficientNets, Keras's own code path for any other model."""
    return DEFAULT_SETTINGS if model in MODELS else KERAS_SETTINGS
# How batch_per_gpu was chosen is Config.batch_rule, one of BATCH_RULES (gpubench.settings;
# empty in records of schema 1); the default run's rule (--batch steps) is the one the
# leaderboard ranks unless asked for another.
DEFAULT_BATCH_RULE = RULE_STEPS


def pipeline_as_run(config: run_pb2.Config) -> str:
    """How the input pipeline ran: Config.pipeline_mode, or for an older record the
    pipeline asked for ("cached" with data_on_device read as "cached-on-device")."""
    if config.pipeline_mode:
        return config.pipeline_mode
    if config.pipeline == "cached" and config.data_on_device:
        return "cached-on-device"
    return config.pipeline


def data_label(config: run_pb2.Config) -> str:
    """Which data a run trained on: "synthetic-rps" (the stand-in, by name), a folder's
    files as "sha256:" and the first 16 hex digits of their fingerprint, or for a record
    without a fingerprint (a published one) the data set's name."""
    if config.dataset_name == SYNTHETIC_DATA:
        return SYNTHETIC_DATA
    if config.dataset_fingerprint:
        return f"sha256:{config.dataset_fingerprint[:16]}"
    return config.dataset_name


def version_key(version: str) -> tuple[tuple[int, int | str], ...]:
    """A benchmark version's sort key: numbers in numeric order ("9" < "10" < "10.1"),
    other text after the numbers it follows, by its characters."""
    return tuple((1, int(part)) if part.isdigit() else (0, part)
                 for part in re.findall(r"\d+|[^\d.]+", version))


def normalize_gpu_name(name: str) -> str:
    """A GPU name as the collector files it: Unicode NFKC (full-width and other
    compatibility forms folded), runs of white space as one space, none at either end;
    "Tesla T4 " and "Ｔｅｓｌａ　Ｔ４" are "Tesla T4"."""
    return " ".join(unicodedata.normalize("NFKC", name).split())


def new_run(*, label: str = "") -> Run:
    """A fresh run record with a new run_id, the current versions and time."""
    run = Run(
        schema_version=SCHEMA_VERSION,
        run_id=str(uuid.uuid4()),
        benchmark_version=BENCHMARK_VERSION,
        label=label,
    )
    run.created_at.FromDatetime(datetime.now(timezone.utc))
    return run


def to_dict(run: Run) -> dict[str, Any]:
    """The record as plain JSON-ready data (proto field names, enums by name)."""
    return json_format.MessageToDict(run, preserving_proto_field_name=True)


def to_json(run: Run) -> str:
    """The record as indented JSON (the spool's format)."""
    return json_format.MessageToJson(run, preserving_proto_field_name=True, indent=1)


def from_dict(data: Mapping[str, Any], *, source: str = "record") -> Run:
    """Read a record; unknown fields and newer schemas are errors naming `source`."""
    version = data.get("schema_version", 0)
    if isinstance(version, int) and version > SCHEMA_VERSION:
        raise InvalidRecord(
            f"{source}: schema_version",
            f"is {version}, newer than this gpubench understands ({SCHEMA_VERSION}); "
            "upgrade gpubench",
        )
    try:
        return json_format.ParseDict(dict(data), Run())
    except json_format.ParseError as exc:
        raise InvalidRecord(source, str(exc)) from exc


def from_json(text: str, *, source: str = "record") -> Run:
    """Parse a JSON record written by `to_json`."""
    import json

    try:
        data = json.loads(text)
    except ValueError as exc:
        raise InvalidRecord(source, f"not valid JSON ({exc})") from exc
    if not isinstance(data, dict):
        raise InvalidRecord(source, "not a JSON object")
    return from_dict(data, source=source)


def content_sha256(run: Run) -> str:
    """A stable hash of the record's content (deterministic serialisation)."""
    return hashlib.sha256(run.SerializeToString(deterministic=True)).hexdigest()


def status_name(status: int) -> str:
    """'ok', 'out_of_memory', 'error', 'interrupted' (or 'unspecified')."""
    return RunStatus.Name(status).removeprefix("RUN_STATUS_").lower()


def batch_choice_name(choice: int) -> str:
    """'given', 'searched' (or 'unspecified'): how a run's batch was chosen."""
    return BatchChoice.Name(choice).removeprefix("BATCH_CHOICE_").lower()


def measured_epoch(run: Run) -> run_pb2.Epoch | None:
    """The run's measured epoch (Result.measured_epoch: epoch 2), or None where the record
    has none."""
    number = run.result.measured_epoch
    return next((e for e in run.result.epochs if e.number == number), None) if number else None


def step_images_per_second(run: Run) -> float:
    """Training images a second at the measured epoch's median step (its global batch over
    the median step time): the steady rate, without the first step's set-up or the last,
    partial batch that the epoch's images/s carries; 0 where the record has no step time."""
    step, batch = run.result.step_time_median_seconds, run.config.global_batch
    return batch / step if step > 0 and batch else 0.0


def gpu_config_name(gpu_name: str, gpu_count: int, memory_limit_bytes: int = 0) -> str:
    """How a GPU configuration is shown: '1x Tesla T4', '2x NVIDIA RTX 6000 Ada', 'CPU',
    and for a run with --memory-limit '1x NVIDIA H200 as 16 GiB'."""
    if gpu_count == 0 or not gpu_name:
        return "CPU"
    name = f"{gpu_count}x {gpu_name}"
    return f"{name} as {memory_size(memory_limit_bytes)}" if memory_limit_bytes else name


def memory_size(num_bytes: int) -> str:
    """'16 GiB', '7.5 GiB', '512 MiB': a memory limit as people write it."""
    gib = num_bytes / (1 << 30)
    if gib >= 1:
        return f"{gib:.0f} GiB" if gib == int(gib) else f"{gib:.1f} GiB"
    return f"{num_bytes / (1 << 20):.0f} MiB"
