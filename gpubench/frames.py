"""Collector answers as pandas DataFrames: one row per run, comparison group or
leaderboard entry, in the user's words with units in the column names, and the same
as plain JSON-ready data for scripts. No rendering here (gpubench.tables draws them for
people), so the Python Client needs pandas but not rich.

Figures the collector could not measure arrive as 0 on the wire; here they become
NaN, so a missing energy reading is never a zero.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from datetime import datetime, timezone
from typing import Any

import pandas as pd
from google.protobuf import json_format

from gpubench import record
from gpubench.v1 import collector_pb2

GIB = 1024**3
MISSING = "-"

# One row per stored run; the flattened record in the user's words, units in the names.
RUN_COLUMNS = [
    "run_id", "created_at", "received_at", "submitter", "label", "status", "error_message",
    "outlier", "outlier_score", "flagged", "flag_reasons", "published", "source",
    "benchmark_version", "schema_version",
    "gpu_config", "gpu_name", "gpu_count", "memory_total_gib", "driver_version",
    "cuda_version", "compute_capability", "power_limit_w",
    "model", "image_size", "batch_per_gpu", "global_batch", "batch_choice", "precision",
    "epochs", "dataset_name", "image_count", "train_images", "validation_images",
    "dataset_fingerprint", "pipeline", "pipeline_mode", "weights", "seed", "jit_compile",
    "cuda_graphs", "memory_limit_gib",
    "data_on_device", "batched_augmentation", "fused_batchnorm", "channels_first",
    "backend", "backend_version", "keras_version", "python_version",
    "cuda_runtime_version", "cudnn_version",
    "epoch1_s", "epoch2_s", "startup_s", "train_images_per_s", "step_time_median_s",
    "step_time_cv", "peak_memory_gib", "peak_memory_share", "process_peak_memory_gib",
    "device_peak_memory_gib", "energy_per_epoch_j", "mean_power_w", "max_power_w",
    "max_temperature_c", "mean_sm_clock_mhz", "throttle_reasons", "warnings",
    "cpu_model", "cpu_cores", "ram_gib", "os", "container_image", "container_image_digest",
    "agent_version", "hostname_hash", "content_sha256",
]  # fmt: skip

# One row per GPU configuration of a comparison, fastest first.
COMPARE_COLUMNS = [
    "gpu_config", "gpu_name", "gpu_count", "memory_limit_gib", "runs", "outliers_excluded",
    "flagged_included", "epoch2_median_s", "epoch2_min_s", "epoch2_max_s", "images_per_s_median",
    "max_batch_per_gpu", "max_global_batch", "peak_memory_median_gib", "memory_total_gib",
    "peak_memory_share", "energy_per_epoch_j", "images_per_joule", "speedup", "is_baseline",
]  # fmt: skip

# One row per GPU configuration of the published runs beside a comparison.
PUBLISHED_COLUMNS = [
    "gpu_config", "gpu_name", "gpu_count", "runs", "epoch2_median_s", "images_per_s_median",
    "max_batch_per_gpu", "peak_memory_median_gib", "memory_total_gib", "peak_memory_share",
    "source", "differences",
]  # fmt: skip

# The dimensions a comparison's runs share (CompareResponse), in the order its title
# names them.
SHARED = ("benchmark_version", "backend", "precision", "image_size", "train_images",
          "settings", "batch_rule", "pipeline", "weights", "data", "epochs")

LEADERBOARD_COLUMNS = [
    "rank", "gpu_config", "gpu_name", "gpu_count", "runs", "best_epoch2_s",
    "epoch2_median_s", "images_per_s_median", "max_batch_per_gpu", "backend", "precision",
    "settings", "batch_rule", "pipeline", "weights", "data", "epochs",
]  # fmt: skip


# -- values -----------------------------------------------------------------------------


def measured(value: float) -> float:
    """A figure from the wire, with 0 (not measured) as NaN."""
    return float(value) if value else math.nan


def to_gib(num_bytes: int) -> float:
    return num_bytes / GIB if num_bytes else math.nan


def _time(message: Any, field: str) -> pd.Timestamp:
    if not message.HasField(field):
        return pd.NaT
    return pd.Timestamp(getattr(message, field).ToDatetime(tzinfo=timezone.utc))


def is_missing(value: Any) -> bool:
    """None, NaN or NaT."""
    if value is None or value is pd.NaT:
        return True
    try:
        return bool(pd.isna(value))
    except (TypeError, ValueError):
        return False


# -- runs -------------------------------------------------------------------------------


def run_row(stored: collector_pb2.StoredRun) -> dict[str, Any]:
    """A stored run flattened into one row (the keys of RUN_COLUMNS).

    Peak memory is the largest per-GPU figure of the measured epoch; its share is of
    that GPU's memory.
    """
    run = stored.run
    config, result, software, host = run.config, run.result, run.software, run.host
    gpu = run.gpus[0] if run.gpus else None
    gpu_names = sorted({record.normalize_gpu_name(g.name) for g in run.gpus})
    gpu_name = " + ".join(gpu_names)
    gpu_count = config.gpu_count or len(run.gpus)

    epochs = {e.number: e for e in result.epochs}
    epoch1 = epochs.get(1)

    peak = max(result.memory, key=lambda m: m.allocator_peak_bytes, default=None)
    peak_bytes = peak.allocator_peak_bytes if peak else 0
    card_bytes = (peak.memory_total_bytes if peak else 0) or (gpu.memory_total_bytes if gpu else 0)

    return {
        "run_id": run.run_id,
        "created_at": _time(run, "created_at"),
        "received_at": _time(stored, "received_at"),
        "submitter": stored.submitter,
        "label": run.label,
        "status": record.status_name(result.status),
        "error_message": result.error_message,
        "outlier": stored.outlier,
        "outlier_score": float(stored.outlier_score),
        "flagged": stored.flagged,
        "flag_reasons": "; ".join(stored.flag_reasons),
        "published": run.published,
        "source": run.source,
        "benchmark_version": run.benchmark_version,
        "schema_version": run.schema_version,
        "gpu_config": record.gpu_config_name(gpu_name, gpu_count, config.memory_limit_bytes),
        "gpu_name": gpu_name,
        "gpu_count": gpu_count,
        "memory_total_gib": to_gib(gpu.memory_total_bytes) if gpu else math.nan,
        "driver_version": gpu.driver_version if gpu else "",
        "cuda_version": gpu.cuda_version if gpu else "",
        "compute_capability": gpu.compute_capability if gpu else "",
        "power_limit_w": measured(gpu.power_limit_watts) if gpu else math.nan,
        "model": config.model,
        "image_size": config.image_size,
        "batch_per_gpu": config.batch_per_gpu,
        "global_batch": config.global_batch,
        "batch_choice": record.BatchChoice.Name(config.batch_choice)
        .removeprefix("BATCH_CHOICE_")
        .lower(),
        "precision": config.precision,
        "epochs": config.epochs,
        "dataset_name": config.dataset_name,
        "image_count": config.image_count,
        "train_images": config.train_images,
        "validation_images": config.validation_images,
        "dataset_fingerprint": config.dataset_fingerprint,
        "pipeline": config.pipeline,
        "pipeline_mode": record.pipeline_as_run(config),
        "weights": config.weights,
        "seed": config.seed,
        "jit_compile": config.jit_compile,
        "cuda_graphs": config.cuda_graphs,
        "memory_limit_gib": to_gib(config.memory_limit_bytes),
        "data_on_device": config.data_on_device,
        "batched_augmentation": config.batched_augmentation,
        "fused_batchnorm": config.fused_batchnorm,
        "channels_first": config.channels_first,
        "backend": software.backend,
        "backend_version": software.backend_version,
        "keras_version": software.keras_version,
        "python_version": software.python_version,
        "cuda_runtime_version": software.cuda_runtime_version,
        "cudnn_version": software.cudnn_version,
        "epoch1_s": measured(epoch1.wall_seconds) if epoch1 else math.nan,
        "epoch2_s": measured(result.epoch2_seconds),
        "startup_s": measured(result.startup_seconds),
        "train_images_per_s": measured(result.train_images_per_second),
        "step_time_median_s": measured(result.step_time_median_seconds),
        "step_time_cv": measured(result.step_time_cv),
        "peak_memory_gib": to_gib(peak_bytes),
        "peak_memory_share": peak_bytes / card_bytes if peak_bytes and card_bytes else math.nan,
        "process_peak_memory_gib": to_gib(
            max((m.process_peak_bytes for m in result.memory), default=0)
        ),
        "device_peak_memory_gib": to_gib(
            max((m.device_peak_bytes for m in result.memory), default=0)
        ),
        "energy_per_epoch_j": measured(result.energy_per_epoch_joules),
        "mean_power_w": measured(result.mean_power_watts),
        "max_power_w": measured(result.max_power_watts),
        "max_temperature_c": measured(result.max_temperature_c),
        "mean_sm_clock_mhz": measured(result.mean_sm_clock_mhz),
        "throttle_reasons": "; ".join(result.throttle_reasons),
        "warnings": "; ".join(result.warnings),
        "cpu_model": host.cpu_model,
        "cpu_cores": host.cpu_cores,
        "ram_gib": to_gib(host.ram_bytes),
        "os": host.os,
        "container_image": host.container_image,
        "container_image_digest": host.container_image_digest,
        "agent_version": host.agent_version,
        "hostname_hash": host.hostname_hash,
        "content_sha256": stored.content_sha256,
    }


def runs_frame(stored_runs: Iterable[collector_pb2.StoredRun]) -> pd.DataFrame:
    """Stored runs as a DataFrame, one row each (columns RUN_COLUMNS, even when empty)."""
    rows = [run_row(stored) for stored in stored_runs]
    frame = pd.DataFrame(rows, columns=RUN_COLUMNS)
    for column in ("created_at", "received_at"):
        frame[column] = pd.to_datetime(frame[column], utc=True)
    return frame


# -- comparisons ------------------------------------------------------------------------


def compare_frame(response: collector_pb2.CompareResponse) -> pd.DataFrame:
    """A comparison as a DataFrame: one row per GPU configuration (COMPARE_COLUMNS),
    in the collector's order (fastest first).

    `attrs` keeps the raw response ("response") and, as plain values, "model",
    "baseline", "warnings", "benchmark_version", "backend", "precision", "image_size",
    "train_images" (training images per epoch; 0 where the runs differ), "settings"
    (how the network was computed and fed: "keras", "kernels", ...).
    """
    rows = [
        {
            "gpu_config": record.gpu_config_name(g.gpu_name, g.gpu_count, g.memory_limit_bytes),
            "gpu_name": g.gpu_name,
            "gpu_count": g.gpu_count,
            "memory_limit_gib": to_gib(g.memory_limit_bytes),
            "runs": g.runs,
            "outliers_excluded": g.outliers_excluded,
            "flagged_included": g.flagged_included,
            "epoch2_median_s": measured(g.epoch2_median_seconds),
            "epoch2_min_s": measured(g.epoch2_min_seconds),
            "epoch2_max_s": measured(g.epoch2_max_seconds),
            "images_per_s_median": measured(g.train_images_per_second_median),
            "max_batch_per_gpu": g.max_batch_per_gpu,
            "max_global_batch": g.max_global_batch,
            "peak_memory_median_gib": to_gib(g.peak_memory_median_bytes),
            "memory_total_gib": to_gib(g.memory_total_bytes),
            "peak_memory_share": measured(g.peak_memory_share),
            "energy_per_epoch_j": measured(g.energy_per_epoch_median_joules),
            "images_per_joule": measured(g.images_per_joule),
            "speedup": measured(g.speedup),
            "is_baseline": g.is_baseline,
        }
        for g in response.groups
    ]
    frame = pd.DataFrame(rows, columns=COMPARE_COLUMNS)
    frame.attrs.update(
        response=response,
        model=response.model,
        baseline=response.baseline,
        warnings=list(response.warnings),
        # Plain records, not a frame: pandas compares attrs when frames are combined.
        published=frame_records(published_frame(response)),
        **{name: getattr(response, name) for name in SHARED},
    )
    return frame


def published_frame(response: collector_pb2.CompareResponse) -> pd.DataFrame:
    """The published runs beside a comparison (PUBLISHED_COLUMNS), one row per group:
    transcribed figures, with their source and how they were made unlike the compared
    runs ("differences", joined with "; ")."""
    rows = [
        {
            "gpu_config": record.gpu_config_name(g.gpu_name, g.gpu_count, g.memory_limit_bytes),
            "gpu_name": g.gpu_name,
            "gpu_count": g.gpu_count,
            "runs": g.runs,
            "epoch2_median_s": measured(g.epoch2_median_seconds),
            "images_per_s_median": measured(g.train_images_per_second_median),
            "max_batch_per_gpu": g.max_batch_per_gpu,
            "peak_memory_median_gib": to_gib(g.peak_memory_median_bytes),
            "memory_total_gib": to_gib(g.memory_total_bytes),
            "peak_memory_share": measured(g.peak_memory_share),
            "source": g.source,
            "differences": "; ".join(g.differences),
        }
        for g in response.published
    ]
    return pd.DataFrame(rows, columns=PUBLISHED_COLUMNS)


def compare_document(frame: pd.DataFrame) -> dict[str, Any]:
    """A comparison as one JSON-ready document: what the runs share, the baseline,
    the warnings and one entry per GPU configuration."""
    attrs = frame.attrs
    return {
        "model": attrs.get("model", ""),
        "baseline": attrs.get("baseline", ""),
        **{name: attrs.get(name, "") for name in SHARED},
        "warnings": list(attrs.get("warnings", [])),
        "groups": frame_records(frame),
        "published": list(attrs.get("published", [])),
    }


def leaderboard_frame(response: collector_pb2.LeaderboardResponse) -> pd.DataFrame:
    """A leaderboard as a DataFrame, best first (LEADERBOARD_COLUMNS)."""
    rows = [
        {
            "rank": e.rank,
            "gpu_config": record.gpu_config_name(e.gpu_name, e.gpu_count),
            "gpu_name": e.gpu_name,
            "gpu_count": e.gpu_count,
            "runs": e.runs,
            "best_epoch2_s": measured(e.best_epoch2_seconds),
            "epoch2_median_s": measured(e.epoch2_median_seconds),
            "images_per_s_median": measured(e.train_images_per_second_median),
            "max_batch_per_gpu": e.max_batch_per_gpu,
            "backend": e.backend,
            "precision": e.precision,
            "settings": e.settings,
            "batch_rule": e.batch_rule,
            "pipeline": e.pipeline,
            "weights": e.weights,
            "data": e.data,
            "epochs": e.epochs,
        }
        for e in response.entries
    ]
    frame = pd.DataFrame(rows, columns=LEADERBOARD_COLUMNS)
    frame.attrs.update(response=response, model=response.model,
                       benchmark_version=response.benchmark_version,
                       settings=response.settings, batch_rule=response.batch_rule)
    return frame


# -- plain data for scripts ---------------------------------------------------------------


def _plain(value: Any) -> Any:
    if is_missing(value):
        return None
    if isinstance(value, (pd.Timestamp, datetime)):
        return value.isoformat()
    if hasattr(value, "item"):  # numpy scalars
        return value.item()
    return value


def frame_records(frame: pd.DataFrame) -> list[dict[str, Any]]:
    """The rows as JSON-ready dicts: NaN/NaT as None, times as ISO 8601 strings."""
    columns = list(frame.columns)
    return [
        {column: _plain(value) for column, value in zip(columns, row, strict=True)}
        for row in frame.itertuples(index=False, name=None)
    ]


def stored_run_dict(stored: collector_pb2.StoredRun) -> dict[str, Any]:
    """A stored run as JSON-ready data (proto field names, enums by name)."""
    return json_format.MessageToDict(stored, preserving_proto_field_name=True)
