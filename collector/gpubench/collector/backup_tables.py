"""A backup's tables as Parquet files: written from one snapshot, read back as data.

Only `Store.export_to` and `Store.load_backup` use this (collector.backup says what a
backup is and checks it). What is read back is data: named columns of known types read
into the schema the collector's own migrations made, and each run made again from its
stored record. Nothing in a backup's folder is executed.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import duckdb
from google.protobuf.message import DecodeError

from gpubench.collector import columns
from gpubench.collector.database import sql_text
from gpubench.collector.rows import run_row
from gpubench.errors import GpubenchError
from gpubench.v1 import run_pb2

# What a restore reads of each table: a run's columns other than these are computed
# from its record, as at submission.
RUN_FIELDS = ("run_id", "submitter", "received_at", "content_sha256", "record")
TOKEN_FIELDS = ("name", "secret_sha256", "admin", "created_at", "revoked", "last_used_at")
# Runs read and inserted at a time.
CHUNK = 10_000


class DamagedBackup(GpubenchError):
    """A backup file whose data the collector did not write (collector.backup names it)."""


def export(con: duckdb.DuckDBPyConnection, folder: Path, tables: Sequence[str]) -> None:
    """Write each of `tables` to `folder`/TABLE.parquet from `con`'s snapshot (a
    transaction the caller opened)."""
    for table in tables:
        target = sql_text(str(Path(folder) / f"{table}.parquet"))
        con.execute(f"COPY {table} TO {target} (FORMAT PARQUET)")


def load(con: duckdb.DuckDBPyConnection, files: dict[str, Path]) -> None:
    """Read a backup's `files` (table -> Parquet file) into the tables of `con`'s
    database, made by the migrations, each run inserted as a submission's is. Raises
    DamagedBackup naming the file and the row."""
    _load_runs(con, files["runs"])
    _copy(con, "tokens", TOKEN_FIELDS, files["tokens"])


def _read(con: duckdb.DuckDBPyConnection, fields: Sequence[str], path: Path) -> Any:
    named = ", ".join(fields)
    try:
        return con.execute(f"SELECT {named} FROM read_parquet(?)", [str(path)])
    except duckdb.Error as exc:
        raise DamagedBackup(f"{path.name}: not the table the collector wrote "
                            f"({str(exc).splitlines()[0]})") from None


def _copy(con: duckdb.DuckDBPyConnection, table: str, fields: Sequence[str], path: Path) -> None:
    named = ", ".join(fields)
    try:
        con.execute(f"INSERT INTO {table} ({named}) SELECT {named} FROM read_parquet(?)",
                    [str(path)])
    except duckdb.Error as exc:
        raise DamagedBackup(f"{path.name}: its rows do not fit the {table} table "
                            f"({str(exc).splitlines()[0]})") from None


def _load_runs(con: duckdb.DuckDBPyConnection, path: Path) -> None:
    result = _read(con.cursor(), RUN_FIELDS, path)
    seen = 0
    while True:
        found = result.fetchmany(CHUNK)
        if not found:
            return
        made = [_run(path, seen + i, *row) for i, row in enumerate(found)]
        seen += len(found)
        for row in made:
            misfits = columns.misfits(row)
            if misfits:
                raise DamagedBackup(f"{path.name}: run {row['run_id'][:64]!r}: "
                                    f"{'; '.join(misfits)}")
        con.execute(columns.INSERT_ROWS, columns.column_lists(made))


def _run(path: Path, index: int, run_id: Any, submitter: Any, received_at: Any,
         digest: Any, blob: Any) -> dict[str, Any]:
    """The runs-table row of one stored run, made again from its record."""
    where = f"{path.name}: row {index + 1} (run {str(run_id)[:64]!r})"
    if not isinstance(blob, bytes) or not isinstance(submitter, str) or received_at is None:
        raise DamagedBackup(f"{where}: a record, a submitter and a time received are needed")
    if hashlib.sha256(blob).hexdigest() != digest:
        raise DamagedBackup(f"{where}: its content_sha256 is not its record's")
    try:
        run = run_pb2.Run.FromString(blob)
    except DecodeError:
        raise DamagedBackup(f"{where}: its record is not a run") from None
    if run.run_id != run_id:
        raise DamagedBackup(f"{where}: its record is of run {run.run_id[:64]!r}")
    row = run_row(run, submitter)
    row.update(received_at=received_at, record=blob, content_sha256=digest)
    return row
