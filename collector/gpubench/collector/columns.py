"""The runs table's columns as the collector writes them: their types, the insert, and
which values a column cannot hold.

Rows are dicts made by `collector.rows.run_row`, keyed by these column names; the store
and a restore insert them with `INSERT_ROWS`. One list of columns for all, so that a
column added by a migration is added here once (a dimension of the comparison key: not
even that).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pyarrow as pa

from gpubench import comparison_key

# The runs table's columns with their Arrow types, in the table's order (columns added
# by later migrations come last, where ALTER TABLE puts them); a dimension of the
# comparison key (gpubench.comparison_key) not named here comes after them, typed by
# the key. Every insert names its columns, so the order is the table's only by habit.
_NAMED_COLUMNS = (
        ("run_id", pa.string()),
        ("content_sha256", pa.string()),
        ("submitter", pa.string()),
        ("received_at", pa.timestamp("us")),
        ("created_at", pa.timestamp("us")),
        ("schema_version", pa.int32()),
        ("benchmark_version", pa.string()),
        ("label", pa.string()),
        ("status", pa.string()),
        ("model", pa.string()),
        ("backend", pa.string()),
        ("precision", pa.string()),
        ("image_size", pa.int32()),
        ("gpu_name", pa.string()),
        ("gpu_count", pa.int32()),
        ("batch_per_gpu", pa.int32()),
        ("global_batch", pa.int32()),
        ("train_images", pa.int32()),
        ("epoch2_seconds", pa.float64()),
        ("train_images_per_second", pa.float64()),
        ("peak_memory_bytes", pa.uint64()),
        ("memory_total_bytes", pa.uint64()),
        ("energy_per_epoch_joules", pa.float64()),
        ("images_per_joule", pa.float64()),
        ("record", pa.binary()),
        ("settings", pa.string()),
        ("batch_rule", pa.string()),
        ("largest_batch_per_gpu", pa.int32()),
        ("pipeline", pa.string()),
        ("weights", pa.string()),
        ("data", pa.string()),
        ("epochs", pa.int32()),
        ("memory_limit_bytes", pa.uint64()),
        ("published", pa.bool_()),
        ("flagged", pa.bool_()),
        ("flag_reasons", pa.string()),
)
RUN_COLUMNS = pa.schema([
    *_NAMED_COLUMNS,
    *((d.name, pa.int32() if d.numeric else pa.string()) for d in comparison_key.DIMENSIONS
      if d.name not in {name for name, _ in _NAMED_COLUMNS}),
])

# The runs table's column types in DuckDB's words, for the insert below.
SQL_TYPES = {
    pa.string(): "VARCHAR", pa.timestamp("us"): "TIMESTAMP", pa.int32(): "INTEGER",
    pa.int64(): "BIGINT",
    pa.float64(): "DOUBLE", pa.uint64(): "UBIGINT", pa.bool_(): "BOOLEAN", pa.binary(): "BLOB",
}
# The range of each integer column type, to say which value did not fit.
_COLUMN_RANGES = {pa.int32(): (-(2**31), 2**31 - 1), pa.uint64(): (0, 2**64 - 1)}


# Inserts a batch given as one list per column: a single parameterised statement, which
# costs DuckDB less per transaction than registering an Arrow table or one row at a time.
# Each column is named (AS c1, ...): unnamed, DuckDB names it after its expression and
# renders every value of the list into that name, the records' bytes included, which
# cost about a fifth of the statement's CPU with 16 runs.
def insert_rows_sql(columns: pa.Schema) -> str:
    """The insert of a batch of rows of `columns` (the runs table's, in its order)."""
    return f"INSERT INTO runs ({', '.join(columns.names)}) SELECT " + ", ".join(
        f"unnest(${i}::{SQL_TYPES[field.type]}[]) AS c{i}"
        for i, field in enumerate(columns, start=1)
    )


INSERT_ROWS = insert_rows_sql(RUN_COLUMNS)


def column_lists(
    rows: Sequence[dict[str, Any]], schema: pa.Schema | None = None
) -> list[list[Any]]:
    """`rows` as one list per column of `schema` (RUN_COLUMNS unless given): the
    parameters of INSERT_ROWS."""
    return [[r[name] for r in rows] for name in (schema or RUN_COLUMNS).names]


# RUN_COLUMNS' names, and each integer column's range and type's name, made once per
# schema (`_ranges`): the schema's lookups (an Arrow type's hash, its list of names)
# took most of misfits' time, for every submission.
_RANGES: list[Any] = [None, None]


def _ranges(schema: pa.Schema) -> tuple[tuple[str, ...], dict[str, tuple[int, int, str]]]:
    # By identity: hashing an Arrow schema costs as much as reading it.
    if _RANGES[0] is not schema:
        _RANGES[:] = [schema, (tuple(schema.names), {
            field.name: (*_COLUMN_RANGES[field.type], SQL_TYPES[field.type])
            for field in schema if field.type in _COLUMN_RANGES})]
    return _RANGES[1]


def misfits(row: dict[str, Any], names: Sequence[str] | None = None) -> list[str]:
    """The columns (of `names`; None: every one) whose type cannot hold `row`'s value
    ("train_images 3000000000 does not fit INTEGER"): what a database refusal does not
    say."""
    found = []
    every, ranges = _ranges(RUN_COLUMNS)
    for name in every if names is None else names:
        value, limits = row.get(name), ranges.get(name)
        if limits and isinstance(value, int) and not limits[0] <= value <= limits[1]:
            found.append(f"{name} {value} does not fit {limits[2]}")
        elif isinstance(value, str) and not value.isascii():
            try:
                value.encode("utf-8")
            except UnicodeEncodeError:
                found.append(f"{name} is not UTF-8 text")
    return found
