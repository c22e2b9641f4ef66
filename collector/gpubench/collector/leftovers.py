"""Runs an earlier version of the collector acknowledged but left unstored, stored
once when the store opens.

Earlier collectors acknowledged a run once an intake journal beside the database
(`runs.duckdb.intake/`) had it, and put a run the database refused in the
`quarantine` table. Opening such a database stores every run of both through the
submissions' own insert, in one transaction; the journal's segments are deleted once
it has committed. A run that still cannot be stored stays in quarantine with the
reason, logged: nothing acknowledged is dropped. A segment's entries are framed:

    u32 length, u32 crc32 of the payload, payload
    payload = one line of JSON (run_id, submitter, received_at, content_sha256),
              a newline, the run record's bytes
"""

from __future__ import annotations

import json
import logging
import struct
import zlib
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from datetime import datetime
from pathlib import Path
from typing import Any

import duckdb

from gpubench.collector.rows import run_row, utc_now
from gpubench.v1 import run_pb2

log = logging.getLogger(__name__)

FRAME = struct.Struct("<II")  # payload length, crc32 of the payload
SEGMENT_SUFFIX = ".log"
DAMAGED_SUFFIX = ".damaged"
# A left run: (run_id, submitter, received_at, content_sha256, record).
Left = tuple[str, str, datetime, str, bytes]
Writing = Callable[[str], AbstractContextManager[duckdb.DuckDBPyConnection]]
Insert = Callable[[duckdb.DuckDBPyConnection, Sequence[dict[str, Any]]], list[Any]]


def journal_folder(database: Path) -> Path:
    """Where a previous version kept the intake journal of the database at `database`."""
    return database.with_name(database.name + ".intake")


def store_left_behind(database: Path, writing: Writing, insert: Insert) -> None:
    """Store the runs of `database`'s old journal and quarantine (see the module's doc);
    `writing` is the store's write transaction, `insert` its insert of runs-table rows."""
    folder = journal_folder(database)
    segments = sorted(folder.glob("*" + SEGMENT_SUFFIX)) if folder.is_dir() else []
    journaled = [entry for path in segments for entry in read_segment(path)]
    with writing(f"storing the runs left in {folder} and quarantine") as con:
        held: list[Left] = con.execute(
            "SELECT run_id, submitter, received_at, content_sha256, record FROM quarantine"
        ).fetchall()
        if not journaled and not held:
            _remove_journal(folder, segments)
            return
        # Quarantine's runs are tried again: out of it first (a refused one goes back).
        con.execute("DELETE FROM quarantine")
        rows: dict[str, dict[str, Any]] = {}
        refused: list[tuple[Left, str]] = []
        for left in [*held, *journaled]:
            if left[0] in rows:
                continue
            try:
                row = run_row(run_pb2.Run.FromString(left[4]), left[1])
            except Exception as exc:  # no run can be made of the record: kept as it is
                refused.append((left, f"unreadable record: {str(exc).splitlines()[0]}"))
                continue
            # As it was acknowledged: its time, hash and bytes, not serialised again.
            row.update(received_at=left[2], content_sha256=left[3], record=left[4])
            rows[left[0]] = row
        results = insert(con, list(rows.values()))
        for row, result in zip(rows.values(), results, strict=True):
            if isinstance(result, Exception):
                refused.append(((row["run_id"], row["submitter"], row["received_at"],
                                 row["content_sha256"], row["record"]), str(result)))
        if refused:
            now = utc_now()
            con.executemany("INSERT OR REPLACE INTO quarantine VALUES (?, ?, ?, ?, ?, ?, ?)",
                            [[*left, reason, now] for left, reason in refused])
    _remove_journal(folder, segments)
    stored = sum(not isinstance(result, Exception) for result in results)
    log.warning("%s: stored %d run(s) a previous version acknowledged (from %s and the "
                "quarantine table)", database, stored, folder)
    for (run_id, submitter, received_at, _, _), reason in refused:
        log.error("%s: run %s (submitter %s, acknowledged %s UTC) cannot be stored (%s); "
                  "it stays in the quarantine table, which backups carry",
                  database, run_id, submitter, received_at, reason)


def read_segment(path: Path) -> list[Left]:
    """The entries of one journal segment, in order. A write cut short by a crash was
    never acknowledged: skipped. Other damage stops the reading with a warning naming
    the file and offset; the segment is kept beside as NAME.damaged."""
    data = path.read_bytes()
    entries: list[Left] = []
    offset, damage = 0, ""
    while offset < len(data):
        rest = data[offset:]
        if len(rest) < FRAME.size or not any(rest):
            break  # an unfinished write
        length, crc = FRAME.unpack_from(data, offset)
        payload = data[offset + FRAME.size: offset + FRAME.size + length]
        if length == 0 or len(payload) < length:
            break
        if zlib.crc32(payload) != crc:
            damage = "checksum mismatch"
            break
        header, _, record = payload.partition(b"\n")
        try:
            fields = json.loads(header)
            entries.append((fields["run_id"], fields["submitter"],
                            datetime.fromisoformat(fields["received_at"]),
                            fields["content_sha256"], record))
        except (ValueError, KeyError, TypeError):
            damage = "unreadable entry"
            break
        offset += FRAME.size + length
    if damage:
        kept = path.with_name(path.name + DAMAGED_SUFFIX)
        kept.write_bytes(data)
        log.warning("%s: %s at byte %d; entries from there on are skipped; kept as %s",
                    path, damage, offset, kept)
    return entries


def _remove_journal(folder: Path, segments: list[Path]) -> None:
    """Delete the stored segments, and the folder once nothing else is in it."""
    for path in segments:
        path.unlink(missing_ok=True)
    (folder / "probe.tmp").unlink(missing_ok=True)
    if folder.is_dir() and not any(folder.iterdir()):
        folder.rmdir()
