"""Runs aggregated per GPU configuration: Compare's figures (from the per-group figures
the flusher keeps, or afresh from the runs), published runs, and the leaderboard.

Like every read (collector.visible), these see every run acknowledged before they
began, outliers flagged as the next rescore will flag them, and never wait for a write.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from gpubench.collector import ceilings, compare, corroboration, outliers
from gpubench.collector.compare import GroupFigures
from gpubench.collector.queries import equal_where_set
from gpubench.collector.visible import Snapshot, Snapshots

from gpubench import record
from gpubench.v1 import run_pb2

# The columns of a GPU configuration, as SQL, and the dimensions Compare keeps apart
# (compare.DIMENSIONS' columns), in GroupFigures' order.
_CONFIG = ", ".join(outliers.CONFIG_COLUMNS)
KEY_COLUMNS = ("benchmark_version", "backend", "precision", "image_size", "train_images",
               "settings", "batch_rule", "pipeline", "weights", "data", "epochs")


@dataclass(frozen=True)
class CompareQuery:
    """Which runs a comparison covers; empty/zero fields match everything."""

    model: str
    precision: str = ""
    backend: str = ""
    image_size: int = 0
    train_images: int = 0  # training images per epoch
    settings: str = ""  # record.settings_label: "keras", "kernels+data-on-device", ...
    batch_rule: str = ""  # how the batch was chosen: "steps", "largest", "given", "quick"
    pipeline: str = ""  # as it ran: "cached", "cached-on-device", "streaming", "seed"
    weights: str = ""
    data: str = ""  # record.data_label: "synthetic-rps", "sha256:..."
    epochs: int = 0
    benchmark_version: str = ""
    gpu_names: tuple[str, ...] = ()  # exact, case-insensitive, normalised
    include_outliers: bool = False
    include_flagged: bool = False
    allow_mixed: bool = False


@dataclass(frozen=True)
class LeaderboardQuery:
    """Which runs a leaderboard ranks: one model, one settings label and one batch rule
    (the default run's unless asked), optionally one precision and backend."""

    model: str
    precision: str = ""
    backend: str = ""
    settings: str = record.DEFAULT_SETTINGS
    batch_rule: str = record.DEFAULT_BATCH_RULE
    benchmark_version: str = ""  # empty: the newest (numerically) with such runs
    include_flagged: bool = False
    corroborated_only: bool = False
    limit: int = 20


@dataclass(frozen=True)
class LeaderboardRow:
    """One GPU configuration on a model's leaderboard."""

    gpu_name: str
    gpu_count: int
    backend: str
    precision: str
    settings: str
    pipeline: str
    weights: str
    data: str
    epochs: int
    batch_rule: str
    runs: int
    best_epoch2_seconds: float
    epoch2_median_seconds: float
    train_images_per_second_median: float | None
    max_batch_per_gpu: int  # the largest batch per GPU its runs were timed at
    largest_batch_per_gpu_max: int  # the largest batch per GPU a search confirmed (0: none)
    corroboration: corroboration.Corroboration  # its submitters, and what agrees with it


class Aggregates:
    """Compare's and the leaderboard's reads."""

    def __init__(self, snapshot: Snapshots) -> None:
        self._snapshot = snapshot

    def compare_groups(self, query: CompareQuery) -> list[GroupFigures]:
        """Per GPU configuration (name x count x memory limit): the figures Compare
        reports, over OK measured runs (flagged ones only with include_flagged).

        Read from the per-group figures the store keeps. Where a configuration spans
        several outlier groups (runs of unlike settings) and the caller allows mixing
        them, or flagged runs are asked for, the medians are computed afresh from the runs.
        """
        with self._snapshot() as read:
            if query.include_flagged:
                return [_group_figures(r) for r in _compare_rows_from_runs(read, query)]
            clauses, params = _compare_filter(query)
            rows = read.con.execute(
                f"""
                SELECT {_CONFIG}, runs, outliers_excluded, epoch2_median_seconds,
                    epoch2_min_seconds, epoch2_max_seconds, train_images_per_second_median,
                    max_batch_per_gpu, max_global_batch, peak_memory_median_bytes,
                    memory_total_bytes, energy_per_epoch_median_joules, images_per_joule_median,
                    largest_batch_per_gpu_max, submitters,
                    {", ".join(f"[{c}]" for c in KEY_COLUMNS)}
                FROM {read.group_figures()} WHERE with_outliers = ? AND {' AND '.join(clauses)}
                """,
                [query.include_outliers, *params],
            ).fetchall()
            configs = {tuple(r[:3]) for r in rows}
            if len(configs) < len(rows) and query.allow_mixed:
                rows = _compare_rows_from_runs(read, query)
        return [_group_figures(r) for r in rows]

    def published_groups(self, model: str, gpu_names: Sequence[str] = ()) -> list[GroupFigures]:
        """The published runs of a model (Run.published), per GPU configuration and
        everything that changes what was timed, each group with its source. Flagged
        published runs are left out like measured ones."""
        clauses, params = _compare_filter(CompareQuery(model=model, gpu_names=tuple(gpu_names)))
        with self._snapshot() as read:
            published = f"""(SELECT *, true AS keep FROM {read.rows}
                             WHERE status = 'ok' AND epoch2_seconds IS NOT NULL AND published
                               AND NOT flagged AND {' AND '.join(clauses)})"""
            rows = read.con.execute(
                f"""
                SELECT {_CONFIG}, {outliers.FIGURES},
                    {", ".join(f"[{c}]" for c in KEY_COLUMNS)}, 0, any_value(record)
                FROM {outliers.voiced(published, f"{_CONFIG}, {', '.join(KEY_COLUMNS)}")}
                GROUP BY {_CONFIG}, {", ".join(KEY_COLUMNS)}
                ORDER BY median(epoch2_seconds), gpu_name
                """,
                params,
            ).fetchall()
        return [_group_figures(r[:-1], source=run_pb2.Run.FromString(r[-1]).source)
                for r in rows]

    def benchmark_versions(self, where: str, params: Sequence[Any]) -> list[str]:
        """The benchmark versions of the runs matching `where`, newest first (numeric
        order: "10" is newer than "9")."""
        with self._snapshot() as read:
            return _benchmark_versions(read, where, params)

    def leaderboard(self, query: LeaderboardQuery) -> tuple[list[LeaderboardRow], str]:
        """A model's GPU configurations by the median epoch-2 time of their runs, fastest
        first (the best single run beside it); one entry per backend, precision, pipeline,
        weights, data and epochs each configuration ran with. Returns the entries and the
        benchmark version they are of.

        One submitter, one voice: an entry's medians are the median of its submitters'
        medians (each token's runs first), so that a flood from one token weighs as one
        run; each entry says how many submitters stand behind it and whether its figure
        is corroborated (collector.corroboration), and `corroborated_only` keeps only
        those that are.

        Only runs of the standard benchmark count: at the model's native image size (not
        a smoke run at --image-size), on the protocol's STANDARD_TRAIN_IMAGES training
        images (not a smoke run with --limit-images), on the whole card (no
        --memory-limit), of one settings label and one batch rule (the default run's
        unless asked), and of the newest benchmark version with such runs of the model;
        outliers and published runs are left out, flagged runs unless asked for. The
        training set is the protocol's fixed number rather than, say, the most common one
        among the runs, so that a burst of smoke runs can never take the leaderboard over.
        """
        clauses = ["status = 'ok'", "epoch2_seconds IS NOT NULL", "NOT outlier",
                   "NOT published", "model = ?", "image_size = ?", "train_images = ?",
                   "memory_limit_bytes = 0", "settings = ?", "batch_rule = ?"]
        params: list[Any] = [query.model, record.NATIVE_IMAGE_SIZE.get(query.model, 0),
                             record.STANDARD_TRAIN_IMAGES, query.settings, query.batch_rule]
        if not query.include_flagged:
            clauses.append("NOT flagged")
        for column in ("precision", "backend"):
            if getattr(query, column):
                clauses.append(f"{column} = ?")
                params.append(getattr(query, column))
        where = " AND ".join(clauses)
        with self._snapshot() as read:
            version = query.benchmark_version
            if not version:
                versions = _benchmark_versions(read, where, params)
                if not versions:
                    return [], ""
                version = versions[0]
            rows = read.con.execute(
                f"""
                WITH voices AS (
                    SELECT {_BOARD_KEYS}, submitter, count(*) AS runs,
                        min(epoch2_seconds) AS best, median(epoch2_seconds) AS epoch2,
                        median(train_images_per_second) AS rate, max(batch_per_gpu) AS batch,
                        max(largest_batch_per_gpu) AS largest
                    FROM {read.runs}
                    WHERE {where} AND benchmark_version = ?
                    GROUP BY {_BOARD_KEYS}, submitter)
                SELECT {_BOARD_KEYS}, sum(runs)::INTEGER, min(best), median(epoch2),
                    median(rate), max(batch), coalesce(max(largest), 0), list(epoch2)
                FROM voices
                GROUP BY {_BOARD_KEYS}
                ORDER BY median(epoch2), min(best), gpu_name, gpu_count
                """,
                [*params, version],
            ).fetchall()
            published = _published_medians(read, query.model, version)
        found = []
        for r in rows:
            row = LeaderboardRow(*r[:-1], corroboration=_corroboration(
                r, r[-1], published.get(_reference_key(r), ()), query.model))
            if row.corroboration.corroborated or not query.corroborated_only:
                found.append(row)
        return found[: query.limit], version


# A leaderboard entry's columns (LeaderboardRow's first ones), and those a reference run
# must share with it to corroborate it.
_BOARD_KEY_NAMES = ("gpu_name", "gpu_count", "backend", "precision", "settings", "pipeline",
                    "weights", "data", "epochs", "batch_rule")
_BOARD_KEYS = ", ".join(_BOARD_KEY_NAMES)
_REFERENCE_KEYS = ("gpu_name", "gpu_count", "backend", "precision", "settings", "batch_rule")
# Where each reference key stands in a leaderboard row.
_REFERENCE_AT = tuple(_BOARD_KEY_NAMES.index(k) for k in _REFERENCE_KEYS)


def _reference_key(row: Sequence[Any]) -> tuple:
    return tuple(row[i] for i in _REFERENCE_AT)


def _published_medians(read: Snapshot, model: str, version: str) -> dict[tuple, list]:
    """The median epoch-2 time of the unflagged published runs of a model at its native
    size, per _REFERENCE_KEYS, each as (what it is, seconds)."""
    rows = read.con.execute(
        f"""
        SELECT {", ".join(_REFERENCE_KEYS)}, median(epoch2_seconds), any_value(run_id)
        FROM {read.rows}
        WHERE published AND NOT flagged AND status = 'ok' AND epoch2_seconds IS NOT NULL
          AND model = ? AND image_size = ? AND benchmark_version = ?
        GROUP BY ALL
        """,
        [model, record.NATIVE_IMAGE_SIZE.get(model, 0), version],
    ).fetchall()
    found: dict[tuple, list] = {}
    for r in rows:
        found.setdefault(tuple(r[:-2]), []).append((f"published run {r[-1][:8]}", r[-2]))
    return found


def _corroboration(row: Sequence[Any], submitter_medians: Sequence[float],
                   published: Sequence[tuple[str, float]],
                   model: str) -> corroboration.Corroboration:
    """What stands behind a leaderboard row (r: _BOARD_KEYS, then the figures): its
    submitters' medians and the published runs of its configuration (epoch-2 seconds),
    and the operator's verified run (training images/s)."""
    figure, rate = row[12], row[13]
    references = [(what, corroboration.agrees(seconds, figure)) for what, seconds in published]
    gpu_name, gpu_count, _, precision, settings = row[:5]
    verified = corroboration.verified_reference(
        ceilings.specs(), gpu_name, gpu_count, model, settings, precision, row[9])
    if verified is not None and rate:
        references.append((verified[0], corroboration.agrees(rate, verified[1])))
    return corroboration.corroborate(figure, submitter_medians, references)


def _benchmark_versions(read: Snapshot, where: str, params: Sequence[Any]) -> list[str]:
    rows = read.con.execute(
        f"SELECT DISTINCT benchmark_version FROM {read.runs} WHERE {where}", list(params)
    ).fetchall()
    return sorted((v for (v,) in rows), key=record.version_key, reverse=True)


def _compare_rows_from_runs(read: Snapshot, query: CompareQuery) -> list[tuple]:
    clauses, params = _compare_filter(query)
    kept = f"""(SELECT *, (? OR NOT outlier) AS keep FROM {read.runs}
                WHERE status = 'ok' AND epoch2_seconds IS NOT NULL AND NOT published
                  AND (? OR NOT flagged) AND {' AND '.join(clauses)})"""
    return read.con.execute(
        f"""
        SELECT {_CONFIG}, {outliers.FIGURES},
            {", ".join(f"list(DISTINCT {c}) FILTER (WHERE keep)" for c in KEY_COLUMNS)},
            count(*) FILTER (WHERE keep AND flagged)
        FROM {outliers.voiced(kept, _CONFIG)}
        GROUP BY {_CONFIG}
        """,
        [query.include_outliers, query.include_flagged, *params],
    ).fetchall()


def _compare_filter(query: CompareQuery) -> tuple[list[str], list[Any]]:
    clauses, params = equal_where_set(
        query,
        ("model", "precision", "backend", "benchmark_version", "image_size", "train_images",
         "settings", "batch_rule", "pipeline", "weights", "data", "epochs"),
    )
    if query.gpu_names:
        clauses.append("list_contains(?, lower(gpu_name))")
        params.append([record.normalize_gpu_name(n).lower() for n in query.gpu_names])
    return clauses, params


def _group_figures(r: Sequence[Any], *, source: str = "") -> GroupFigures:
    """GroupFigures from a row: the configuration (3 columns), FIGURES (14), the
    dimensions' value lists (KEY_COLUMNS) and, from the runs, the flagged runs kept."""
    lists = [tuple(sorted(v or ())) for v in r[17:17 + len(KEY_COLUMNS)]]
    return GroupFigures(
        gpu_name=r[0], gpu_count=r[1], memory_limit_bytes=r[2] or 0, runs=r[3],
        outliers_excluded=r[4], epoch2_median_seconds=r[5], epoch2_min_seconds=r[6],
        epoch2_max_seconds=r[7], train_images_per_second_median=r[8],
        max_batch_per_gpu=r[9] or 0, max_global_batch=r[10] or 0,
        peak_memory_median_bytes=r[11], memory_total_bytes=r[12],
        energy_per_epoch_median_joules=r[13], images_per_joule_median=r[14],
        largest_batch_per_gpu_max=r[15] or 0, submitters=r[16] or 0,
        **dict(zip(compare.DIMENSION_ATTRIBUTES, lists, strict=True)),
        flagged_included=r[17 + len(KEY_COLUMNS)] if len(r) > 17 + len(KEY_COLUMNS) else 0,
        source=source,
    )
