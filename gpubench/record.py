"""The run record: building, serialising and reading `gpubench.v1.Run` messages.

The protobuf message generated from protos/gpubench/v1/run.proto *is* the record;
this module is the one place that turns it into JSON (the agent's spool, the
CLI's --json) and back, and that refuses records from a newer schema than it
understands.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Mapping
from datetime import datetime, timezone
from typing import Any

from google.protobuf import json_format

from gpubench import BENCHMARK_VERSION, SCHEMA_VERSION
from gpubench.errors import InvalidRecord
from gpubench.v1 import run_pb2

Run = run_pb2.Run
RunStatus = run_pb2.RunStatus
BatchChoice = run_pb2.BatchChoice

MODELS = ("B0", "B3", "B7")
PRECISIONS = ("float32", "mixed_float16", "mixed_bfloat16")
BACKENDS = ("tensorflow", "torch", "jax")
PIPELINES = ("cached", "seed")

# The protocol's image size for each model (EfficientNet's native resolution).
NATIVE_IMAGE_SIZE = {"B0": 224, "B3": 300, "B7": 600}


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


def _every_settings_label() -> frozenset[str]:
    labels = set()
    for mask in range(1 << len(SETTINGS_OPTIONS)):
        config = run_pb2.Config(
            **{option: bool(mask >> i & 1) for i, (option, _) in enumerate(SETTINGS_OPTIONS)}
        )
        labels.add(settings_label(config))
    return frozenset(labels)


# Every label settings_label can give (what Compare's `settings` filter accepts).
SETTINGS_LABELS = _every_settings_label()


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


def gpu_config_name(gpu_name: str, gpu_count: int) -> str:
    """How a GPU configuration is shown: '1x Tesla T4', '2x NVIDIA RTX 6000 Ada', 'CPU'."""
    if gpu_count == 0 or not gpu_name:
        return "CPU"
    return f"{gpu_count}x {gpu_name}"
