"""The collector database's schema, as named migrations applied in order.

Each migration is a name and the SQL that moves the schema one step forward (and,
where SQL cannot compute a new column, a Python data step over the stored records). The
names applied so far are recorded in `schema_migrations`, so opening an older
database upgrades it and opening a current one does nothing. Migrations are
only ever appended; one already released is never edited.

Outlier flags and per-group figures are not stored: they are computed where they are
read (collector.outliers), from the runs. Until 0013 they were, in the table
group_figures and the runs' columns outlier and outlier_score; 0013 drops the table and
clears the columns, which stay (false and 0) so that backups of every version load.
The one table derived from the runs, the outlier groups with their versions
(outliers.GROUPS), is made again whenever the database opens.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb

from gpubench import comparison_key, record
from gpubench.collector import outliers, rows
from gpubench.collector.database import transaction
from gpubench.collector.errors import SchemaTooNew
from gpubench.v1 import run_pb2

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Migration:
    """One named step of the schema.

    `backfill`, when set, is a data step in Python run after the statements in the
    same transaction, given the DuckDB connection: for columns whose values only the
    stored records hold (SQL cannot read a protobuf).

    `refill_group_figures` says that the step changed what the outlier groups are
    keyed by. It asked for the stored figures to be computed again until 0013; they
    are computed where read since, and it asks for nothing more.
    """

    name: str
    statements: tuple[str, ...]
    refill_group_figures: bool = False
    backfill: Callable[[Any], None] | None = None


# How many stored records a backfill reads at a time.
BACKFILL_CHUNK = 10_000


def stored_records(con: Any) -> Iterator[list[tuple[str, bytes]]]:
    """Every stored run as (run_id, record), BACKFILL_CHUNK at a time in run_id order: what
    each backfill below reads, so that a large database is never read whole."""
    after = ""
    while True:
        found = con.execute(
            "SELECT run_id, record FROM runs WHERE run_id > ? ORDER BY run_id LIMIT ?",
            [after, BACKFILL_CHUNK],
        ).fetchall()
        if not found:
            return
        after = found[-1][0]
        yield found


def backfill_settings(con: Any) -> None:
    """Set runs.settings from each stored record's config (the column's default is
    "keras", so only the runs with an option on are written)."""
    for found in stored_records(con):
        changed = [
            (run_id, label)
            for run_id, blob in found
            if (label := record.settings_label(run_pb2.Run.FromString(blob).config)) != record.KERAS
        ]
        if changed:
            con.execute(
                """
                UPDATE runs SET settings = s.settings
                FROM (SELECT unnest(?::VARCHAR[]) AS run_id,
                             unnest(?::VARCHAR[]) AS settings) s
                WHERE runs.run_id = s.run_id
                """,
                [[r for r, _ in changed], [label for _, label in changed]],
            )


def backfill_batch_rule(con: Any) -> None:
    """Set runs.batch_rule and runs.largest_batch_per_gpu from each stored record (the
    columns' defaults are '' and 0, so only the runs that say more are written): a
    record of schema 1 says "given" or "largest" by its batch_choice."""
    for found in stored_records(con):
        changed = []
        for run_id, blob in found:
            run = run_pb2.Run.FromString(blob)
            rule, largest = record.batch_rule(run.config), rows.largest_batch_per_gpu(run)
            if rule or largest:
                changed.append((run_id, rule, largest))
        if changed:
            con.execute(
                """
                UPDATE runs SET batch_rule = s.batch_rule,
                                largest_batch_per_gpu = s.largest_batch_per_gpu
                FROM (SELECT unnest(?::VARCHAR[]) AS run_id,
                             unnest(?::VARCHAR[]) AS batch_rule,
                             unnest(?::INTEGER[]) AS largest_batch_per_gpu) s
                WHERE runs.run_id = s.run_id
                """,
                [[c[0] for c in changed], [c[1] for c in changed], [c[2] for c in changed]],
            )


# The columns migration 0008 adds to runs (and fills from each stored record), with the
# GPU name, which it files normalised from then on.
_TRUST_COLUMNS = ("gpu_name", "pipeline", "weights", "data", "epochs", "memory_limit_bytes",
                  "published", "flagged", "flag_reasons")
_TRUST_TYPES = ("VARCHAR", "VARCHAR", "VARCHAR", "VARCHAR", "INTEGER", "UBIGINT", "BOOLEAN",
                "BOOLEAN", "VARCHAR")


def backfill_trust(con: Any) -> None:
    """Fill migration 0008's columns from each stored record as `rows.run_row` makes
    them now: the pipeline as it ran, weights, data, epochs, memory limit, whether it is
    published, its plausibility flags, and the GPU name normalised."""
    sets = ", ".join(f"{c} = s.{c}" for c in _TRUST_COLUMNS)
    unnests = ", ".join(f"unnest(?::{t}[]) AS {c}" for c, t in zip(_TRUST_COLUMNS, _TRUST_TYPES,
                                                                       strict=True))
    for found in stored_records(con):
        made = [rows.run_row(run_pb2.Run.FromString(blob), "") for _, blob in found]
        con.execute(
            f"""
            UPDATE runs SET {sets}
            FROM (SELECT unnest(?::VARCHAR[]) AS run_id, {unnests}) s
            WHERE runs.run_id = s.run_id
            """,
            [[run_id for run_id, _ in found], *([row[c] for row in made] for c in _TRUST_COLUMNS)],
        )



def backfill_flags(con: Any) -> None:
    """Flag each stored run again as `rows.flag_reasons` does now (the GPU catalogue's
    names, the ceilings of a run's own configuration, the energy its cards can draw):
    a run stored before those checks keeps no lighter judgement than a new one gets."""
    for found in stored_records(con):
        reasons = [rows.flag_reasons(run_pb2.Run.FromString(blob)) for _, blob in found]
        con.execute(
            """
            UPDATE runs SET flagged = s.flagged, flag_reasons = s.flag_reasons
            FROM (SELECT unnest(?::VARCHAR[]) AS run_id, unnest(?::BOOLEAN[]) AS flagged,
                         unnest(?::VARCHAR[]) AS flag_reasons) s
            WHERE runs.run_id = s.run_id
              AND (runs.flagged <> s.flagged OR runs.flag_reasons <> s.flag_reasons)
            """,
            [[run_id for run_id, _ in found], [bool(r) for r in reasons],
             [rows.REASON_SEPARATOR.join(r) for r in reasons]],
        )


# -- a new dimension of the comparison key -------------------------------------------------

def dimension_column(name: str) -> str:
    """The runs column of the comparison key's dimension `name` (a row of
    gpubench.comparison_key.DIMENSIONS), empty until `backfill_dimension(name)` fills
    it. The outlier groups are keyed by it too (refill_group_figures=True says so)."""
    dimension = comparison_key.BY_NAME[name]
    default = "0" if dimension.numeric else "''"
    return f"ALTER TABLE runs ADD COLUMN {name} {dimension.sql_type} NOT NULL DEFAULT {default}"


def backfill_dimension(name: str) -> Callable[[Any], None]:
    """The data step of `dimension_column(name)`: runs.<name> from each stored
    record, as comparison_key.key_of reads it (only the runs whose value is not the
    column's default are written)."""
    dimension = comparison_key.BY_NAME[name]

    def backfill(con: Any) -> None:
        for found in stored_records(con):
            changed = [(run_id, value) for run_id, blob in found
                       if (value := dimension.of(run_pb2.Run.FromString(blob)))
                       != dimension.empty]
            if changed:
                con.execute(
                    f"""
                    UPDATE runs SET {name} = s.value
                    FROM (SELECT unnest(?::VARCHAR[]) AS run_id,
                                 unnest(?::{dimension.sql_type}[]) AS value) s
                    WHERE runs.run_id = s.run_id
                    """,
                    [[r for r, _ in changed], [v for _, v in changed]],
                )

    return backfill


def backfill_model_identity(con: Any) -> None:
    """The data step of 0011_model_identity: both of its dimensions from the records."""
    backfill_dimension("model_fingerprint")(con)
    backfill_dimension("unit")(con)


MIGRATIONS: tuple[Migration, ...] = (
    Migration(
        "0001_runs",
        (
            """
            CREATE TABLE runs (
                run_id VARCHAR PRIMARY KEY,
                content_sha256 VARCHAR NOT NULL,
                submitter VARCHAR NOT NULL,
                received_at TIMESTAMP NOT NULL,          -- UTC
                created_at TIMESTAMP,                    -- UTC, as the agent said
                schema_version INTEGER NOT NULL,
                benchmark_version VARCHAR NOT NULL,
                label VARCHAR NOT NULL,
                status VARCHAR NOT NULL,                 -- ok, out_of_memory, error, interrupted
                model VARCHAR NOT NULL,
                backend VARCHAR NOT NULL,
                precision VARCHAR NOT NULL,
                image_size INTEGER NOT NULL,
                gpu_name VARCHAR NOT NULL,               -- '' for a CPU-only run
                gpu_count INTEGER NOT NULL,
                batch_per_gpu INTEGER NOT NULL,
                global_batch INTEGER NOT NULL,
                train_images INTEGER NOT NULL,
                epoch2_seconds DOUBLE,                   -- NULL unless measured
                train_images_per_second DOUBLE,
                peak_memory_bytes UBIGINT,               -- allocator peak, the largest of the GPUs
                memory_total_bytes UBIGINT,              -- the card's memory (smallest of the GPUs)
                energy_per_epoch_joules DOUBLE,          -- NULL when not measured
                images_per_joule DOUBLE,                 -- train_images / measured epoch's energy
                outlier BOOLEAN NOT NULL DEFAULT false,
                outlier_score DOUBLE NOT NULL DEFAULT 0,
                record BLOB NOT NULL                     -- the submitted gpubench.v1.Run
            )
            """,
        ),
    ),
    Migration(
        "0002_tokens",
        (
            """
            CREATE TABLE tokens (
                name VARCHAR PRIMARY KEY,
                secret_sha256 VARCHAR NOT NULL UNIQUE,   -- the secret itself is never stored
                admin BOOLEAN NOT NULL,
                created_at TIMESTAMP NOT NULL,
                revoked BOOLEAN NOT NULL DEFAULT false,
                last_used_at TIMESTAMP
            )
            """,
        ),
    ),
    Migration(
        "0003_group_figures",
        # Compare's figures per outlier group (group_figures), kept current by the store on
        # every change, so a comparison reads a few rows instead of aggregating every run.
        # Two rows per group: over the runs that are not outliers, and over all.
        (),
        refill_group_figures=True,
    ),
    Migration(
        "0004_group_figures_by_train_images",
        # The epoch-2 time depends on how many images an epoch trains on: a smoke run
        # (agent --limit-images) is not the same settings as a full run, so the outlier
        # groups and their figures are keyed by train_images too.
        (),
        refill_group_figures=True,
    ),
    Migration(
        "0005_settings",
        # How a run computed and fed the network (gpubench.record.settings_label:
        # "keras", "kernels+data-on-device", ...) changes its speed as much as the
        # software does: a column of its own, filled from the stored records, and a key
        # of the outlier groups and their figures.
        ("ALTER TABLE runs ADD COLUMN settings VARCHAR NOT NULL DEFAULT 'keras'",),
        refill_group_figures=True,
        backfill=backfill_settings,
    ),
    Migration(
        "0006_quarantine",
        (
            # Acknowledged runs the database refused to store (a value past its column's
            # type): kept here with the reason, out of the way of the runs after them,
            # until `gpubench-collector quarantine retry` stores or `... drop` drops them.
            # Only text, bytes and times, which any journal entry fits.
            """
            CREATE TABLE quarantine (
                run_id VARCHAR PRIMARY KEY,
                submitter VARCHAR NOT NULL,
                received_at TIMESTAMP NOT NULL,          -- UTC, when it was acknowledged
                content_sha256 VARCHAR NOT NULL,
                record BLOB NOT NULL,                    -- the acknowledged gpubench.v1.Run
                reason VARCHAR NOT NULL,                 -- what the database said, last try
                quarantined_at TIMESTAMP NOT NULL        -- UTC, the last try
            )
            """,
        ),
    ),
    Migration(
        "0007_batch_rule",
        (
            # How the batch was chosen (Config.batch_rule: "steps", "largest", "given",
            # "quick") changes a run's speed: the largest batch that fits trains faster
            # than the steps rule's, a given one as it may. A column of its own, filled
            # from the stored records, and a key of the outlier groups and their figures;
            # with the memory answer, the largest batch per GPU the search confirmed.
            "ALTER TABLE runs ADD COLUMN batch_rule VARCHAR NOT NULL DEFAULT ''",
            "ALTER TABLE runs ADD COLUMN largest_batch_per_gpu INTEGER NOT NULL DEFAULT 0",
        ),
        refill_group_figures=True,
        backfill=backfill_batch_rule,
    ),
    Migration(
        "0008_like_for_like_and_flags",
        (
            # What else changes what was timed, each a key of the outlier groups and their
            # figures: the pipeline as it ran (a cached run may have streamed), the
            # weights, the data (gpubench.record.data_label), the epochs, and a
            # --memory-limit (a card of its own). A published run (transcribed, not
            # measured) and a run flagged as implausible (with the reasons) are kept out
            # of the groups. The GPU name is filed normalised (NFKC, white space).
            "ALTER TABLE runs ADD COLUMN pipeline VARCHAR NOT NULL DEFAULT ''",
            "ALTER TABLE runs ADD COLUMN weights VARCHAR NOT NULL DEFAULT ''",
            "ALTER TABLE runs ADD COLUMN data VARCHAR NOT NULL DEFAULT ''",
            "ALTER TABLE runs ADD COLUMN epochs INTEGER NOT NULL DEFAULT 0",
            "ALTER TABLE runs ADD COLUMN memory_limit_bytes UBIGINT NOT NULL DEFAULT 0",
            "ALTER TABLE runs ADD COLUMN published BOOLEAN NOT NULL DEFAULT false",
            "ALTER TABLE runs ADD COLUMN flagged BOOLEAN NOT NULL DEFAULT false",
            "ALTER TABLE runs ADD COLUMN flag_reasons VARCHAR NOT NULL DEFAULT ''",
        ),
        refill_group_figures=True,
        backfill=backfill_trust,
    ),
    Migration(
        "0009_gpu_catalogue_flags",
        # No schema change: the stored runs flagged again by today's checks (unrecognised
        # and look-alike GPU names, per-configuration ceilings, energy), and the outlier
        # groups and their figures recomputed without the runs newly flagged.
        (),
        refill_group_figures=True,
        backfill=backfill_flags,
    ),
    Migration(
        "0010_group_submitters",
        # How many submitters stand behind each group's figures (one submitter, one
        # voice: the figures are the medians of the submitters' medians).
        (),
        refill_group_figures=True,
    ),
    Migration(
        "0011_model_identity",
        # Any model, not only B0, B3 and B7: a run's model fingerprint and the unit of its
        # speed (images or tokens a second) are dimensions of the comparison key.
        (dimension_column("model_fingerprint"), dimension_column("unit")),
        refill_group_figures=True,
        backfill=backfill_model_identity,
    ),
    Migration(
        "0012_gpu_catalogue_cards",
        # No schema change: the catalogue lists a row per card since Pascal; the stored
        # runs flagged again by it (a card it now knows no longer flagged unrecognised),
        # and the outlier groups and their figures recomputed.
        (),
        refill_group_figures=True,
        backfill=backfill_flags,
    ),
    Migration(
        "0013_outliers_where_read",
        # The outlier flags and each group's figures are computed where they are read
        # (collector.outliers): a submission no longer rewrites its group. The stored
        # copies go; the runs' two columns stay, cleared, for the backups' shape.
        (
            "DROP TABLE IF EXISTS group_figures",
            "UPDATE runs SET outlier = false, outlier_score = 0 "
            "WHERE outlier OR outlier_score <> 0",
        ),
    ),
    Migration(
        "0014_card_expectations",
        # No schema change: every catalogued card held to what is expected of it (its
        # verified runs, or another card's scaled to it), whole names compared for
        # look-alikes, MIG devices as their cards: the stored runs flagged again by it.
        (),
        backfill=backfill_flags,
    ),
    Migration(
        "0015_math_mode",
        # How float32 convolutions and matrix products ran (Config.math_mode: TF32 or full
        # float32) is a dimension of the comparison key; older records leave it empty.
        (dimension_column("math_mode"),),
        refill_group_figures=True,
        backfill=backfill_dimension("math_mode"),
    ),
)


CREATE_LEDGER = """
CREATE TABLE IF NOT EXISTS schema_migrations (
    name VARCHAR PRIMARY KEY,
    applied_at TIMESTAMP NOT NULL
)
"""


def pending(applied: set[str]) -> list[Migration]:
    """The migrations not yet in `applied`, in order."""
    return [m for m in MIGRATIONS if m.name not in applied]


def unknown(applied: set[str]) -> list[str]:
    """Names recorded in the database that this code does not know (a newer collector's)."""
    known = {m.name for m in MIGRATIONS}
    return sorted(applied - known)


def apply(con: duckdb.DuckDBPyConnection, path: Path) -> None:
    """Bring the schema of the database at `path` (open on `con`) up to date: every
    pending migration in order, each in a transaction of its own. SchemaTooNew when a
    newer collector wrote it."""
    con.execute(CREATE_LEDGER)
    applied = {name for (name,) in con.execute("SELECT name FROM schema_migrations").fetchall()}
    newer = unknown(applied)
    if newer:
        raise SchemaTooNew(
            f"{path}: written by a newer collector (migrations {', '.join(newer)}); "
            "upgrade gpubench"
        )
    for migration in pending(applied):
        with transaction(con):
            for statement in migration.statements:
                con.execute(statement)
            if migration.backfill is not None:
                migration.backfill(con)
            con.execute("INSERT INTO schema_migrations VALUES (?, ?)",
                        [migration.name, rows.utc_now()])
    # The table of outlier groups is derived from the runs: made again at every opening,
    # so that it holds every group whatever wrote the runs before (a migration, an
    # earlier version). Where that cannot be written (a full disk), the one there
    # serves: the store writes it with every run.
    try:
        with transaction(con):
            outliers.index_groups(con)
    except duckdb.Error as exc:
        if not con.execute("SELECT count(*) FROM duckdb_tables() WHERE table_name = ?",
                           [outliers.GROUPS]).fetchall()[0][0]:
            raise
        log.warning("%s: the table of outlier groups was not made again (%s); the one "
                    "there serves", path, exc)
