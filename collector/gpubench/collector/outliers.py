"""Outlier flags and the per-group figures Compare reads, computed where they are read.

Runs are scored within their outlier group (OUTLIER_GROUP: the same GPU configuration
and everything that changes what was timed) by a robust z-score of their epoch-2 time
about the median of the group's submitters' medians (one submitter, one voice).

No score is stored: a submission writes its run and moves on its group's version (one
row of the table GROUPS), so its cost does not grow with its group. A read takes the
scores of the groups it shows from GroupScores: each group's median and deviations,
computed from its runs (two grouped passes; bench/collector_scale.py times them) and
kept in memory until the group's version moves on. The read looks the versions up in
its own snapshot (one transaction), so it never scores a run against figures of other
runs than those it sees, and a group that did not change is never scored again,
however often others change (the answers computed from the scores are kept until the
runs change: database.UntilChanged).

Runs flagged as implausible (collector.plausibility) and published runs (transcribed,
not measured) are in no group (SCORED_RUNS): Compare reads them apart, the
leaderboard leaves them out.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

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
# The columns that decide which runs are "the same GPU configuration" for outliers:
# the model, the configuration, and every dimension of the comparison key
# (gpubench.comparison_key: everything that changes what was timed).
OUTLIER_GROUP = (
    "model", *CONFIG_COLUMNS,
    *(n for n in comparison_key.NAMES if n != "benchmark_version"), "benchmark_version",
)
# The runs that belong to outlier groups (and so to Compare's figures): measured, OK,
# not flagged as implausible.
SCORED_RUNS = ("status = 'ok' AND epoch2_seconds IS NOT NULL AND NOT published "
               "AND NOT flagged")
# The figures whose medians are taken submitter first (one submitter, one voice): each
# submitter's median of its runs, then the median of those.
VOICED = ("epoch2_seconds", "train_images_per_second", "peak_memory_bytes",
          "memory_total_bytes", "energy_per_epoch_joules", "images_per_joule")
# The runs' columns FIGURES reads.
FIGURE_INPUTS = ("submitter", "epoch2_seconds", "batch_per_gpu", "global_batch",
                 "largest_batch_per_gpu", *VOICED)
# Per submitter of a set of runs (those alike in `keep`): what FIGURES combines.
_VOICE = ", ".join((
    "count(*) AS n", "min(epoch2_seconds) AS epoch2_min", "max(epoch2_seconds) AS epoch2_max",
    "max(batch_per_gpu) AS batch", "max(global_batch) AS global_batch",
    "max(largest_batch_per_gpu) AS largest",
    *(f"median({c}) AS voice_{c}" for c in VOICED),
))
# The figures of a set of runs (those with `keep` true) from its submitters' rows
# (_VOICE), each named as its GroupFigures field.
FIGURES = """
    coalesce(sum(n) FILTER (WHERE keep), 0)::BIGINT AS runs,
    coalesce(sum(n) FILTER (WHERE NOT keep), 0)::BIGINT AS outliers_excluded,
    median(voice_epoch2_seconds) FILTER (WHERE keep) AS epoch2_median_seconds,
    min(epoch2_min) FILTER (WHERE keep) AS epoch2_min_seconds,
    max(epoch2_max) FILTER (WHERE keep) AS epoch2_max_seconds,
    median(voice_train_images_per_second) FILTER (WHERE keep)
        AS train_images_per_second_median,
    max(batch) FILTER (WHERE keep) AS max_batch_per_gpu,
    max(global_batch) FILTER (WHERE keep) AS max_global_batch,
    median(voice_peak_memory_bytes) FILTER (WHERE keep) AS peak_memory_median_bytes,
    median(voice_memory_total_bytes) FILTER (WHERE keep) AS memory_total_bytes,
    median(voice_energy_per_epoch_joules) FILTER (WHERE keep)
        AS energy_per_epoch_median_joules,
    median(voice_images_per_joule) FILTER (WHERE keep) AS images_per_joule_median,
    max(largest) FILTER (WHERE keep) AS largest_batch_per_gpu_max,
    count(*) FILTER (WHERE keep) AS submitters
"""
# FIGURES' names, in its order.
FIGURE_NAMES = ("runs", "outliers_excluded", "epoch2_median_seconds", "epoch2_min_seconds",
                "epoch2_max_seconds", "train_images_per_second_median", "max_batch_per_gpu",
                "max_global_batch", "peak_memory_median_bytes", "memory_total_bytes",
                "energy_per_epoch_median_joules", "images_per_joule_median",
                "largest_batch_per_gpu_max", "submitters")


def group_id() -> str:
    """A run's outlier group as one number (SQL), for the joins of the scoring (a join
    on the group's 17 columns costs three times as much): a 64-bit hash of its columns,
    so that among a million groups two share one with a chance of about 3 in 10^8."""
    return f"hash({', '.join(OUTLIER_GROUP)})"


def figures_sql(relation: str, partition: str, *, per_voice: str = "", extra: str = "",
                having: str = "") -> str:
    """The FIGURES of the rows of `relation` (which has `keep` and `submitter` and the
    runs' columns), per set of rows alike in `partition` (SQL columns; "" for one set),
    with their columns first. One submitter, one voice: each submitter's runs are
    reduced to one row first (_VOICE, and `per_voice`: more of its aggregates, ", ..."),
    FIGURES and `extra` (", ...") are taken over those rows."""
    cols = f"{partition}, " if partition else ""
    return f"""
        SELECT {cols}{FIGURES}{extra}
        FROM (SELECT {cols}keep, submitter, {_VOICE}{per_voice}
              FROM {relation} GROUP BY ALL)
        {f"GROUP BY {partition}" if partition else ""}
        {having}
    """


def group_stats_sql(groups: str) -> str:
    """Per outlier group of the runs matching `groups` (SQL on the runs' columns that
    takes groups whole: a filter of the group's own columns, say; GroupScores keeps
    them): its id (group_id)
    and the median (med), median absolute deviation (mad) and mean absolute deviation
    (meanad) its scores are taken against.

    One submitter, one voice: a group's median is the median of its submitters' medians
    of epoch2_seconds, so that a flood of runs from one token cannot move it to its side
    and make the others' runs outliers. The median absolute deviation about that median
    is taken the same way, submitter first: the median of each submitter's runs'
    absolute deviations, then across submitters (with one submitter, the runs' MAD).
    """
    return f"""
        WITH g AS MATERIALIZED (SELECT {group_id()} AS gid, submitter, epoch2_seconds AS x
                                FROM runs WHERE {SCORED_RUNS} AND ({groups})),
             m AS (SELECT gid, median(voice) AS med
                   FROM (SELECT gid, submitter, median(x) AS voice FROM g GROUP BY ALL)
                   GROUP BY gid),
             e AS (SELECT gid, submitter, median(abs(x - med)) AS dev,
                          avg(abs(x - med)) AS meandev
                   FROM g JOIN m USING (gid) GROUP BY ALL)
        SELECT gid, any_value(med) AS med, median(dev) AS mad, median(meandev) AS meanad
        FROM e JOIN m USING (gid) GROUP BY gid
    """


# A run's robust z-score from its group's row of group_stats_sql (named s): z =
# 0.6745 * (x - median) / MAD; where the MAD is 0 (half the runs identical) the mean
# absolute deviation stands in, scaled to the MAD's consistency constant (Iglewicz and
# Hoaglin).
_Z = """CASE WHEN s.mad > 0 THEN 0.6745 * (r.epoch2_seconds - s.med) / s.mad
             WHEN s.meanad > 0 THEN (r.epoch2_seconds - s.med) / (1.253314 * s.meanad)
             ELSE 0 END"""
# Whether the run is an outlier: beyond OUTLIER_THRESHOLD and more than
# OUTLIER_MIN_SHARE from its group's median.
_IS_OUTLIER = (f"(abs({_Z}) > {OUTLIER_THRESHOLD!r}::DOUBLE AND "
               f"abs(r.epoch2_seconds - s.med) > {OUTLIER_MIN_SHARE!r}::DOUBLE * s.med)")


def scored(runs: str) -> str:
    """The runs matching `runs` (SQL on the runs' columns) as a relation with the runs'
    columns and two more, `outlier` and `outlier_score`, as their groups' scores make
    them (false and 0 for a run in no group: see SCORED_RUNS). Its parameters are
    `runs`', then the four lists of GroupScores.of for groups that hold every group of
    those runs."""
    return f"""
        (SELECT r.* EXCLUDE (gid), coalesce({_IS_OUTLIER}, false) AS outlier,
                coalesce({_Z}, 0) AS outlier_score
         FROM (SELECT *, {group_id()} AS gid FROM runs WHERE {runs}) r
         LEFT JOIN (SELECT unnest(?::UBIGINT[]) AS gid, unnest(?::DOUBLE[]) AS med,
                           unnest(?::DOUBLE[]) AS mad, unnest(?::DOUBLE[]) AS meanad) s
             ON s.gid = r.gid AND {SCORED_RUNS})
    """


def groups_of_runs() -> str:
    """GroupScores.of's `groups` for the groups of some runs: its one parameter is a
    list of run ids."""
    return f"gid IN (SELECT {group_id()} FROM runs WHERE list_contains(?, run_id))"


# The outlier groups, one row each: `gid` (group_id), the group's columns, and a
# `version` that every change of the group's runs moves on in the same transaction.
# Made from the runs when the database opens (`index_groups`); only this process's
# GroupScores read the versions, so they start again at 0.
GROUPS = "run_groups"


def index_groups(con: Any) -> None:
    """Make the table GROUPS from the runs (in the caller's transaction: when the
    database opens, after a backup is loaded)."""
    con.execute(f"""CREATE OR REPLACE TABLE {GROUPS} AS
                    SELECT {group_id()} AS gid, 0::BIGINT AS version, {', '.join(OUTLIER_GROUP)}
                    FROM runs GROUP BY ALL""")
    # A write finds its group by the index (not unique: two groups may share a hash).
    con.execute(f"CREATE INDEX {GROUPS}_gid ON {GROUPS} (gid)")


def changed() -> str:
    """What a write returns of each run it inserts or deletes (RETURNING ...), for
    groups_changed."""
    return f"run_id, {group_id()}"


def groups_changed(con: Any, changed: Sequence[tuple[str, int]]) -> None:
    """Move on the version of the group of each (run_id, group id) of `changed` (what a
    write's RETURNING `changed()` gave), in the write's transaction; a group new to GROUPS
    is added, its columns read from its run."""
    first = dict((gid, run_id) for run_id, gid in reversed(changed))
    if not first:
        return
    for gid, run_id in first.items():  # (a batch's runs are of a group or two)
        if not con.execute(f"UPDATE {GROUPS} SET version = version + 1 WHERE gid = ? "
                           "RETURNING gid", [gid]).fetchall():
            con.execute(f"INSERT INTO {GROUPS} SELECT {group_id()}, 1, "
                        f"{', '.join(OUTLIER_GROUP)} FROM runs WHERE run_id = ?", [run_id])


class GroupScores:
    """Each outlier group's median, MAD and mean absolute deviation (group_stats_sql),
    kept with the version of the group they were computed at; safe to share between
    threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        # group id -> (version, (med, mad, meanad) or None: no scored runs)
        self._kept: dict[int, tuple[int, tuple[float, float, float] | None]] = {}

    def of(self, con: Any, groups: str, params: Sequence[Any]) -> list[list[Any]]:
        """The scores of the groups matching `groups` (SQL on GROUPS' columns, with
        `params`) as `scored` takes them: group ids, medians, MADs, mean absolute
        deviations. `con` must be in the transaction of the read that uses them: the
        versions are looked up in its snapshot, and a group whose kept scores are of
        another version is scored again from its runs in that snapshot."""
        found = con.execute(f"SELECT gid, version, model, gpu_name FROM {GROUPS} "
                            f"WHERE {groups}", list(params)).fetchall()
        with self._lock:
            kept = {gid: self._kept.get(gid) for gid, *_ in found}
        stale = [row for row in found
                 if (held := kept[row[0]]) is None or held[0] != row[1]]
        if stale:
            # The stale groups' runs found by their model and card first (a scan of two
            # columns), then by their group id.
            computed = {gid: (med, mad, meanad) for gid, med, mad, meanad in con.execute(
                group_stats_sql("list_contains(?, model) AND list_contains(?, gpu_name) AND "
                                f"list_contains(?::UBIGINT[], {group_id()})"),
                [sorted({r[2] for r in stale}), sorted({r[3] for r in stale}),
                 [r[0] for r in stale]]).fetchall()}
            with self._lock:
                for gid, version, *_ in stale:
                    kept[gid] = fresh = (version, computed.get(gid))
                    held = self._kept.get(gid)
                    if held is None or held[0] <= version:  # versions only move on
                        self._kept[gid] = fresh
        scores: list[list[Any]] = [[], [], [], []]
        for gid, held in kept.items():
            if held is not None and held[1] is not None:
                for column, value in zip(scores, (gid, *held[1]), strict=True):
                    column.append(value)
        return scores
