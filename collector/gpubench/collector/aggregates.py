"""Runs aggregated per GPU configuration: Compare's figures (per outlier group, or per
configuration across groups), published runs, and the leaderboard.

Runs on a card not yet in the GPU catalogue (collector.ceilings.not_yet_catalogued),
flagged for nothing but their GPU's name, are aggregated too, apart: Compare's groups and
the leaderboard's entries of such cards come marked `uncatalogued`, after the others, so
that a new card's runs are seen at once and never lead the catalogued cards'.

Like every read (collector.queries), these see every run acknowledged before they
began, with the outlier flags computed from those runs (collector.outliers), and never
wait for a write.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeAlias

import duckdb

from gpubench import comparison_key, record
from gpubench.collector import ceilings, corroboration, outliers
from gpubench.collector.compare import GroupFigures
from gpubench.collector.database import UntilChanged, transaction
from gpubench.collector.rows import REASON_SEPARATOR
from gpubench.comparison_key import Value
from gpubench.v1 import run_pb2

if TYPE_CHECKING:  # given by the store
    from gpubench.collector.database import Database

Connection: TypeAlias = duckdb.DuckDBPyConnection

# The columns of a GPU configuration, as SQL, and the dimensions Compare keeps apart
# (gpubench.comparison_key: each a column of the runs and a column of an outlier group).
_CONFIG = ", ".join(outliers.CONFIG_COLUMNS)
# Compare's groups in one order whatever the scan's: fastest first, then by name (a
# group without a kept run last).
_FASTEST_FIRST = "epoch2_median_seconds ASC NULLS LAST"
KEY_COLUMNS = comparison_key.NAMES
# A flagged run whose every reason is its GPU's name (ceilings.UNRECOGNISED ...): a run
# of a card not yet catalogued, when the name is one (`_uncatalogued_names`).
_NAME_ONLY = (f"list_bool_and(list_transform(string_split(flag_reasons, "
              f"chr({ord(REASON_SEPARATOR)})), "
              f"lambda r: starts_with(r, '{ceilings.UNRECOGNISED}')))")


class CompareQuery:
    """Which runs a comparison covers: a model, and a pin per dimension of the
    comparison key (`pins`, by name; an empty or zero one matches everything)."""

    __slots__ = ("model", "pins", "gpu_names", "include_outliers", "include_flagged",
                 "allow_mixed")

    def __init__(self, model: str, *, gpu_names: tuple[str, ...] = (),
                 include_outliers: bool = False, include_flagged: bool = False,
                 allow_mixed: bool = False, **pins: Value) -> None:
        unknown = set(pins) - set(KEY_COLUMNS)
        if unknown:
            raise TypeError(f"CompareQuery: no dimension {', '.join(sorted(unknown))}")
        self.model = model
        self.pins = {d.name: pins.get(d.name) or d.empty for d in comparison_key.DIMENSIONS}
        self.gpu_names = tuple(gpu_names)  # exact, case-insensitive, normalised
        self.include_outliers = include_outliers
        self.include_flagged = include_flagged
        self.allow_mixed = allow_mixed

    def __repr__(self) -> str:
        return (f"CompareQuery({self.model!r}, pins={self.pins!r}, gpu_names={self.gpu_names!r},"
                f" include_outliers={self.include_outliers}, "
                f"include_flagged={self.include_flagged}, allow_mixed={self.allow_mixed})")


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
    # Its value in each dimension the leaderboard keeps apart or ranks one at a time
    # (comparison_key.ENTRY_DIMENSIONS, RANKED_DIMENSIONS), by name.
    key: comparison_key.Key
    runs: int
    best_epoch2_seconds: float
    epoch2_median_seconds: float
    train_images_per_second_median: float | None
    max_batch_per_gpu: int  # the largest batch per GPU its runs were timed at
    largest_batch_per_gpu_max: int  # the largest batch per GPU a search confirmed (0: none)
    corroboration: corroboration.Corroboration  # its submitters, and what agrees with it
    uncatalogued: bool = False  # a card not yet in the GPU catalogue: ranked apart, after


class Aggregates:
    """Compare's and the leaderboard's reads."""

    def __init__(self, database: Database, scores: outliers.GroupScores) -> None:
        self._db = database
        self._scores = scores  # each outlier group's, until it changes
        # Each answer until the runs change: computing one reads every run of its groups.
        self._answers = UntilChanged(database)

    def compare_groups(self, query: CompareQuery) -> list[GroupFigures]:
        """Compare's figures (`_compare_groups`), kept until the runs change."""
        return list(self._answers.get(("compare", repr(query)),
                                      lambda: self._compare_groups(query)))

    def published_groups(self, model: str, gpu_names: Sequence[str] = ()) -> list[GroupFigures]:
        """The published runs' figures (`_published_groups`), kept until the runs change."""
        return list(self._answers.get(("published", model, tuple(gpu_names)),
                                      lambda: self._published_groups(model, gpu_names)))

    def leaderboard(self, query: LeaderboardQuery) -> tuple[list[LeaderboardRow], str]:
        """The leaderboard (`_leaderboard`), kept until the runs change."""
        rows, version = self._answers.get(("leaderboard", query),
                                          lambda: self._leaderboard(query))
        return list(rows), version

    def _compare_groups(self, query: CompareQuery) -> list[GroupFigures]:
        """Per GPU configuration (name x count x memory limit): the figures Compare
        reports, over OK measured runs (flagged ones only with include_flagged).

        Per outlier group. Where a configuration spans several outlier groups (runs of
        unlike settings) and the caller allows mixing them, or flagged runs are asked
        for, the medians are taken across the configuration's runs instead.
        The groups of cards not yet catalogued follow, marked (computed from their runs).
        """
        clauses, params = _compare_filter(query)
        where = " AND ".join(clauses)
        with self._db.read() as con, transaction(con):
            scores = self._scores.of(con, where, params)
            missing = _uncatalogued_names(con, query.model)
            apart = [_group_figures(r, uncatalogued=True)
                     for r in _compare_rows_from_runs(con, query, missing, scores, apart=True)
                     ] if missing else []
            if query.include_flagged:
                return [_group_figures(r) for r in _compare_rows_from_runs(
                    con, query, missing, scores)] + apart
            if query.allow_mixed:
                # Per configuration at once: where none spans several groups (no
                # dimension has two values), its figures are its one group's.
                rows = _compare_rows_from_runs(con, query, missing, scores)
                if not any(len(r[c] or ()) > 1 for r in rows for c in KEY_COLUMNS):
                    rows = [r for r in rows if r["runs"]]  # as a group's: kept runs
                return [_group_figures(r) for r in rows] + apart
            kept = f"""(SELECT *, (? OR NOT outlier) AS keep FROM {outliers.scored(where)}
                        WHERE {outliers.SCORED_RUNS})"""
            # Per outlier group (each alike in every dimension), as a group's figures.
            rows = _records(con.execute(
                outliers.figures_sql(
                    kept, ", ".join(outliers.OUTLIER_GROUP),
                    extra="".join(f", [{c}] AS {c}" for c in KEY_COLUMNS),
                    having="HAVING count(*) FILTER (WHERE keep) > 0")
                + f" ORDER BY {_FASTEST_FIRST}, {', '.join(outliers.OUTLIER_GROUP)}",
                [query.include_outliers, *params, *scores],
            ))
        return [_group_figures(r) for r in rows] + apart

    def _published_groups(self, model: str, gpu_names: Sequence[str] = ()
                          ) -> list[GroupFigures]:
        """The published runs of a model (Run.published), per GPU configuration and
        everything that changes what was timed, each group with its source. Flagged
        published runs are left out like measured ones."""
        clauses, params = _compare_filter(CompareQuery(model=model, gpu_names=tuple(gpu_names)))
        with self._db.read() as con:
            published = f"""(SELECT *, true AS keep FROM runs
                             WHERE status = 'ok' AND epoch2_seconds IS NOT NULL AND published
                               AND NOT flagged AND {' AND '.join(clauses)})"""
            partition = f"{_CONFIG}, {', '.join(KEY_COLUMNS)}"
            rows = _records(con.execute(
                outliers.figures_sql(
                    published, partition,
                    per_voice=", any_value(record) AS record, list(epoch2_seconds) AS times",
                    extra="".join([*(f", [{c}] AS {c}" for c in KEY_COLUMNS),
                                   ", any_value(record) AS record",
                                   ", list_median(flatten(list(times))) AS order_by"]))
                + " ORDER BY order_by, gpu_name",
                params,
            ))
        return [_group_figures(r, source=run_pb2.Run.FromString(r["record"]).source)
                for r in rows]

    def _leaderboard(self, query: LeaderboardQuery) -> tuple[list[LeaderboardRow], str]:
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

        The entries of cards not yet catalogued come after the others, `uncatalogued`,
        ranked among themselves (at most `limit` of them too); the version is the newest
        of the catalogued cards' runs (of theirs where there are none).
        """
        clauses = [*_RUN_FILTER, "model = ?", "memory_limit_bytes = 0"]
        params: list[Any] = [query.model]
        for name in comparison_key.STANDARD_DIMENSIONS:
            clauses.append(f"{name} = ?")
            params.append(comparison_key.standard_value(name, query.model))
        # The pins the query has (the ranked dimensions but the version, which is found
        # below, and the entry dimensions it may filter by): each set one is kept to.
        for name in KEY_COLUMNS:
            value = getattr(query, name, None) if name != "benchmark_version" else None
            if value:
                clauses.append(f"{name} = ?")
                params.append(value)
        # The model's runs with their outlier flags as computed now: the scores of the
        # groups it may rank (those of its clauses on the groups' columns).
        source = outliers.scored("model = ?")
        ranked = " AND ".join(clauses[_RUN_CLAUSES:])
        with self._db.read() as con, transaction(con):
            source_params = [query.model, *self._scores.of(con, ranked, params)]
            missing = _uncatalogued_names(con, query.model)
            known, known_params = _flagged_filter(
                missing, apart=False, include_flagged=query.include_flagged)
            apart, apart_params = _flagged_filter(
                missing, apart=True, include_flagged=query.include_flagged)
            version = query.benchmark_version
            if not version:
                versions = (_benchmark_versions(con, source, " AND ".join([*clauses, known]),
                                                [*source_params, *params, *known_params])
                            or _benchmark_versions(con, source, " AND ".join([*clauses, apart]),
                                                   [*source_params, *params, *apart_params]))
                if not versions:
                    return [], ""
                version = versions[0]
            where = " AND ".join([*clauses, f"({known} OR {apart})"])
            params = [*params, *known_params, *apart_params]
            rows = _records(con.execute(
                f"""
                WITH voices AS (
                    SELECT {_BOARD_KEYS}, submitter, count(*) AS runs,
                        min(epoch2_seconds) AS best, median(epoch2_seconds) AS epoch2,
                        median(train_images_per_second) AS rate, max(batch_per_gpu) AS batch,
                        max(largest_batch_per_gpu) AS largest
                    FROM {source}
                    WHERE {where} AND benchmark_version = ?
                    GROUP BY {_BOARD_KEYS}, submitter)
                SELECT {_BOARD_KEYS}, sum(runs)::INTEGER AS runs,
                    min(best) AS best_epoch2_seconds, median(epoch2) AS epoch2_median_seconds,
                    median(rate) AS train_images_per_second_median,
                    max(batch) AS max_batch_per_gpu,
                    coalesce(max(largest), 0) AS largest_batch_per_gpu_max,
                    list(epoch2) AS submitter_medians
                FROM voices
                GROUP BY {_BOARD_KEYS}
                ORDER BY median(epoch2), min(best), gpu_name, gpu_count
                """,
                [*source_params, *params, version],
            ))
            published = _published_medians(con, query.model, version)
        found: list[LeaderboardRow] = []
        found_apart: list[LeaderboardRow] = []
        for r in rows:
            row = LeaderboardRow(
                gpu_name=r["gpu_name"], gpu_count=r["gpu_count"],
                key=comparison_key.Key({name: r[name] for name in _BOARD_DIMENSIONS}),
                runs=r["runs"], best_epoch2_seconds=r["best_epoch2_seconds"],
                epoch2_median_seconds=r["epoch2_median_seconds"],
                train_images_per_second_median=r["train_images_per_second_median"],
                max_batch_per_gpu=r["max_batch_per_gpu"],
                largest_batch_per_gpu_max=r["largest_batch_per_gpu_max"],
                corroboration=_corroboration(
                    r, published.get(_reference_key(r), ()), query.model),
                uncatalogued=r["gpu_name"] in missing)
            if row.corroboration.corroborated or not query.corroborated_only:
                (found_apart if row.uncatalogued else found).append(row)
        return found[: query.limit] + found_apart[: query.limit], version


# The leaderboard's clauses on a run's own columns; the rest are on its group's.
_RUN_FILTER = ("status = 'ok'", "epoch2_seconds IS NOT NULL", "NOT outlier", "NOT published")
_RUN_CLAUSES = len(_RUN_FILTER)
# A leaderboard entry's columns: the GPU configuration (the whole card) and the
# dimensions it keeps apart or ranks one value at a time (each pinned, so grouping by
# them splits nothing); and those a reference run must share with it to corroborate it
# (a published run is of other weights, data and pipeline: collector.corroboration).
_BOARD_DIMENSIONS = tuple(n for n in KEY_COLUMNS if n in comparison_key.ENTRY_DIMENSIONS
                          or n in comparison_key.RANKED_DIMENSIONS)
_BOARD_KEYS = ", ".join(("gpu_name", "gpu_count", *_BOARD_DIMENSIONS))
_REFERENCE_KEYS = ("gpu_name", "gpu_count", "backend", "precision", "settings", "batch_rule")


def _records(cursor: duckdb.DuckDBPyConnection) -> list[dict[str, Any]]:
    """A query's rows, each by its column names."""
    names = [column[0] for column in cursor.description]
    return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]


def _reference_key(row: dict[str, Any]) -> tuple:
    return tuple(row[k] for k in _REFERENCE_KEYS)


def _published_medians(con: Connection, model: str, version: str) -> dict[tuple, list]:
    """The median epoch-2 time of the unflagged published runs of a model at its native
    size, per _REFERENCE_KEYS, each as (what it is, seconds)."""
    rows = con.execute(
        f"""
        SELECT {", ".join(_REFERENCE_KEYS)}, median(epoch2_seconds), any_value(run_id)
        FROM runs
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


def _corroboration(row: dict[str, Any], published: Sequence[tuple[str, float]],
                   model: str) -> corroboration.Corroboration:
    """What stands behind a leaderboard row (by its columns): its submitters' medians
    and the published runs of its configuration (epoch-2 seconds), and the operator's
    verified run (training images/s)."""
    figure, rate = row["epoch2_median_seconds"], row["train_images_per_second_median"]
    references = [(what, corroboration.agrees(seconds, figure)) for what, seconds in published]
    verified = corroboration.verified_reference(
        ceilings.specs(), row["gpu_name"], row["gpu_count"], model, row["settings"],
        row["precision"], row["batch_rule"])
    if verified is not None and rate:
        references.append((verified[0], corroboration.agrees(rate, verified[1])))
    return corroboration.corroborate(figure, row["submitter_medians"], references)


def _benchmark_versions(con: Connection, source: str, where: str,
                        params: Sequence[Any]) -> list[str]:
    rows = con.execute(
        f"SELECT DISTINCT benchmark_version FROM {source} WHERE {where}", list(params)
    ).fetchall()
    return sorted((v for (v,) in rows), key=record.version_key, reverse=True)


# The columns of the runs _compare_rows_from_runs reads (the records stay on disk).
_KEPT_COLUMNS = ", ".join(dict.fromkeys((
    *outliers.CONFIG_COLUMNS, *KEY_COLUMNS, *outliers.FIGURE_INPUTS, "flagged",
    "flag_reasons")))


def _compare_rows_from_runs(con: Connection, query: CompareQuery, missing: list[str],
                            scores: list[list[Any]], *, apart: bool = False
                            ) -> list[dict[str, Any]]:
    """Compare's rows computed from the runs: of the catalogued cards (and look-alikes,
    flagged), or with `apart` of the cards not yet catalogued (`missing`, by name); their
    groups' `scores` from GroupScores.of."""
    clauses, params = _compare_filter(query)
    flagged, names = _flagged_filter(missing, apart=apart,
                                     include_flagged=query.include_flagged)
    where = " AND ".join(clauses)
    kept = f"""(SELECT {_KEPT_COLUMNS}, (? OR NOT outlier) AS keep
                FROM {outliers.scored(where)}
                WHERE status = 'ok' AND epoch2_seconds IS NOT NULL AND NOT published
                  AND {flagged})"""
    # Flagged runs counted in: those flagged for more than the name of a missing card.
    counted = f"flagged AND NOT {_NAME_ONLY}" if apart else "flagged"
    figures = outliers.figures_sql(
        "kept", _CONFIG, per_voice=f", count(*) FILTER (WHERE {counted}) AS flagged_runs",
        extra=", coalesce(sum(flagged_runs) FILTER (WHERE keep), 0)::BIGINT AS flagged_included")
    # Each dimension's values among the kept runs, per configuration: one pass apart
    # (a list per submitter first costs four times as much).
    values = ", ".join(f"list(DISTINCT {c}) FILTER (WHERE keep) AS {c}" for c in KEY_COLUMNS)
    return _records(con.execute(
        f"""
        WITH kept AS MATERIALIZED {kept}
        SELECT * FROM ({figures}) JOIN (SELECT {_CONFIG}, {values} FROM kept GROUP BY ALL)
            USING ({_CONFIG})
        ORDER BY {_FASTEST_FIRST}, {_CONFIG}
        """,
        [query.include_outliers, *params, *scores, *names],
    ))


def _flagged_filter(missing: list[str], *, apart: bool,
                    include_flagged: bool) -> tuple[str, list[Any]]:
    """Which runs by their flags, as SQL and its parameters: of the catalogued cards, the
    unflagged ones (any but the `missing` cards' with include_flagged); or `apart`, those
    of the `missing` cards (not yet catalogued) flagged for nothing but the name (any
    with include_flagged)."""
    if apart:
        return ("list_contains(?, gpu_name)" if include_flagged
                else f"(list_contains(?, gpu_name) AND flagged AND {_NAME_ONLY})"), [missing]
    if include_flagged:
        return "NOT list_contains(?, gpu_name)", [missing]
    return "NOT flagged", []


def _uncatalogued_names(con: Connection, model: str) -> list[str]:
    """The GPU names of a model's flagged runs that may be cards the catalogue does not
    list yet (ceilings.not_yet_catalogued)."""
    names = con.execute(
        "SELECT DISTINCT gpu_name FROM runs WHERE flagged AND model = ?", [model]
    ).fetchall()
    specs = ceilings.specs()
    return sorted(name for (name,) in names if ceilings.not_yet_catalogued(specs, name))


def _compare_filter(query: CompareQuery) -> tuple[list[str], list[Any]]:
    params: list[Any]
    clauses, params = ["model = ?"], [query.model]
    for name, value in query.pins.items():
        if value:
            clauses.append(f"{name} = ?")
            params.append(value)
    if query.gpu_names:
        clauses.append("list_contains(?, lower(gpu_name))")
        params.append([record.normalize_gpu_name(n).lower() for n in query.gpu_names])
    return clauses, params


# The figures of a group as outliers.FIGURES names them: GroupFigures'
# fields of the same names.
_FIGURE_NAMES = outliers.FIGURE_NAMES


def _group_figures(r: dict[str, Any], *, source: str = "",
                   uncatalogued: bool = False) -> GroupFigures:
    """GroupFigures from a row by its columns: the configuration, the figures
    (_FIGURE_NAMES), each dimension's value list (KEY_COLUMNS) and, read from the runs,
    the flagged runs kept (flagged_included)."""
    return GroupFigures(
        gpu_name=r["gpu_name"], gpu_count=r["gpu_count"],
        memory_limit_bytes=r["memory_limit_bytes"] or 0, runs=r["runs"],
        outliers_excluded=r["outliers_excluded"],
        epoch2_median_seconds=r["epoch2_median_seconds"],
        epoch2_min_seconds=r["epoch2_min_seconds"], epoch2_max_seconds=r["epoch2_max_seconds"],
        train_images_per_second_median=r["train_images_per_second_median"],
        max_batch_per_gpu=r["max_batch_per_gpu"] or 0,
        max_global_batch=r["max_global_batch"] or 0,
        peak_memory_median_bytes=r["peak_memory_median_bytes"],
        memory_total_bytes=r["memory_total_bytes"],
        energy_per_epoch_median_joules=r["energy_per_epoch_median_joules"],
        images_per_joule_median=r["images_per_joule_median"],
        largest_batch_per_gpu_max=r["largest_batch_per_gpu_max"] or 0,
        submitters=r["submitters"] or 0,
        values={c: tuple(sorted(r[c] or ())) for c in KEY_COLUMNS},
        flagged_included=r.get("flagged_included") or 0,
        source=source,
        uncatalogued=uncatalogued,
    )
