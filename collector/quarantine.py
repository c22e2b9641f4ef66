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
Pure Python: the store passes in its insert and what counts as a refusal.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeVar

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
