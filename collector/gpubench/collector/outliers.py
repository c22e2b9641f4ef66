"""Outlier flags and the per-group figures Compare reads, as SQL over the runs table.

Runs are scored within their outlier group (OUTLIER_GROUP: the same GPU configuration
and everything that changes what was timed) by a robust z-score of their epoch-2 time
about the median of the group's submitters' medians (one submitter, one voice).
The store keeps the flags in runs.outlier and runs.outlier_score and each group's
figures in the table group_figures (`rescore`), for the groups a change touched, in
the change's own transaction.

Runs flagged as implausible (collector.plausibility) and published runs (transcribed,
not measured) are in no group (SCORED_RUNS): Compare reads them apart, the
leaderboard leaves them out.
"""

from __future__ import annotations

from typing import Any

import duckdb

from gpubench import comparison_key

# Robust z-score (Iglewicz and Hoaglin): 0.6745 * (x - median) / MAD; beyond 3.5 is an outlier.
OUTLIER_THRESHOLD = 3.5
# ... and only this far from its group's median: in a tight group the MAD is tiny, and the
# z-score alone flagged two of five default B0 runs on one H200 that agree within 4%
# (docs/results/h200-default-run.md, the repeats). Honest repeats on one card differ by a
# few percent; a tenth is not measurement noise.
OUTLIER_MIN_SHARE = 0.10
# A GPU configuration: the cards, how many, and a --memory-limit (a smaller card).
CONFIG_COLUMNS = ("gpu_name", "gpu_count", "memory_limit_bytes")
# The columns that decide which runs are "the same GPU configuration" for outliers,
# in the order of group_figures' first columns: the model, the configuration, and
# every dimension of the comparison key (gpubench.comparison_key: everything that
# changes what was timed), the benchmark version last, where the migrations put it.
OUTLIER_GROUP = (
    "model", *CONFIG_COLUMNS,
    *(n for n in comparison_key.NAMES if n != "benchmark_version"), "benchmark_version",
)
# The runs that belong to outlier groups (and so to Compare's figures): measured, OK,
# not flagged as implausible.
SCORED_RUNS = ("status = 'ok' AND epoch2_seconds IS NOT NULL AND NOT published "
               "AND NOT flagged")
# The figures whose medians are taken submitter first (one submitter, one voice): each
# submitter's median of its runs, then the median of those (`voiced` computes the
# first, as voice_<figure>, on the runs of a relation).
VOICED = ("epoch2_seconds", "train_images_per_second", "peak_memory_bytes",
          "memory_total_bytes", "energy_per_epoch_joules", "images_per_joule")
# The figures of a set of runs (those with `keep` true, from a relation `voiced` made),
# each named as its GroupFigures field and its group_figures column.
FIGURES = """
    count(*) FILTER (WHERE keep) AS runs,
    count(*) FILTER (WHERE NOT keep) AS outliers_excluded,
    median(voice_epoch2_seconds) FILTER (WHERE keep AND first_voice) AS epoch2_median_seconds,
    min(epoch2_seconds) FILTER (WHERE keep) AS epoch2_min_seconds,
    max(epoch2_seconds) FILTER (WHERE keep) AS epoch2_max_seconds,
    median(voice_train_images_per_second) FILTER (WHERE keep AND first_voice)
        AS train_images_per_second_median,
    max(batch_per_gpu) FILTER (WHERE keep) AS max_batch_per_gpu,
    max(global_batch) FILTER (WHERE keep) AS max_global_batch,
    median(voice_peak_memory_bytes) FILTER (WHERE keep AND first_voice)
        AS peak_memory_median_bytes,
    median(voice_memory_total_bytes) FILTER (WHERE keep AND first_voice) AS memory_total_bytes,
    median(voice_energy_per_epoch_joules) FILTER (WHERE keep AND first_voice)
        AS energy_per_epoch_median_joules,
    median(voice_images_per_joule) FILTER (WHERE keep AND first_voice)
        AS images_per_joule_median,
    max(largest_batch_per_gpu) FILTER (WHERE keep) AS largest_batch_per_gpu_max,
    count(DISTINCT submitter) FILTER (WHERE keep) AS submitters
"""
# FIGURES' names, in its order: group_figures' columns after with_outliers.
FIGURE_NAMES = ("runs", "outliers_excluded", "epoch2_median_seconds", "epoch2_min_seconds",
                "epoch2_max_seconds", "train_images_per_second_median", "max_batch_per_gpu",
                "max_global_batch", "peak_memory_median_bytes", "memory_total_bytes",
                "energy_per_epoch_median_joules", "images_per_joule_median",
                "largest_batch_per_gpu_max", "submitters")


def voiced(relation: str, partition: str) -> str:
    """The rows of `relation` (which has `keep` and `submitter`) with, per submitter of
    each set of rows alike in `partition` (SQL columns) and `keep`, the submitter's
    median of each VOICED figure (voice_<figure>) and `first_voice`, true on one row of
    each submitter: what FIGURES takes its medians from."""
    window = f"PARTITION BY {partition}, keep, submitter"
    medians = ", ".join(f"median({c}) OVER (voices) AS voice_{c}" for c in VOICED)
    return f"""
        (SELECT *, {medians},
            row_number() OVER (voices ORDER BY run_id) = 1 AS first_voice
         FROM {relation}
         WINDOW voices AS ({window}))
    """


def group_of(row: dict[str, Any]) -> tuple | None:
    """The outlier group of a runs-table row (collector.rows.run_row); None for a run
    in none (not OK, published or flagged: see SCORED_RUNS)."""
    if row["status"] != "ok" or row["published"] or row["flagged"]:
        return None
    return tuple(row[column] for column in OUTLIER_GROUP)


def _scores_sql(source: str, where: str = "", by: tuple[str, ...] | None = None) -> str:
    """Per scored run of `source` (matching `where`, " AND ..."): run_id, x (its epoch-2
    time), med (its group's median) and z (its robust z-score), the runs grouped by
    the columns `by` (none: `where` picks one group, and the SQL is simpler to run).

    One submitter, one voice: a group's median is the median of its submitters' medians
    of epoch2_seconds, so that a flood of runs from one token cannot move it to its side
    and make the others' runs outliers. The median absolute deviation (MAD) about that
    median is taken the same way, submitter first: the median of each submitter's
    runs' absolute deviations, then across submitters (with one submitter, the runs'
    MAD); z = 0.6745 * (x - median) / MAD. Where the MAD is 0 (half the runs identical)
    the mean absolute deviation stands in, scaled to the MAD's consistency constant
    (Iglewicz and Hoaglin).
    """
    by = OUTLIER_GROUP if by is None else by
    cols = "".join(f"{c}, " for c in by)
    using = f"USING ({', '.join(by)})" if by else "ON true"
    group_by = f"GROUP BY {', '.join(by)}" if by else ""
    return f"""
        WITH g AS (SELECT run_id, {cols}submitter, epoch2_seconds AS x FROM {source}
                   WHERE {SCORED_RUNS}{where}),
             v AS (SELECT {cols}submitter, median(x) AS voice FROM g GROUP BY ALL),
             m AS (SELECT {cols}median(voice) AS med FROM v {group_by}),
             e AS (SELECT {cols}submitter, median(abs(x - med)) AS dev,
                          avg(abs(x - med)) AS meandev
                   FROM g JOIN m {using} GROUP BY {cols}submitter),
             d AS (SELECT {cols}median(dev) AS mad, median(meandev) AS meanad
                   FROM e {group_by})
        SELECT g.run_id, g.x, m.med,
            CASE WHEN d.mad > 0 THEN 0.6745 * (g.x - m.med) / d.mad
                 WHEN d.meanad > 0 THEN (g.x - m.med) / (1.253314 * d.meanad)
                 ELSE 0 END AS z
        FROM g JOIN m {using} JOIN d {using}
    """


def _is_outlier(scores: str) -> str:
    """Whether the run of a row of `_scores_sql` (named `scores`) is an outlier: beyond
    OUTLIER_THRESHOLD and more than OUTLIER_MIN_SHARE from its group's median."""
    return (f"(abs({scores}.z) > {OUTLIER_THRESHOLD!r}::DOUBLE AND "
            f"abs({scores}.x - {scores}.med) > {OUTLIER_MIN_SHARE!r}::DOUBLE * {scores}.med)")


def figures_sql(source: str, where: str = "", by: tuple[str, ...] | None = None) -> str:
    """group_figures' rows (two a group: with and without its outliers) of the scored
    runs of `source` matching `where` (" AND ..."), grouped by the columns `by` (none:
    `where` picks one group; its columns are then left for the caller to add)."""
    by = OUTLIER_GROUP if by is None else by
    cols = "".join(f"{c}, " for c in by)
    kept = f"""(SELECT *, with_outliers OR NOT outlier AS keep
                FROM {source}, (VALUES (true), (false)) AS v(with_outliers)
                WHERE {SCORED_RUNS}{where})"""
    return f"""
        SELECT {cols}with_outliers, {FIGURES}
        FROM {voiced(kept, f"{cols}with_outliers")}
        GROUP BY {cols}with_outliers
        HAVING count(*) FILTER (WHERE keep) > 0
    """


def rescore(con: duckdb.DuckDBPyConnection, groups: set[tuple] | None) -> None:
    """Recompute the outlier flags and scores of the given outlier groups' runs (None:
    every group) and their rows of group_figures, in the caller's transaction. Only
    changed rows of runs are written. A group at a time is a simpler statement than
    all at once: a submission's rescore (one group) costs half as much."""
    if groups is None:
        _rescore_every_group(con)
        return
    one = " AND " + " AND ".join(f"{c} IS NOT DISTINCT FROM ?" for c in OUTLIER_GROUP)
    names = ", ".join(f"? AS {c}" for c in OUTLIER_GROUP)
    for key in sorted(groups, key=str):
        _update_scores(con, _scores_sql("runs", one, by=()), list(key))
        con.execute(f"DELETE FROM group_figures WHERE {one[5:]}", list(key))
        con.execute(f"INSERT INTO group_figures BY NAME SELECT * FROM (SELECT {names}), "
                    f"({figures_sql('runs', one, by=())})", [*key, *key])


def _update_scores(con: duckdb.DuckDBPyConnection, scores: str, params: list[Any]) -> None:
    """Write the flags and scores of `scores` (a `_scores_sql`) where they changed."""
    con.execute(
        f"""
        UPDATE runs SET outlier = {_is_outlier("s")}, outlier_score = s.z
        FROM ({scores}) s
        WHERE runs.run_id = s.run_id AND (runs.outlier_score IS DISTINCT FROM s.z OR
            runs.outlier IS DISTINCT FROM {_is_outlier("s")})
        """,
        params,
    )


def _rescore_every_group(con: duckdb.DuckDBPyConnection) -> None:
    _update_scores(con, _scores_sql("runs"), [])
    # A run that left the groups (flagged on an upgrade) keeps no old outlier flag;
    # only a full rescore can find one: a run is flagged before it is ever scored.
    con.execute(f"UPDATE runs SET outlier = false, outlier_score = 0 "
                f"WHERE (outlier OR outlier_score <> 0) AND NOT ({SCORED_RUNS})")
    con.execute("DELETE FROM group_figures")
    con.execute(f"INSERT INTO group_figures BY NAME {figures_sql('runs')}")
