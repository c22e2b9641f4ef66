"""Collector answers as tables: pandas DataFrames with units in the column names, and
the same figures formatted for people (rich tables, "17.0x", "12.3 kJ").

Figures the collector could not measure arrive as 0 on the wire; here they become
NaN in DataFrames and "-" in tables, so a missing energy reading is never shown as
zero joules.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from datetime import datetime, timezone
from typing import Any

import pandas as pd
from google.protobuf import json_format
from rich import box
from rich._ratio import ratio_distribute
from rich.console import Console, ConsoleOptions
from rich.table import Table
from rich.text import Text

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


def _measured(value: float) -> float:
    """A figure from the wire, with 0 (not measured) as NaN."""
    return float(value) if value else math.nan


def _gib(num_bytes: int) -> float:
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
        "memory_total_gib": _gib(gpu.memory_total_bytes) if gpu else math.nan,
        "driver_version": gpu.driver_version if gpu else "",
        "cuda_version": gpu.cuda_version if gpu else "",
        "compute_capability": gpu.compute_capability if gpu else "",
        "power_limit_w": _measured(gpu.power_limit_watts) if gpu else math.nan,
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
        "memory_limit_gib": _gib(config.memory_limit_bytes),
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
        "epoch1_s": _measured(epoch1.wall_seconds) if epoch1 else math.nan,
        "epoch2_s": _measured(result.epoch2_seconds),
        "startup_s": _measured(result.startup_seconds),
        "train_images_per_s": _measured(result.train_images_per_second),
        "step_time_median_s": _measured(result.step_time_median_seconds),
        "step_time_cv": _measured(result.step_time_cv),
        "peak_memory_gib": _gib(peak_bytes),
        "peak_memory_share": peak_bytes / card_bytes if peak_bytes and card_bytes else math.nan,
        "process_peak_memory_gib": _gib(
            max((m.process_peak_bytes for m in result.memory), default=0)
        ),
        "device_peak_memory_gib": _gib(
            max((m.device_peak_bytes for m in result.memory), default=0)
        ),
        "energy_per_epoch_j": _measured(result.energy_per_epoch_joules),
        "mean_power_w": _measured(result.mean_power_watts),
        "max_power_w": _measured(result.max_power_watts),
        "max_temperature_c": _measured(result.max_temperature_c),
        "mean_sm_clock_mhz": _measured(result.mean_sm_clock_mhz),
        "throttle_reasons": "; ".join(result.throttle_reasons),
        "warnings": "; ".join(result.warnings),
        "cpu_model": host.cpu_model,
        "cpu_cores": host.cpu_cores,
        "ram_gib": _gib(host.ram_bytes),
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
            "memory_limit_gib": _gib(g.memory_limit_bytes),
            "runs": g.runs,
            "outliers_excluded": g.outliers_excluded,
            "flagged_included": g.flagged_included,
            "epoch2_median_s": _measured(g.epoch2_median_seconds),
            "epoch2_min_s": _measured(g.epoch2_min_seconds),
            "epoch2_max_s": _measured(g.epoch2_max_seconds),
            "images_per_s_median": _measured(g.train_images_per_second_median),
            "max_batch_per_gpu": g.max_batch_per_gpu,
            "max_global_batch": g.max_global_batch,
            "peak_memory_median_gib": _gib(g.peak_memory_median_bytes),
            "memory_total_gib": _gib(g.memory_total_bytes),
            "peak_memory_share": _measured(g.peak_memory_share),
            "energy_per_epoch_j": _measured(g.energy_per_epoch_median_joules),
            "images_per_joule": _measured(g.images_per_joule),
            "speedup": _measured(g.speedup),
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
            "epoch2_median_s": _measured(g.epoch2_median_seconds),
            "images_per_s_median": _measured(g.train_images_per_second_median),
            "max_batch_per_gpu": g.max_batch_per_gpu,
            "peak_memory_median_gib": _gib(g.peak_memory_median_bytes),
            "memory_total_gib": _gib(g.memory_total_bytes),
            "peak_memory_share": _measured(g.peak_memory_share),
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
            "best_epoch2_s": _measured(e.best_epoch2_seconds),
            "epoch2_median_s": _measured(e.epoch2_median_seconds),
            "images_per_s_median": _measured(e.train_images_per_second_median),
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


# -- figures for people -------------------------------------------------------------------


def three_digits(value: float) -> str:
    """About three significant digits without exponent: 1,234 / 339 / 17.0 / 5.03 / 0.052."""
    if is_missing(value):
        return MISSING
    size = abs(value)
    if size >= 100:
        return f"{value:,.0f}"
    if size >= 10:
        return f"{value:.1f}"
    if size >= 1:
        return f"{value:.2f}"
    return f"{value:.3f}"


def format_seconds(seconds: float) -> str:
    """A duration in seconds, without the unit (it is in the column heading)."""
    return three_digits(seconds)


def format_epoch(median: float, low: float, high: float, runs: int) -> str:
    """'17.0 [16.8-17.3]': the median and, when runs differ, their range."""
    text = format_seconds(median)
    if runs > 1 and not (is_missing(low) or is_missing(high)) and low != high:
        text += f" [{format_seconds(low)}-{format_seconds(high)}]"
    return text


def format_memory(gib: float, share: float = math.nan) -> str:
    """'12.3 GiB (77%)': peak memory and its share of the card."""
    if is_missing(gib):
        return MISSING
    text = f"{gib:.2f} GiB" if gib < 1 else f"{gib:.1f} GiB"
    if not is_missing(share):
        text += f" ({share * 100:.0f}%)"
    return text


def format_energy(joules: float) -> str:
    """'850 J', '12.3 kJ', '1.20 MJ'."""
    if is_missing(joules):
        return MISSING
    if joules < 1_000:
        return f"{joules:.0f} J"
    if joules < 1_000_000:
        return f"{three_digits(joules / 1_000)} kJ"
    return f"{three_digits(joules / 1_000_000)} MJ"


def format_speedup(speedup: float) -> str:
    """'17.0x', '1.00x', '0.52x'."""
    if is_missing(speedup):
        return MISSING
    if speedup < 1:
        return f"{speedup:.2f}x"
    return f"{three_digits(speedup)}x"


def format_batch(per_gpu: int, global_batch: int, gpu_count: int) -> str:
    """'512' on one GPU, '1024 (2x512)' on several."""
    if not per_gpu:
        return MISSING
    if gpu_count > 1:
        return f"{global_batch or per_gpu * gpu_count} ({gpu_count}x{per_gpu})"
    return str(per_gpu)


def format_time(stamp: Any) -> str:
    """'2025-06-30 14:05' (UTC)."""
    if is_missing(stamp):
        return MISSING
    return pd.Timestamp(stamp).tz_convert("UTC").strftime("%Y-%m-%d %H:%M")


def _int(value: Any) -> int:
    return 0 if is_missing(value) else int(value)


# -- rich tables --------------------------------------------------------------------------


# The narrowest a column that folds its words is made: words up to this long stay whole.
FOLDED = 12


class NarrowTable(Table):
    """A table that wraps its columns at spaces rather than cut them: where the columns
    do not fit side by side at their natural widths, each keeps at least its longest word
    and the room left goes to those that want more, in proportion. (rich's own layout
    narrows the widest columns first, down to cutting their words with "…".)"""

    def _calculate_column_widths(self, console: Console, options: ConsoleOptions) -> list[int]:
        ranges = [self._measure_column(console, options, column) for column in self.columns]
        natural = [r.maximum or 1 for r in ranges]
        # A column that folds its words (long names, ids) may be narrower than its longest.
        least = [min(r.minimum, FOLDED) if column.overflow == "fold" else r.minimum or 1
                 for r, column in zip(ranges, self.columns, strict=True)]
        # Too narrow still: columns that fold give up more, the last first, down to 4.
        excess = sum(least) - options.max_width
        for index in reversed(range(len(least))):
            if excess > 0 and self.columns[index].overflow == "fold":
                cut = min(excess, max(least[index] - 4, 0))
                least[index] -= cut
                excess -= cut
        if sum(natural) <= options.max_width or excess > 0:
            return super()._calculate_column_widths(console, options)
        wants = [n - m for n, m in zip(natural, least, strict=True)]
        extra = ratio_distribute(options.max_width - sum(least), wants)
        return [m + e for m, e in zip(least, extra, strict=True)]


def narrow_table(title: str | None = None, caption: str | None = None,
                 show_header: bool = True) -> Table:
    """A table for 80 columns: a rule under the header instead of a box, one space
    between columns; title and legend (caption) left-aligned, wrapped, never cut."""
    # The box's own separator is the one space between columns: no padding, no edges.
    return NarrowTable(title=title, caption=caption, box=box.SIMPLE_HEAD, padding=0,
                 show_edge=False, title_justify="left", caption_justify="left",
                 show_header=show_header)


# Precisions as a narrow column shows them (explained by PRECISION_LEGEND).
SHORT_PRECISION = {"float32": "fp32", "mixed_bfloat16": "mixed bf16",
                   "mixed_float16": "mixed fp16"}
PRECISION_LEGEND = "fp32: float32; mixed bf16/fp16: mixed_bfloat16/mixed_float16"


def short_precision(precision: str) -> str:
    """'fp32', 'mixed bf16', 'mixed fp16' (anything else as it is)."""
    return SHORT_PRECISION.get(precision, precision)


# The shared dimensions' names in a title or legend.
DIMENSION_WORDS = {"benchmark_version": "benchmark version", "backend": "backend",
                   "precision": "precision", "image_size": "image size",
                   "train_images": "training images", "settings": "settings",
                   "batch_rule": "batch rule", "pipeline": "pipeline", "weights": "weights",
                   "data": "data", "epochs": "epochs"}
# Dimensions counted in integers: a comparison of unlike runs reads 0 where they differ.
_NUMERIC = ("image_size", "train_images", "epochs")


def mixed_dimensions(frame: pd.DataFrame) -> list[str]:
    """The dimensions in which a comparison's runs differ (--allow-mixed), in SHARED's
    order; none for a like-for-like comparison."""
    if frame.empty:
        return []
    attrs = frame.attrs
    return [name for name in SHARED
            if (name in _NUMERIC and name in attrs and not attrs[name])
            or attrs.get(name) == "mixed"]


def compare_title(frame: pd.DataFrame) -> str:
    """'B7 · tensorflow · float32 · 600 px · 1709 training images · settings keras ·
    batch steps · pipeline cached · weights none · data synthetic-rps · 2 epochs ·
    benchmark 1': what the compared runs share (what differs is left out; the table's
    legend names it)."""
    attrs = frame.attrs
    parts = [attrs.get("model", "")]
    shared = {k: v for k, v in attrs.items() if k in SHARED and v != "mixed"}
    for key in ("backend", "precision"):
        if shared.get(key):
            parts.append(str(shared[key]))
    if shared.get("image_size"):
        parts.append(f"{shared['image_size']} px")
    if shared.get("train_images"):
        parts.append(f"{shared['train_images']} training images")
    for key, word in (("settings", "settings"), ("batch_rule", "batch"),
                      ("pipeline", "pipeline"), ("weights", "weights"), ("data", "data")):
        if shared.get(key):
            parts.append(f"{word} {shared[key]}")
    if shared.get("epochs"):
        parts.append(f"{shared['epochs']} epochs")
    if shared.get("benchmark_version"):
        parts.append(f"benchmark {shared['benchmark_version']}")
    return " · ".join(p for p in parts if p)


# The mark of a row compared with runs unlike it (--allow-mixed).
UNLIKE = "*"


def compare_table(frame: pd.DataFrame) -> Table:
    """A comparison for the terminal (80 columns): figures with units, the baseline
    marked; where unlike runs are shown together (--allow-mixed), each speedup marked
    and the legend saying in what they differ."""
    baseline = frame.attrs.get("baseline", "")
    mixed = mixed_dimensions(frame)
    legend = ["img/s: training images a second; img/J: training images a joule"]
    if baseline:
        legend.append(f"speedup: epoch-2 median against {baseline}")
    if mixed:
        legend.append(f"{UNLIKE} unlike runs shown together (--allow-mixed): they differ in "
                      f"{', '.join(DIMENSION_WORDS[m] for m in mixed)}; not like for like")
    title = compare_title(frame) + (" · UNLIKE RUNS" if mixed else "")
    table = narrow_table(title, "\n".join(legend))
    table.add_column("GPU config")
    table.add_column("runs", justify="right")
    table.add_column(Text("epoch 2 (s) median [min-max]"), justify="right")
    table.add_column("img/s", justify="right")
    table.add_column("max batch", justify="right")
    table.add_column("peak memory (% of card)", justify="right")
    table.add_column("energy per epoch", justify="right")
    table.add_column("img/J", justify="right")
    table.add_column("speedup", justify="right")
    for row in frame.to_dict("records"):
        config = row["gpu_config"] + ("  (baseline)" if row["is_baseline"] else "")
        runs = str(_int(row["runs"]))
        if _int(row["outliers_excluded"]):
            runs += f" (+{_int(row['outliers_excluded'])} outlier)"
        if _int(row["flagged_included"]):
            runs += f" ({_int(row['flagged_included'])} flagged)"
        table.add_row(
            Text(config, style="bold" if row["is_baseline"] else ""),
            runs,
            format_epoch(
                row["epoch2_median_s"], row["epoch2_min_s"], row["epoch2_max_s"], _int(row["runs"])
            ),
            three_digits(row["images_per_s_median"]),
            format_batch(
                _int(row["max_batch_per_gpu"]),
                _int(row["max_global_batch"]),
                _int(row["gpu_count"]),
            ),
            format_memory(row["peak_memory_median_gib"], row["peak_memory_share"]),
            format_energy(row["energy_per_epoch_j"]),
            three_digits(row["images_per_joule"]),
            format_speedup(row["speedup"]) + (UNLIKE if mixed else ""),
        )
    return table


def published_table(published: pd.DataFrame, *, beside: str = "") -> Table:
    """Published runs for the terminal, apart from measured ones: their figures, how they
    differ from the runs they stand beside, and, in the legend, where they come from."""
    sources = [f"{row['gpu_config']}: {row['source']}"
               for row in published.to_dict("records") if row["source"]]
    table = narrow_table(
        "published figures: transcribed, not measured by gpubench"
        + (f"; not like for like with {beside}" if beside else ""),
        "\n".join(dict.fromkeys(sources)) or None,
    )
    table.add_column("GPU config")
    table.add_column("runs", justify="right")
    table.add_column("epoch 2 (s)", justify="right")
    table.add_column("batch", justify="right")
    table.add_column("peak memory (% of card)", justify="right")
    table.add_column("unlike the runs above", overflow="fold")
    for row in published.to_dict("records"):
        table.add_row(
            Text(row["gpu_config"]),
            str(_int(row["runs"])),
            format_seconds(row["epoch2_median_s"]),
            str(_int(row["max_batch_per_gpu"]) or MISSING),
            format_memory(row["peak_memory_median_gib"], row["peak_memory_share"]),
            Text(row["differences"] or MISSING),
        )
    return table


# The fewest characters of a run id a table shows (`gpubench runs show` takes them).
SHORT_ID = 8
# Backends as a narrow column shows them.
SHORT_BACKEND = {"tensorflow": "tf"}


def cost_table(costed: pd.DataFrame) -> Table:
    """What the cards buy: speed, price, images/s per 1,000 USD and images per joule
    (a comparison with `prices.cost_frame`'s columns)."""
    table = Table(title="what the cards buy (measured runs, medians)", title_justify="left")
    for heading in ("GPU configuration", "img/s", "USD", "img/s per 1k USD", "img/J"):
        table.add_column(heading, justify="left" if heading.startswith("GPU") else "right")
    for row in costed.itertuples():
        usd = row.usd
        table.add_row(row.gpu_config, three_digits(row.images_per_s_median),
                      f"{usd:,.0f}" if not is_missing(usd) else MISSING,
                      three_digits(row.images_per_s_per_kusd),
                      three_digits(row.images_per_joule))
    return table


def short_ids(run_ids: Iterable[str], least: int = SHORT_ID) -> dict[str, str]:
    """Each run id shortened to its shortest prefix of at least `least` characters that
    no other of `run_ids` starts with (as git shortens commits)."""
    ids = list(dict.fromkeys(run_ids))
    short = {}
    for run_id in ids:
        size = least
        while size < len(run_id) and any(o != run_id and o.startswith(run_id[:size])
                                         for o in ids):
            size += 1
        short[run_id] = run_id[:size]
    return short


def runs_table(frame: pd.DataFrame, *, title: str | None = None,
               legend: bool = True) -> Table:
    """Stored runs for the terminal (80 columns), newest first, one row each; run ids
    shortened to a unique prefix, which `gpubench runs show` and `runs delete` accept.
    `legend`: explain the abbreviations below (once, under the last of several tables)."""
    table = narrow_table(
        title,
        "run: the run id's first characters (runs show takes them); tf: tensorflow; "
        f"{PRECISION_LEGEND}; img/s: training images a second; peak memory: GiB (% of card)"
        if legend else None,
    )
    table.add_column("run", overflow="fold")
    table.add_column("GPU config")
    table.add_column("model")
    table.add_column("backend precision")
    table.add_column("batch", justify="right")
    table.add_column("epoch 2 (s)", justify="right")
    table.add_column("img/s", justify="right")
    table.add_column("peak memory", justify="right")
    table.add_column("status")
    table.add_column("submitter", overflow="fold")
    ids = short_ids(str(i) for i in frame["run_id"])
    for row in frame.to_dict("records"):
        status = row["status"] + (" (outlier)" if row["outlier"] else "")
        status += " (flagged)" if row["flagged"] else ""
        peak = row["peak_memory_gib"]
        backend = SHORT_BACKEND.get(row["backend"], row["backend"])
        table.add_row(
            Text(ids[str(row["run_id"])]),
            Text(row["gpu_config"]),
            row["model"],
            Text(f"{backend} {short_precision(row['precision'])}".strip()),
            format_batch(
                _int(row["batch_per_gpu"]), _int(row["global_batch"]), _int(row["gpu_count"])
            ),
            format_seconds(row["epoch2_s"]),
            three_digits(row["train_images_per_s"]),
            MISSING if is_missing(peak) else (
                f"{peak:.1f}" + ("" if is_missing(row["peak_memory_share"])
                                 else f" ({row['peak_memory_share'] * 100:.0f}%)")),
            status,
            Text(row["submitter"]),
        )
    return table


def leaderboard_title(frame: pd.DataFrame) -> str:
    """'B0 leaderboard · settings kernels+cuda-graphs · batch steps · benchmark 1'."""
    attrs = frame.attrs
    parts = [f"{attrs.get('model', '')} leaderboard"]
    for key, word in (("settings", "settings"), ("batch_rule", "batch"),
                      ("benchmark_version", "benchmark")):
        if attrs.get(key):
            parts.append(f"{word} {attrs[key]}")
    return " · ".join(parts)


# The leaderboard's entries differ in these where the filters leave them free; one column
# "as run" says how, when they do.
AS_RUN = ("pipeline", "weights", "data", "epochs")


def leaderboard_table(frame: pd.DataFrame) -> Table:
    """A leaderboard for the terminal (80 columns): ranked by the median epoch-2 time
    (the legend says so), the best single run beside it."""
    varies = any(frame[c].nunique() > 1 for c in AS_RUN) if not frame.empty else False
    table = narrow_table(
        leaderboard_title(frame),
        "ranked by the median epoch-2 time of each configuration's runs; best: its fastest "
        f"run; img/s: training images a second; {PRECISION_LEGEND}",
    )
    table.add_column("#", justify="right")
    table.add_column("GPU config")
    table.add_column("runs", justify="right")
    table.add_column("best epoch 2 (s)", justify="right")
    table.add_column("median epoch 2 (s)", justify="right")
    table.add_column("img/s", justify="right")
    table.add_column("max batch per GPU", justify="right")
    table.add_column("backend")
    table.add_column("precision")
    if varies:
        table.add_column("as run", overflow="fold")
    for row in frame.to_dict("records"):
        cells = [
            str(_int(row["rank"])),
            Text(row["gpu_config"]),
            str(_int(row["runs"])),
            format_seconds(row["best_epoch2_s"]),
            format_seconds(row["epoch2_median_s"]),
            three_digits(row["images_per_s_median"]),
            str(_int(row["max_batch_per_gpu"]) or MISSING),
            row["backend"],
            Text(short_precision(row["precision"])),
        ]
        if varies:
            cells.append(Text(f"{row['pipeline']} · weights {row['weights']} · {row['data']} · "
                              f"{_int(row['epochs'])} epochs"))
        table.add_row(*cells)
    return table


def run_tables(stored: collector_pb2.StoredRun) -> list[Table]:
    """One stored run for the terminal: a summary, its epochs and its batch trials."""
    row = run_row(stored)
    summary = narrow_table(f"run {row['run_id']}", show_header=False)
    summary.add_column("field", style="bold")
    summary.add_column("value", overflow="fold")

    def add(name: str, value: Any) -> None:
        if is_missing(value) or value in ("", MISSING):
            return
        summary.add_row(name, Text(str(value)))

    add("status", row["status"] + (" (outlier)" if row["outlier"] else "")
        + (" (flagged)" if row["flagged"] else ""))
    add("flagged because", row["flag_reasons"])
    add("published", row["source"] if row["published"] else "")
    add("error", row["error_message"])
    add("label", row["label"])
    add("submitter", row["submitter"])
    add("created (UTC)", format_time(row["created_at"]))
    add("received (UTC)", format_time(row["received_at"]))
    add("GPU config", row["gpu_config"])
    add("GPU memory", format_memory(row["memory_total_gib"]))
    add("driver / CUDA", " / ".join(v for v in (row["driver_version"], row["cuda_version"]) if v))
    add("model", f"{row['model']} at {row['image_size']} px" if row["image_size"] else row["model"])
    add(
        "batch",
        format_batch(row["batch_per_gpu"], row["global_batch"], row["gpu_count"])
        + (f" ({row['batch_choice']})" if row["batch_choice"] != "unspecified" else ""),
    )
    add("precision", row["precision"])
    add("pipeline", row["pipeline_mode"])
    add("weights", row["weights"])
    add("backend", " ".join(v for v in (row["backend"], row["backend_version"]) if v))
    add("keras", row["keras_version"])
    add("benchmark version", row["benchmark_version"])
    add("data", f"{row['dataset_name']}: {row['train_images']} train, "
        f"{row['validation_images']} validation images")  # fmt: skip
    add("epoch 1 (s)", format_seconds(row["epoch1_s"]))
    add("epoch 2 (s)", format_seconds(row["epoch2_s"]))
    add("img/s", three_digits(row["train_images_per_s"]))
    add("peak memory", format_memory(row["peak_memory_gib"], row["peak_memory_share"]))
    add("energy/epoch", format_energy(row["energy_per_epoch_j"]))
    add("mean power (W)", three_digits(row["mean_power_w"]))
    add("max temperature (°C)", three_digits(row["max_temperature_c"]))
    add("throttle reasons", row["throttle_reasons"])
    add("warnings", row["warnings"])
    add("container image", row["container_image"])
    tables = [summary]

    result = stored.run.result
    if result.epochs:
        epochs = narrow_table("epochs")
        for name in ("epoch", "wall (s)", "train (s)", "energy", "mean power (W)",
                     "max °C", "accuracy", "val accuracy"):  # fmt: skip
            epochs.add_column(name, justify="right")
        for e in result.epochs:
            epochs.add_row(
                str(e.number),
                format_seconds(_measured(e.wall_seconds)),
                format_seconds(_measured(e.train_seconds)),
                format_energy(_measured(e.energy_joules)),
                three_digits(_measured(e.mean_power_watts)),
                three_digits(_measured(e.max_temperature_c)),
                f"{e.accuracy:.3f}",
                f"{e.val_accuracy:.3f}",
            )
        tables.append(epochs)
    if result.batch_trials:
        trials = narrow_table("largest-batch search")
        for name in ("batch", "fits", "peak memory", "seconds", "why not"):
            trials.add_column(name, justify="right" if name != "why not" else "left",
                              overflow="fold")
        for t in result.batch_trials:
            trials.add_row(
                str(t.batch),
                "yes" if t.fits else "no",
                format_memory(_gib(t.peak_memory_bytes)),
                format_seconds(_measured(t.seconds)),
                Text(t.message),
            )
        tables.append(trials)
    return tables
