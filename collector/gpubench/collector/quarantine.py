"""Acknowledged runs the database refused: how the store finds them in a batch, and
what it keeps of each.

The store acknowledges a run once the intake journal has it and inserts the
journal's runs into DuckDB in bulk, one statement per batch, which stores all of
its rows or none. A row DuckDB cannot hold (a value past its column's type, a
missing value where one is required) would fail every batch it is in, and the
journal would never empty. So when a batch is refused, `insert_sorting_out` inserts
its halves apart, and theirs, down to the single rows the database refuses; those
are put in quarantine (the store's quarantine table) with the reason, every other
row is stored, and the operator is told. `gpubench-collector quarantine` lists,
retries and drops them: nothing acknowledged is dropped but by that command.
`insert_sorting_out` is pure Python: the flusher passes in its insert and what counts
as a refusal (`refused_by_database`); `QuarantineTable` keeps the refused runs.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

import duckdb

from gpubench.collector.columns import misfits
from gpubench.collector.rows import utc_now
from gpubench.errors import NotFound

log = logging.getLogger(__name__)

Row = TypeVar("Row")


@dataclass(frozen=True)
class QuarantinedRun:
    """An acknowledged run the database refused to store, kept until retried or dropped."""

    run_id: str
    submitter: str
    received_at: datetime  # when it was acknowledged (UTC, naive)
    quarantined_at: datetime  # when the database last refused it (UTC, naive)
    reason: str  # what the database said, and which column did not fit where known
    content_sha256: str


def insert_sorting_out(
    rows: Sequence[Row],
    insert: Callable[[Sequence[Row]], Any],
    is_refusal: Callable[[BaseException], bool],
) -> list[tuple[Row, BaseException]]:
    """Insert `rows` with `insert` (each call stores all the rows it is given, or none),
    setting aside the rows the database refuses; returns them with the error.

    When a call fails with an error `is_refusal` says is about the rows, its halves are
    inserted apart, and so on down to single rows: one refused bad row in a batch of
    1024 costs about 20 calls. Any other error (the disk, the database itself) is
    raised at once; the rows inserted before it stay inserted.
    """
    refused: list[tuple[Row, BaseException]] = []
    parts = [rows]
    while parts:
        part = parts.pop()
        if not part:
            continue
        try:
            insert(part)
        except Exception as exc:
            if not is_refusal(exc):
                raise
            if len(part) == 1:
                refused.append((part[0], exc))
            else:
                middle = len(part) // 2
                parts += [part[middle:], part[:middle]]  # the first half next
    return refused


def first_line(error: BaseException) -> str:
    """An error's message without the SQL excerpt DuckDB adds below it."""
    text = str(error).strip().splitlines()
    return text[0] if text else type(error).__name__


# Errors that say the database refuses a row's values (a number past its column's type,
# text it cannot encode, a missing value), as opposed to the database or the disk
# failing; Python's own come from converting the values for the statement.
_ROW_REFUSALS = (duckdb.DataError, duckdb.IntegrityError, duckdb.InvalidInputException,
                 TypeError, ValueError, OverflowError)
_COLUMNS = "run_id, submitter, received_at, quarantined_at, reason, content_sha256"


def refused_by_database(error: BaseException) -> bool:
    """Whether an insert failed because of the rows' values (not the database itself)."""
    return isinstance(error, _ROW_REFUSALS)


def refusal_reason(row: dict[str, Any], error: BaseException) -> str:
    """What the database said of a row it refused, and the columns it cannot hold (its
    message does not name them)."""
    found = misfits(row)
    reason = first_line(error)
    return f"{reason} ({'; '.join(found)})" if found else reason


def acknowledged(
    run_id: str, submitter: str, received_at: datetime, content_sha256: str, record: bytes
) -> dict[str, Any]:
    """What quarantine keeps of an acknowledged run no row can be made of."""
    return {"run_id": run_id, "submitter": submitter, "received_at": received_at,
            "content_sha256": content_sha256, "record": record}


def _text(value: str) -> str:
    """Text any VARCHAR holds (a lone surrogate, which DuckDB refuses, escaped)."""
    return value.encode("utf-8", "backslashreplace").decode("utf-8")


class QuarantineTable:
    """The quarantine table of the database at `path`, through `cursor` (this thread's
    cursor). Its writes are made by holders of the database's write lock."""

    def __init__(self, cursor: Callable[[], duckdb.DuckDBPyConnection], path: Path) -> None:
        self._cursor = cursor
        self._path = path

    def hold(self, refused: list[tuple[dict[str, Any], str]], *, announce: bool = True) -> None:
        """Keep acknowledged runs the database refused (row or journal fields, and the
        reason) and tell the operator (unless `announce` is off: a retry answers its
        caller instead)."""
        now = utc_now()
        self._cursor().executemany(
            "INSERT OR REPLACE INTO quarantine VALUES (?, ?, ?, ?, ?, ?, ?)",
            [[_text(row["run_id"]), _text(row["submitter"]), row["received_at"],
              _text(row["content_sha256"]), row["record"], _text(reason), now]
             for row, reason in refused],
        )
        for row, reason in refused if announce else ():
            log.error(
                "%s: run %s (submitter %s, acknowledged %s UTC) is held in quarantine, refused "
                "by the database: %s. Once the cause is fixed, `gpubench-collector quarantine "
                "retry %s` stores it; `gpubench-collector quarantine drop %s` drops it",
                self._path, row["run_id"], row["submitter"], row["received_at"], reason,
                row["run_id"], row["run_id"],
            )

    def count(self) -> int:
        """How many acknowledged runs the database refused and quarantine holds."""
        return self._cursor().execute("SELECT count(*) FROM quarantine").fetchall()[0][0]

    def held(self, run_ids: Sequence[str] = ()) -> list[QuarantinedRun]:
        """The runs held (those of `run_ids`; empty: every one), oldest first. NotFound
        names a run_id quarantine does not hold."""
        sql = f"SELECT {_COLUMNS} FROM quarantine"
        params: list[Any] = []
        if run_ids:
            sql += " WHERE list_contains(?, run_id)"
            params.append(list(run_ids))
        rows = self._cursor().execute(sql + " ORDER BY received_at, run_id", params).fetchall()
        held = [QuarantinedRun(*r) for r in rows]
        missing = sorted(set(run_ids) - {q.run_id for q in held})
        if missing:
            raise NotFound(f"run_id {', '.join(missing)}: not in quarantine")
        return held

    def records(self, run_ids: Sequence[str] = ()) -> list[tuple]:
        """(run_id, submitter, received_at, content_sha256, record) of the runs held
        (those of `run_ids`; empty: every one): what a retry stores."""
        sql = "SELECT run_id, submitter, received_at, content_sha256, record FROM quarantine"
        params: list[Any] = []
        if run_ids:
            self.held(run_ids)  # NotFound for any not held
            sql += " WHERE list_contains(?, run_id)"
            params.append(list(run_ids))
        return self._cursor().execute(sql, params).fetchall()

    def release(self, run_ids: Sequence[str]) -> None:
        """Delete runs from quarantine (stored now, or dropped)."""
        self._cursor().execute("DELETE FROM quarantine WHERE list_contains(?, run_id)",
                               [list(run_ids)])

    def reason_held(self, run_id: str) -> str | None:
        """Why the run is held in quarantine (the database's refusal); None if it is not."""
        rows = self._cursor().execute("SELECT reason FROM quarantine WHERE run_id = ?",
                                      [run_id]).fetchall()
        return rows[0][0] if rows else None
