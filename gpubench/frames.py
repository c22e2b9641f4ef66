"""Collector answers as pandas DataFrames: one row per run, comparison group or
leaderboard entry, in the user's words with units in the column names, and the same
as plain JSON-ready data for scripts. No rendering here (gpubench.tables draws them for
people), so the Python Client needs pandas but not rich.

Figures the collector could not measure arrive as 0 on the wire; here they become
NaN, so a missing energy reading is never a zero.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Iterable
from datetime import datetime, timezone
from typing import Any

import pandas as pd
from google.protobuf import json_format

from gpubench import comparison_key, record
from gpubench.figures import MISSING, is_missing  # noqa: F401 - frames' readers use them
from gpubench.v1 import collector_pb2

GIB = 1024**3

# One row per stored run; the flattened record in the user's words, units in the names.
FLAT_RUN_COLUMNS = [
    "run_id", "short_id", "created_at", "received_at", "submitter", "label", "status",
    "error_message", "outlier", "outlier_score", "flagged", "gpu_unrecognised", "flag_reasons",
    "published", "source", "benchmark_version", "schema_version",
    "gpu_config", "gpu_name", "gpu_count", "memory_total_gib", "driver_version",
    "cuda_version", "compute_capability", "power_limit_w",
    "model", "parameter_count", "input_spec", "image_size", "timed_batch_per_gpu",
    "timed_global_batch", "batch_choice",
    "batch_rule", "largest_batch_per_gpu", "largest_batch_capped", "precision",
    "epochs", "dataset_name", "data", "image_count", "train_images", "validation_images",
    "dataset_fingerprint", "settings", "pipeline", "pipeline_asked", "weights", "seed",
    "jit_compile", "cuda_graphs", "memory_limit_gib",
    "data_on_device", "batched_augmentation", "fused_batchnorm", "channels_first",
    "backend", "backend_version", "keras_version", "python_version",
    "cuda_runtime_version", "cudnn_version",
    "epoch1_s", "epoch2_s", "startup_s", "train_images_per_s", "step_images_per_s",
    "step_time_median_s",
    "step_time_cv", "peak_memory_gib", "peak_memory_share", "process_peak_memory_gib",
    "device_peak_memory_gib", "energy_per_epoch_j", "mean_power_w", "max_power_w",
    "max_temperature_c", "mean_sm_clock_mhz", "throttle_reasons", "warnings",
    "cpu_model", "cpu_cores", "ram_gib", "os", "container_image", "container_image_digest",
    "agent_version", "hostname_hash", "content_sha256",
]  # fmt: skip
# ... and any dimension of the comparison key not named above.
FLAT_RUN_COLUMNS += [n for n in comparison_key.NAMES if n not in FLAT_RUN_COLUMNS]

# The comparison key: the dimensions a comparison's runs share (CompareResponse), in the
# order its title names them. Every frame carries them as columns of these names, so a
# group-by over an export or a download never mixes unlike runs ("pipeline": as it ran).
SHARED = comparison_key.NAMES

# One row per GPU configuration of a comparison, fastest first; "differences": how the
# group ran where the compared groups differ (a comparison of unlike runs only).
COMPARE_COLUMNS = [
    "gpu_config", "gpu_name", "gpu_count", "memory_limit_gib", "runs", "submitters",
    "outliers_excluded", "flagged_included", "epoch2_median_s", "epoch2_min_s", "epoch2_max_s",
    "images_per_s_median",
    "timed_batch_per_gpu", "timed_global_batch", "largest_batch_per_gpu",
    "peak_memory_median_gib", "memory_total_gib", "peak_memory_share", "energy_per_epoch_j",
    "images_per_joule", "speedup", "is_baseline", "in_catalogue", *SHARED, "differences",
]  # fmt: skip

# One row per GPU configuration of the published runs beside a comparison.
PUBLISHED_COLUMNS = [
    "gpu_config", "gpu_name", "gpu_count", "runs", "epoch2_median_s", "images_per_s_median",
    "timed_batch_per_gpu", "largest_batch_per_gpu", "peak_memory_median_gib",
    "memory_total_gib", "peak_memory_share", "source", "differences",
]  # fmt: skip

# "in_catalogue": false for a card not yet in the collector's GPU catalogue (its runs are
# ranked apart, after the catalogued cards', rank 0).
LEADERBOARD_COLUMNS = [
    "rank", "in_catalogue", "gpu_config", "gpu_name", "gpu_count", "runs", "submitters",
    "one_source", "corroborated", "corroborated_by", "best_epoch2_s",
    "epoch2_median_s", "images_per_s_median", "timed_batch_per_gpu", "largest_batch_per_gpu",
    *SHARED,
]  # fmt: skip

# Cells a spreadsheet would read as a formula (OWASP's CSV injection): they start with
# one of these, and are written with a "'" before them.
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


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


# -- runs -------------------------------------------------------------------------------


def flat_run(stored: collector_pb2.StoredRun) -> dict[str, Any]:
    """A stored run flattened into one row (the keys of FLAT_RUN_COLUMNS).

    Peak memory is the largest per-GPU figure of the measured epoch; its share is of
    the memory the run had: its --memory-limit where it ran with one, else that GPU's.
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
    had_bytes = config.memory_limit_bytes or card_bytes

    return {
        # The comparison key as the collector files it (a record of schema 1 reads its
        # batch rule from its batch_choice): a group-by over an export keeps apart what
        # `gpubench compare` keeps apart.
        **comparison_key.values_of(run),
        "run_id": run.run_id,
        "short_id": stored.short_id or run.run_id,
        "created_at": _time(run, "created_at"),
        "received_at": _time(stored, "received_at"),
        "submitter": stored.submitter,
        "label": run.label,
        "status": record.status_name(result.status),
        "error_message": result.error_message,
        "outlier": stored.outlier,
        "outlier_score": float(stored.outlier_score),
        "flagged": stored.flagged,
        "gpu_unrecognised": stored.gpu_unrecognised,
        "flag_reasons": "; ".join(stored.flag_reasons),
        "published": run.published,
        "source": run.source,
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
        "parameter_count": config.parameter_count or None,
        "input_spec": config.input_spec,
        "timed_batch_per_gpu": config.batch_per_gpu,
        "timed_global_batch": config.global_batch,
        "batch_choice": record.batch_choice_name(config.batch_choice),
        "largest_batch_per_gpu": result.largest_batch_per_gpu,
        "largest_batch_capped": result.largest_batch_capped,
        "dataset_name": config.dataset_name,
        "image_count": config.image_count,
        "validation_images": config.validation_images,
        "dataset_fingerprint": config.dataset_fingerprint,
        "pipeline_asked": config.pipeline,
        "seed": config.seed,
        "jit_compile": config.jit_compile,
        "cuda_graphs": config.cuda_graphs,
        "memory_limit_gib": to_gib(config.memory_limit_bytes),
        "data_on_device": config.data_on_device,
        "batched_augmentation": config.batched_augmentation,
        "fused_batchnorm": config.fused_batchnorm,
        "channels_first": config.channels_first,
        "backend_version": software.backend_version,
        "keras_version": software.keras_version,
        "python_version": software.python_version,
        "cuda_runtime_version": software.cuda_runtime_version,
        "cudnn_version": software.cudnn_version,
        "epoch1_s": measured(epoch1.wall_seconds) if epoch1 else math.nan,
        "epoch2_s": measured(result.epoch2_seconds),
        "startup_s": measured(result.startup_seconds),
        "train_images_per_s": measured(result.train_images_per_second),
        "step_images_per_s": measured(record.step_images_per_second(run)),
        "step_time_median_s": measured(result.step_time_median_seconds),
        "step_time_cv": measured(result.step_time_cv),
        "peak_memory_gib": to_gib(peak_bytes),
        "peak_memory_share": peak_bytes / had_bytes if peak_bytes and had_bytes else math.nan,
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
    """Stored runs as a DataFrame, one row each (columns FLAT_RUN_COLUMNS, even when empty)."""
    rows = [flat_run(stored) for stored in stored_runs]
    frame = pd.DataFrame(rows, columns=FLAT_RUN_COLUMNS)
    for column in ("created_at", "received_at"):
        frame[column] = pd.to_datetime(frame[column], utc=True)
    return frame


# -- comparisons ------------------------------------------------------------------------


def _key_columns(source: Any, names: tuple[str, ...] = SHARED) -> dict[str, Any]:
    """The comparison key's columns as `source` (a response or an entry) has them."""
    return {name: getattr(source, name) for name in names}


_ENTRY_FIELDS = frozenset(collector_pb2.LeaderboardEntry.DESCRIPTOR.fields_by_name)
_BOARD_FIELDS = frozenset(collector_pb2.LeaderboardResponse.DESCRIPTOR.fields_by_name)


def entry_key(response: collector_pb2.LeaderboardResponse,
               entry: collector_pb2.LeaderboardEntry) -> dict[str, Any]:
    """A leaderboard entry's comparison key: what the entry says, else what every entry
    shares (the response's), else the standard benchmark's value (the model's native
    image size, the protocol's training images)."""
    found: dict[str, Any] = {}
    for name in SHARED:
        if name in _ENTRY_FIELDS:
            found[name] = getattr(entry, name)
        elif name in _BOARD_FIELDS:
            found[name] = getattr(response, name)
        else:
            found[name] = comparison_key.standard_value(name, response.model)
    return found


def _group_row(g: collector_pb2.CompareGroup) -> dict[str, Any]:
    """The figures every kind of group row has (compared and published)."""
    return {
        "gpu_config": record.gpu_config_name(g.gpu_name, g.gpu_count, g.memory_limit_bytes),
        "gpu_name": g.gpu_name,
        "gpu_count": g.gpu_count,
        "memory_limit_gib": to_gib(g.memory_limit_bytes),
        "runs": g.runs,
        "submitters": g.submitters,
        "outliers_excluded": g.outliers_excluded,
        "flagged_included": g.flagged_included,
        "epoch2_median_s": measured(g.epoch2_median_seconds),
        "epoch2_min_s": measured(g.epoch2_min_seconds),
        "epoch2_max_s": measured(g.epoch2_max_seconds),
        "images_per_s_median": measured(g.train_images_per_second_median),
        "timed_batch_per_gpu": g.max_batch_per_gpu,
        "timed_global_batch": g.max_global_batch,
        "largest_batch_per_gpu": g.largest_batch_per_gpu_max,
        "peak_memory_median_gib": to_gib(g.peak_memory_median_bytes),
        "memory_total_gib": to_gib(g.memory_total_bytes),
        "peak_memory_share": measured(g.peak_memory_share),
        "energy_per_epoch_j": measured(g.energy_per_epoch_median_joules),
        "images_per_joule": measured(g.images_per_joule),
        "speedup": measured(g.speedup),
        "is_baseline": g.is_baseline,
        "in_catalogue": True,
        "source": g.source,
        "differences": "; ".join(g.differences),
    }


def compare_frame(response: collector_pb2.CompareResponse) -> pd.DataFrame:
    """A comparison as a DataFrame: one row per GPU configuration (COMPARE_COLUMNS),
    in the collector's order (fastest first), each with the comparison key ("mixed",
    or 0 for the numeric ones, where unlike runs were compared: "differences" then
    says how each group ran).

    `attrs` holds only plain, JSON-ready values (a Parquet file keeps them): "model",
    "baseline", "warnings", what the runs share (SHARED: "benchmark_version",
    "backend", ..., "epochs") and "published", the published runs beside the
    comparison as `published_frame` has them, one dict each, and "uncatalogued", the
    groups of cards not yet in the collector's GPU catalogue, shown apart
    (`uncatalogued_of`; `with_uncatalogued` for a download of both).
    """
    shared = _key_columns(response)
    rows = [{**_group_row(g), **shared} for g in response.groups]
    frame = pd.DataFrame(rows, columns=COMPARE_COLUMNS)
    frame.attrs.update(
        model=response.model,
        baseline=response.baseline,
        warnings=list(response.warnings),
        # The dimensions the collector says the groups differ in (a count of 0 is a
        # value too: a language model's image size).
        mixed=[m.dimension for m in response.mixed],
        # Plain records, not a frame: pandas compares attrs when frames are combined.
        published=frame_records(published_frame(response)),
        uncatalogued=frame_records(pd.DataFrame(
            [{**_group_row(g), **shared, "in_catalogue": False} for g in response.uncatalogued],
            columns=COMPARE_COLUMNS)),
        **shared,
    )
    return frame


def uncatalogued_of(frame: pd.DataFrame) -> pd.DataFrame:
    """The groups of cards not yet in the catalogue a comparison frame carries in its
    attrs, as a frame of its columns (COMPARE_COLUMNS; "in_catalogue" false)."""
    return pd.DataFrame(list(frame.attrs.get("uncatalogued", [])), columns=COMPARE_COLUMNS)


def with_uncatalogued(frame: pd.DataFrame) -> pd.DataFrame:
    """A comparison frame and, after its rows, those of the cards not yet in the
    catalogue ("in_catalogue" false): what a download of the comparison holds."""
    apart = uncatalogued_of(frame)
    if apart.empty:
        return frame
    both = pd.concat([frame, apart], ignore_index=True) if not frame.empty else apart
    both.attrs.update(frame.attrs)
    return both


def published_frame(response: collector_pb2.CompareResponse) -> pd.DataFrame:
    """The published runs beside a comparison (PUBLISHED_COLUMNS), one row per group:
    transcribed figures, with their source and how they were made unlike the compared
    runs ("differences", joined with "; ")."""
    return pd.DataFrame([_group_row(g) for g in response.published], columns=PUBLISHED_COLUMNS)


def published_of(frame: pd.DataFrame) -> pd.DataFrame:
    """The published runs a comparison frame carries in its attrs, as a frame again."""
    return pd.DataFrame(list(frame.attrs.get("published", [])), columns=PUBLISHED_COLUMNS)


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
        "uncatalogued": list(attrs.get("uncatalogued", [])),
    }


def leaderboard_frame(response: collector_pb2.LeaderboardResponse) -> pd.DataFrame:
    """A leaderboard as a DataFrame, best first (LEADERBOARD_COLUMNS): every entry with
    the comparison key (the leaderboard's selection: the model's native image size and
    the protocol's training images); then the entries of cards not yet in the GPU
    catalogue, ranked apart ("in_catalogue" false, rank 0)."""
    rows = [
        {
            "rank": e.rank,
            "in_catalogue": catalogued,
            "gpu_config": record.gpu_config_name(e.gpu_name, e.gpu_count),
            "gpu_name": e.gpu_name,
            "gpu_count": e.gpu_count,
            "runs": e.runs,
            "submitters": e.submitters,
            "one_source": e.submitters <= 1 and not e.corroborated,
            "corroborated": e.corroborated,
            "corroborated_by": e.corroborated_by,
            "best_epoch2_s": measured(e.best_epoch2_seconds),
            "epoch2_median_s": measured(e.epoch2_median_seconds),
            "images_per_s_median": measured(e.train_images_per_second_median),
            "timed_batch_per_gpu": e.max_batch_per_gpu,
            "largest_batch_per_gpu": e.largest_batch_per_gpu_max,
            **entry_key(response, e),
        }
        for entries, catalogued in ((response.entries, True), (response.uncatalogued, False))
        for e in entries
    ]
    frame = pd.DataFrame(rows, columns=LEADERBOARD_COLUMNS)
    frame.attrs.update(model=response.model, benchmark_version=response.benchmark_version,
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


def _neutralised(value: Any) -> Any:
    if isinstance(value, str) and value.startswith(FORMULA_STARTS):
        return "'" + value
    return value


def csv_text(frame: pd.DataFrame) -> str:
    """The frame as CSV text for spreadsheets: text cells that a spreadsheet would run as
    a formula (starting with = + - @, a tab or a carriage return) get a "'" first."""
    safe = frame.copy()
    for column in safe.columns:
        if safe[column].dtype == object or pd.api.types.is_string_dtype(safe[column]):
            safe[column] = safe[column].map(_neutralised)
    # Text quoted (a carriage return inside a cell stays inside it), numbers bare.
    return safe.to_csv(index=False, quoting=csv.QUOTE_NONNUMERIC)


def parquet_bytes(frame: pd.DataFrame) -> bytes:
    """The frame as a Parquet file's bytes (needs pyarrow), its attrs in the metadata."""
    import io

    buffer = io.BytesIO()
    frame.to_parquet(buffer, index=False)
    return buffer.getvalue()


def stored_run_dict(stored: collector_pb2.StoredRun) -> dict[str, Any]:
    """A stored run as JSON-ready data (proto field names, enums by name)."""
    return json_format.MessageToDict(stored, preserving_proto_field_name=True)
