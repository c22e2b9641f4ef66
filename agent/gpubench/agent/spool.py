"""The spool: every run on disk before any push, so nothing is lost.

    <spool>/pending/<run_id>.json   written atomically, waiting to be pushed
    <spool>/unfinished/<run_id>.json  interrupted or failed: kept, sent only when asked
                                    (`gpubench-agent push --include-failed`)
    <spool>/sent/<run_id>.json      acknowledged by the collector
    <spool>/refused/<run_id>.json   the collector refused it (a .reason file says why)
    <spool>/damaged/<name>          could not be read back (a .reason file says why)

A file is written to a temporary name, fsynced, renamed into place and the
folder fsynced, so a crash or power cut leaves either the whole record or none.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from gpubench import record
from gpubench.durable import sync_folder
from gpubench.errors import DataError, InvalidRecord
from gpubench.v1 import run_pb2

SPOOL_ENV = "GPUBENCH_SPOOL"
FOLDERS = ("pending", "unfinished", "sent", "refused", "damaged")
# A run that ended in one of these measured something (a speed, or that the batch did not
# fit): it is sent. An interrupted or failed one (an error, a kill) is kept out of the
# comparisons of everyone's runs unless its owner sends it on purpose.
FINISHED = (run_pb2.RunStatus.RUN_STATUS_OK, run_pb2.RunStatus.RUN_STATUS_OUT_OF_MEMORY)
_TMP_PREFIX = ".tmp-"
_RUN_ID = re.compile(r"^[0-9a-fA-F-]{1,64}$")


def default_spool_dir() -> Path:
    """$GPUBENCH_SPOOL, else $XDG_DATA_HOME/gpubench/spool (~/.local/share/gpubench/spool)."""
    if os.environ.get(SPOOL_ENV):
        return Path(os.environ[SPOOL_ENV]).expanduser()
    data_home = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(data_home).expanduser() / "gpubench" / "spool"


def finished(run: run_pb2.Run) -> bool:
    """Whether `run` ran to an end worth comparing (FINISHED)."""
    return run.result.status in FINISHED


def write_atomically(path: Path, text: str) -> None:
    """Write `text` to `path` so that readers see all of it or nothing."""
    tmp = path.with_name(f"{_TMP_PREFIX}{path.name}")
    with open(tmp, "w", encoding="utf-8") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)
    sync_folder(path.parent)


@dataclass(frozen=True)
class SpoolEntry:
    """One file in the spool."""

    path: Path
    folder: str

    @property
    def name(self) -> str:
        """The file's name."""
        return self.path.name

    @property
    def reason(self) -> str:
        """Why a refused or damaged file was moved aside ('' otherwise)."""
        reason_file = self.path.with_name(self.path.name + ".reason")
        try:
            return reason_file.read_text().strip()
        except OSError:
            return ""


class Spool:
    """The spool folder; created on first use."""

    def __init__(self, root: str | Path | None = None) -> None:
        self.root = Path(root).expanduser() if root is not None else default_spool_dir()

    def folder(self, name: str) -> Path:
        """One of FOLDERS, created if missing."""
        path = self.root / name
        try:
            path.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise DataError(f"spool folder {path}: cannot create it ({exc.strerror})") from None
        return path

    def write(self, run: run_pb2.Run) -> Path:
        """Store a run (atomically) in pending/, or in unfinished/ when it did not finish;
        returns its path."""
        if not _RUN_ID.match(run.run_id):
            raise InvalidRecord("run_id", f"{run.run_id!r} cannot name a spool file")
        folder = "pending" if finished(run) else "unfinished"
        path = self.folder(folder) / f"{run.run_id}.json"
        try:
            write_atomically(path, record.to_json(run) + "\n")
        except OSError as exc:
            raise DataError(f"spool file {path}: cannot write it ({exc.strerror})") from None
        return path

    def entries(self, folder: str) -> list[SpoolEntry]:
        """The records in one folder, oldest first (temporary files left out)."""
        path = self.root / folder
        if not path.is_dir():
            return []
        files = [
            p for p in path.iterdir()
            if p.is_file() and not p.name.startswith(_TMP_PREFIX) and not p.name.endswith(".reason")
        ]
        files.sort(key=lambda p: (p.stat().st_mtime, p.name))
        return [SpoolEntry(p, folder) for p in files]

    def pending(self) -> list[SpoolEntry]:
        """Runs waiting to be pushed, oldest first."""
        return self.entries("pending")

    def unfinished(self) -> list[SpoolEntry]:
        """Interrupted or failed runs, kept unsent, oldest first."""
        return self.entries("unfinished")

    def counts(self) -> dict[str, int]:
        """How many files each folder holds."""
        return {name: len(self.entries(name)) for name in FOLDERS}

    def load(self, entry: SpoolEntry) -> run_pb2.Run:
        """Read a spooled run; InvalidRecord names the file when it is damaged."""
        try:
            text = entry.path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise InvalidRecord(str(entry.path), f"cannot read it ({exc})") from None
        run = record.from_json(text, source=str(entry.path))
        if not run.run_id:
            raise InvalidRecord(f"{entry.path}: run_id", "missing")
        return run

    def _move(self, entry: SpoolEntry, folder: str, reason: str = "") -> SpoolEntry:
        target_dir = self.folder(folder)
        target = target_dir / entry.name
        if reason:
            write_atomically(target_dir / f"{entry.name}.reason", reason + "\n")
        os.replace(entry.path, target)
        sync_folder(target_dir)
        sync_folder(entry.path.parent)
        return SpoolEntry(target, folder)

    def mark_sent(self, entry: SpoolEntry) -> SpoolEntry:
        """The collector acknowledged it: move it to sent/."""
        return self._move(entry, "sent")

    def mark_unfinished(self, entry: SpoolEntry) -> SpoolEntry:
        """It did not finish (a pending run spooled before unfinished/ existed): move it
        to unfinished/."""
        return self._move(entry, "unfinished")

    def mark_refused(self, entry: SpoolEntry, reason: str) -> SpoolEntry:
        """The collector refused it for good: move it to refused/ with the reason."""
        return self._move(entry, "refused", reason)

    def mark_damaged(self, entry: SpoolEntry, reason: str) -> SpoolEntry:
        """It cannot be read: move it to damaged/ with the reason."""
        return self._move(entry, "damaged", reason)


# The columns of `gpubench-agent status`, as listing() names them.
LISTING_COLUMNS = ("folder", "file", "model", "gpu", "status", "created", "reason")


def listing(spool: Spool) -> list[dict[str, str]]:
    """Every run in the spool, folder by folder (FOLDERS' order): LISTING_COLUMNS'
    values, '' where a file cannot say (a damaged one, or one that no longer reads)."""
    rows = []
    for folder in FOLDERS:
        for entry in spool.entries(folder):
            row = {"folder": folder, "file": entry.name, "model": "", "gpu": "",
                   "status": "", "created": "", "reason": entry.reason}
            if folder != "damaged":
                try:
                    run = spool.load(entry)
                except InvalidRecord as exc:
                    row["reason"] = row["reason"] or str(exc)
                else:
                    row.update(
                        model=run.config.model,
                        gpu=record.gpu_config_name(run.gpus[0].name if run.gpus else "",
                                                   run.config.gpu_count),
                        status=record.status_name(run.result.status),
                        created=run.created_at.ToDatetime().strftime("%Y-%m-%d %H:%M"),
                    )
            rows.append(row)
    return rows
