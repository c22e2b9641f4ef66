"""The collector database's schema, as named migrations applied in order.

The first, 0001_schema, makes the whole schema; each later one moves it one step
forward. The names applied so far are recorded in `schema_migrations`, so opening an
older database upgrades it and opening a current one does nothing. Migrations are only
ever appended; one already released is never edited.

A database whose `schema_migrations` names migrations but not 0001_schema was made
before the first release, by a schema this code does not know: it is refused, as is one
a newer collector wrote.

Outlier flags and per-group figures are not stored: they are computed where they are
read (collector.outliers), from the runs (its relation `scored` adds each run's
`outlier` and `outlier_score`). The one table
derived from the runs, the outlier groups with their versions (outliers.GROUPS), is
made again whenever the database opens.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import duckdb

from gpubench.collector import outliers, rows
from gpubench.collector.database import transaction
from gpubench.collector.errors import SchemaTooNew, SchemaUnreleased

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Migration:
    """One named step of the schema: the SQL statements that make it, run in one
    transaction with its record in `schema_migrations`."""

    name: str
    statements: tuple[str, ...]


MIGRATIONS: tuple[Migration, ...] = (
    Migration(
        "0001_schema",
        (
            # A stored run: what it is compared by, extracted from its record at
            # submission (collector.rows.run_row), and the record itself.
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
                gpu_name VARCHAR NOT NULL,               -- normalised; '' for a CPU-only run
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
                record BLOB NOT NULL,                    -- the submitted gpubench.v1.Run
                -- What else changes what was timed, each a dimension of the comparison
                -- key (gpubench.comparison_key) and a key of the outlier groups:
                settings VARCHAR NOT NULL DEFAULT 'keras', -- gpubench.record.settings_label
                batch_rule VARCHAR NOT NULL DEFAULT '',  -- steps, largest, given, quick
                largest_batch_per_gpu INTEGER NOT NULL DEFAULT 0, -- the search's answer
                pipeline VARCHAR NOT NULL DEFAULT '',    -- as it ran
                weights VARCHAR NOT NULL DEFAULT '',
                data VARCHAR NOT NULL DEFAULT '',        -- gpubench.record.data_label
                epochs INTEGER NOT NULL DEFAULT 0,
                memory_limit_bytes UBIGINT NOT NULL DEFAULT 0, -- --memory-limit: a card of its own
                -- A published run (transcribed, not measured) and a run flagged as
                -- implausible (with the reasons) are kept out of the groups.
                published BOOLEAN NOT NULL DEFAULT false,
                flagged BOOLEAN NOT NULL DEFAULT false,
                flag_reasons VARCHAR NOT NULL DEFAULT '',
                model_fingerprint VARCHAR NOT NULL DEFAULT '',
                unit VARCHAR NOT NULL DEFAULT '',        -- images or tokens a second
                math_mode VARCHAR NOT NULL DEFAULT ''    -- tf32 or float32; '' unrecorded
            )
            """,
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
    """Names recorded in the database that this code does not know (a newer collector's,
    or, without the first of MIGRATIONS, a collector's from before the first release)."""
    known = {m.name for m in MIGRATIONS}
    return sorted(applied - known)


def apply(con: duckdb.DuckDBPyConnection, path: Path) -> None:
    """Bring the schema of the database at `path` (open on `con`) up to date: every
    pending migration in order, each in a transaction of its own. SchemaUnreleased when
    a collector from before the first release made it, SchemaTooNew when a newer one
    wrote it; either leaves the file as it was."""
    con.execute(CREATE_LEDGER)
    applied = {name for (name,) in con.execute("SELECT name FROM schema_migrations").fetchall()}
    strange = unknown(applied)
    if strange and MIGRATIONS[0].name not in applied:
        shown = strange[0] if len(strange) == 1 else f"{strange[0]} to {strange[-1]}"
        raise SchemaUnreleased(
            f"{path}: made by a gpubench from before its first release (migrations "
            f"{shown}), which this version cannot open. Start a new database file "
            "(another --db) and load the runs into it with `gpubench-collector import`: "
            "each agent keeps the records it sent in its spool's sent/ folder. Or keep "
            "serving this file with the gpubench that made it; nothing in it was changed."
        )
    if strange:
        raise SchemaTooNew(
            f"{path}: written by a newer collector (migrations {', '.join(strange)}); "
            "upgrade gpubench"
        )
    for migration in pending(applied):
        with transaction(con):
            for statement in migration.statements:
                con.execute(statement)
            con.execute("INSERT INTO schema_migrations VALUES (?, ?)",
                        [migration.name, rows.utc_now()])
    # The table of outlier groups is derived from the runs: made again at every opening,
    # so that it holds every group whatever wrote the runs before (a restore, an earlier
    # release). Where that cannot be written (a full disk), the one there serves: the
    # store writes it with every run.
    try:
        with transaction(con):
            outliers.index_groups(con)
    except duckdb.Error as exc:
        if not con.execute("SELECT count(*) FROM duckdb_tables() WHERE table_name = ?",
                           [outliers.GROUPS]).fetchall()[0][0]:
            raise
        log.warning("%s: the table of outlier groups was not made again (%s); the one "
                    "there serves", path, exc)
