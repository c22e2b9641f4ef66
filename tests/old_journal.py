"""Writes what an earlier collector left beside its database: an intake journal
folder (`<db>.intake/`) of segment files holding acknowledged runs not yet in DuckDB,
in that version's format (collector.leftovers reads it):

    u32 length, u32 crc32 of the payload, payload
    payload = one line of JSON (run_id, submitter, received_at, content_sha256),
              a newline, the run record's bytes
"""

from __future__ import annotations

import json
import struct
import zlib
from datetime import datetime
from pathlib import Path

from gpubench import record
from gpubench.v1 import run_pb2


def entry(run: run_pb2.Run, submitter: str, received_at: datetime,
          blob: bytes | None = None) -> bytes:
    """One framed entry, as the old journal wrote it (`blob`: other record bytes)."""
    blob = run.SerializeToString(deterministic=True) if blob is None else blob
    header = json.dumps({"run_id": run.run_id, "submitter": submitter,
                         "received_at": received_at.isoformat(),
                         "content_sha256": record.content_sha256(run)},
                        separators=(",", ":")).encode()
    payload = header + b"\n" + blob
    return struct.pack("<II", len(payload), zlib.crc32(payload)) + payload


def write_journal(db: Path, runs: list[run_pb2.Run], *, submitter: str = "old-agent",
                  received_at: datetime = datetime(2026, 1, 1), tail: bytes = b"") -> Path:
    """A journal segment beside `db` holding `runs`, then `tail` (a write cut short);
    the folder."""
    folder = db.with_name(db.name + ".intake")
    folder.mkdir(exist_ok=True)
    data = b"".join(entry(run, submitter, received_at) for run in runs) + tail
    (folder / "000000000001.log").write_bytes(data)
    return folder
