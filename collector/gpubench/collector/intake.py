"""The store's intake: a journal of acknowledged runs, and which run_ids are known.

A DuckDB commit costs a few milliseconds of CPU however few rows it carries, so a
commit per group of 16 acknowledgements spends most of the collector's CPU in
DuckDB. Instead the store acknowledges a group once it is in this journal (one
write and one fdatasync), and inserts what the journal holds into DuckDB in bulk,
hundreds of runs per commit. Opening the store replays what a crash left here.

The journal is a folder beside the database (`runs.duckdb.intake/`) of segment
files, `000000000001.log`, ... Each entry is framed so that a write cut short by a
crash is recognised and skipped (it was never acknowledged):

    u32 length, u32 crc32 of the payload, payload
    payload = one line of JSON (run_id, submitter, received_at, content_sha256),
              a newline, the run record's bytes

The store starts a new segment each time it flushes the journal into DuckDB, and
deletes the sealed segments once that commit has returned.

`KnownRuns` answers "could this run_id be stored already?" without a database
query: a resubmission must get the first acknowledgement, and a DuckDB lookup per
group would cost as much as the insert it replaces.
"""

from __future__ import annotations

import io
import json
import logging
import os
import struct
import zlib
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import numpy as np

from gpubench.durable import sync_folder

log = logging.getLogger(__name__)

_FRAME = struct.Struct("<II")  # payload length, crc32 of the payload
SUFFIX = ".log"
# The file `Journal.probe` writes, and how much: about a large run record.
PROBE = "probe.tmp"
PROBE_BYTES = 64 * 1024
DAMAGED_SUFFIX = ".damaged"


def journal_folder(database: Path) -> Path:
    """Where the journal of the database at `database` lives."""
    return database.with_name(database.name + ".intake")


@dataclass(frozen=True)
class JournalEntry:
    """One acknowledged run as the journal keeps it."""

    run_id: str
    submitter: str
    received_at: datetime  # UTC, naive
    content_sha256: str
    record: bytes  # the run, serialised deterministically

    def encode(self) -> bytes:
        """The entry framed for the journal."""
        header = json.dumps(
            {
                "run_id": self.run_id,
                "submitter": self.submitter,
                "received_at": self.received_at.isoformat(),
                "content_sha256": self.content_sha256,
            },
            separators=(",", ":"),
        ).encode()
        payload = header + b"\n" + self.record
        return _FRAME.pack(len(payload), zlib.crc32(payload)) + payload

    @classmethod
    def decode(cls, payload: bytes) -> JournalEntry:
        """The entry of a payload whose frame checked out."""
        header, _, blob = payload.partition(b"\n")
        fields = json.loads(header)
        return cls(
            run_id=fields["run_id"],
            submitter=fields["submitter"],
            received_at=datetime.fromisoformat(fields["received_at"]),
            content_sha256=fields["content_sha256"],
            record=blob,
        )


class Journal:
    """Append-only segment files; nothing in them is acknowledged before it is synced.

    A write that fails (a full disk) leaves nothing behind: no partial entry another
    could follow, and no empty segment per failed try.
    """

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        created = not folder.exists()
        folder.mkdir(parents=True, exist_ok=True)
        if created:
            sync_folder(folder.parent)
        (folder / PROBE).unlink(missing_ok=True)  # a crash during a probe left it
        # Segments a previous process left: their entries may not be in the database.
        self.leftovers = sorted(folder.glob("*" + SUFFIX))
        last = max((int(p.stem) for p in self.leftovers if p.stem.isdigit()), default=0)
        self._sequence = last
        self._sealed: list[Path] = []
        self._written = 0  # bytes in the current segment
        # Set when a failed write could not be cut back: the next append starts a new
        # segment first (an entry must never follow a partial one).
        self._cut_short = False
        self.current, self._file = self._open_next()

    def _open_next(self) -> tuple[Path, io.FileIO]:
        """The next segment, created and its name synced; on failure nothing is left."""
        path = self.folder / f"{self._sequence + 1:012d}{SUFFIX}"
        handle = io.FileIO(path, "ab")  # unbuffered; kept open: the current segment
        try:
            sync_folder(self.folder)  # the new file's name is durable before anything in it
        except OSError:
            handle.close()
            path.unlink(missing_ok=True)
            raise
        self._sequence += 1
        return path, handle

    def _start_segment(self) -> None:
        """Seal the current segment and continue in a new one (raises OSError when it
        cannot be created; then the current one stays current)."""
        path, handle = self._open_next()
        self._file.close()
        self._sealed.append(self.current)
        self.current, self._file, self._written = path, handle, 0
        self._cut_short = False

    def append(self, entries: Iterable[JournalEntry]) -> None:
        """Write the entries and wait until the disk has them (fdatasync).

        On failure (disk full, I/O error) the segment is cut back to where it was, so
        a later append never follows a partial entry, and the error is raised.
        """
        data = b"".join(entry.encode() for entry in entries)
        if not data:
            return
        if self._cut_short:
            self._start_segment()
        fd = self._file.fileno()
        start = os.lseek(fd, 0, os.SEEK_END)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            os.fdatasync(fd)
        except OSError:
            try:
                os.ftruncate(fd, start)
                os.fdatasync(fd)
            except OSError:  # cannot even cut it back: the next append starts a new segment
                log.exception("%s: could not remove a failed write; the next write starts a "
                              "new segment", self.current)
                self._cut_short = True
            raise
        self._written += len(data)

    def seal(self) -> list[Path]:
        """Start a new segment, unless the current one is empty; the segments whose
        entries are all written before now."""
        if self._written or self._cut_short:
            self._start_segment()
        return list(self._sealed)

    def probe(self, size: int = PROBE_BYTES) -> None:
        """Write and sync `size` bytes beside the segments, then remove them: whether a
        write of that size can be made durable now (raises OSError when not)."""
        path = self.folder / PROBE
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            try:
                view = memoryview(bytes(size))
                while view:
                    view = view[os.write(fd, view):]
                os.fdatasync(fd)
            finally:
                os.close(fd)
        finally:
            path.unlink(missing_ok=True)

    def drop(self, segments: Iterable[Path]) -> None:
        """Delete segments whose entries are all committed to the database."""
        for path in segments:
            path.unlink(missing_ok=True)
            if path in self._sealed:
                self._sealed.remove(path)
            if path in self.leftovers:
                self.leftovers.remove(path)

    def close(self) -> None:
        """Close the current segment: an empty one is removed, one with entries stays
        for the next open to store."""
        self._file.close()
        if self.current.stat().st_size == 0:
            self.current.unlink(missing_ok=True)

    def read_leftovers(self) -> list[JournalEntry]:
        """Every entry of the segments a previous process left, oldest first.

        A write cut short by a crash (the segment ends inside an entry, or in zero
        bytes the file system allocated) was never acknowledged and is skipped. Any
        other damage is skipped too, with a warning naming the file and offset, and
        the segment is kept beside as NAME.damaged for inspection.
        """
        entries: list[JournalEntry] = []
        for path in list(self.leftovers):
            data = path.read_bytes()
            found, damage = _read_segment(data)
            entries.extend(found)
            if damage is None:
                continue
            offset, reason = damage
            log.warning("%s: %s at byte %d; entries from there on are skipped",
                        path, reason, offset)
            if reason != "unfinished write":
                kept = path.with_name(path.name + DAMAGED_SUFFIX)
                kept.write_bytes(data)
                log.warning("%s: kept as %s", path, kept)
        return entries


def _read_segment(data: bytes) -> tuple[list[JournalEntry], tuple[int, str] | None]:
    """The entries of one segment, and where and why reading stopped early (or None)."""
    entries: list[JournalEntry] = []
    offset = 0
    while offset < len(data):
        rest = data[offset:]
        if len(rest) < _FRAME.size or not any(rest):
            return entries, (offset, "unfinished write")
        length, crc = _FRAME.unpack_from(data, offset)
        payload = data[offset + _FRAME.size: offset + _FRAME.size + length]
        if length == 0 or len(payload) < length:
            return entries, (offset, "unfinished write")
        if zlib.crc32(payload) != crc:
            return entries, (offset, "checksum mismatch")
        try:
            entries.append(JournalEntry.decode(payload))
        except (ValueError, KeyError, TypeError):
            return entries, (offset, "unreadable entry")
        offset += _FRAME.size + length
    return entries, None


# Recent run_ids are kept in a set and merged into the sorted array once there are this
# many: a merge costs a sort of the whole array (tens of ms at millions of runs).
MERGE_EVERY = 65536


class KnownRuns:
    """The run_ids the store may hold: never a false "no", rarely a false "yes".

    Keeps a 64-bit hash of each run_id (Python's string hash, keyed per process, so a
    client cannot choose run_ids that collide on purpose): 8 bytes a run in a sorted
    array, plus a set of the most recent. A "yes" is checked against the database.
    """

    def __init__(self, run_ids: Iterable[str] = ()) -> None:
        self._sorted = np.unique(np.fromiter((hash(r) for r in run_ids), dtype=np.int64))
        self._recent: set[int] = set()

    def __contains__(self, run_id: str) -> bool:
        key = hash(run_id)
        if key in self._recent:
            return True
        at = int(np.searchsorted(self._sorted, key))
        return at < len(self._sorted) and int(self._sorted[at]) == key

    def add(self, run_ids: Iterable[str]) -> None:
        """Remember run_ids now stored (or about to be)."""
        self._recent.update(hash(r) for r in run_ids)
        if len(self._recent) >= MERGE_EVERY:
            merged = np.fromiter(self._recent, dtype=np.int64, count=len(self._recent))
            self._sorted = np.union1d(self._sorted, merged)
            self._recent = set()
