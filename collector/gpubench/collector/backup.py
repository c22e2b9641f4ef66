"""Backups of a collector's database, taken while it serves, and restores of them.

A backup is a folder: DuckDB's EXPORT DATABASE of every table (schema.sql, load.sql
and one Parquet file a table) and a manifest, gpubench-backup.json, written last: a
folder without it is an unfinished backup and is not restored. The export reads one
snapshot of the database taken once the intake journal's acknowledged runs are
stored (collector.store.Store.export_to), so it holds every run acknowledged before
the backup began; submissions go on meanwhile. The serving collector writes it
(the Admin service's Backup, called over loopback with its local credential,
collector.local_admin), since only the process holding the database can read it.

A restore makes a new database file from a backup and checks it against the
manifest's counts; it never writes over an existing database unless asked to, and
never over one a collector serves.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path

from gpubench.collector.database import database_in_use, import_database
from gpubench.collector.errors import DatabaseLocked
from gpubench.collector.intake import journal_folder
from gpubench.collector.store import Store

from gpubench import __version__
from gpubench.errors import ExitCode, GpubenchError

MANIFEST = "gpubench-backup.json"
FORMAT = 1


@dataclass(frozen=True)
class Manifest:
    """What a backup holds: written with it, checked by a restore."""

    format: int
    created_at: str  # ISO 8601, UTC
    gpubench_version: str
    migrations: list[str]
    runs: int
    tokens: int
    quarantined: int


class BackupError(GpubenchError):
    """A backup or restore that cannot be made, naming the folder or file."""

    def __init__(self, message: str) -> None:
        super().__init__(message, exit_code=ExitCode.BAD_DATA)


def take(store: Store, folder: Path) -> Manifest:
    """Back up `store` into `folder` (absolute; must not exist, or be empty)."""
    folder = Path(folder)
    if not folder.is_absolute():
        raise BackupError(f"{folder}: the backup folder must be an absolute path")
    if folder.exists() and (not folder.is_dir() or any(folder.iterdir())):
        raise BackupError(f"{folder}: exists and is not an empty folder; a backup "
                          "goes into a new folder")
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise BackupError(f"{folder}: cannot create it ({exc.strerror or exc})") from None
    counts = store.export_to(folder)
    manifest = Manifest(
        format=FORMAT,
        created_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        gpubench_version=__version__,
        migrations=store.applied_migrations(),
        runs=counts["runs"],
        tokens=counts["tokens"],
        quarantined=counts["quarantine"],
    )
    # Written last, synced: its presence says the export finished.
    target = folder / MANIFEST
    partial = folder / (MANIFEST + ".partial")
    with open(partial, "w") as out:
        json.dump(asdict(manifest), out, indent=2)
        out.flush()
        os.fsync(out.fileno())
    os.replace(partial, target)
    return manifest


def read_manifest(folder: Path) -> Manifest:
    """The manifest of the backup in `folder`, or BackupError saying why there is none."""
    path = Path(folder) / MANIFEST
    try:
        data = json.loads(path.read_text())
        return Manifest(**data)
    except FileNotFoundError:
        raise BackupError(f"{path}: missing; {folder} is no gpubench backup, or an "
                          "unfinished one") from None
    except (ValueError, TypeError) as exc:
        raise BackupError(f"{path}: not a backup manifest ({exc})") from None


def restore(folder: Path, db_path: Path, *, replace: bool = False) -> Manifest:
    """Make the database `db_path` from the backup in `folder`; with `replace`, an
    existing database there (not one a collector serves) is removed first."""
    folder, db_path = Path(folder).resolve(), Path(db_path)
    manifest = read_manifest(folder)
    if manifest.format != FORMAT:
        raise BackupError(f"{folder / MANIFEST}: backup format {manifest.format}; this "
                          f"gpubench reads format {FORMAT}")
    existing = _database_files(db_path)
    if existing:
        if not replace:
            raise BackupError(f"{db_path}: a database exists there; restore into a new "
                              "path, or pass --force to replace it")
        if db_path.exists() and database_in_use(db_path):
            raise DatabaseLocked(f"{db_path}: in use by another process (a running "
                                 "collector?); stop it before replacing its database")
    db_path.parent.mkdir(parents=True, exist_ok=True)
    # Imported beside the target, moved into place once whole: an interrupted restore
    # leaves no half database at db_path.
    staging = db_path.with_name(db_path.name + ".restoring")
    for leftover in _database_files(staging):
        _remove(leftover)
    try:
        counts = import_database(folder, staging)
    except Exception as exc:
        for leftover in _database_files(staging):
            _remove(leftover)
        raise BackupError(f"{folder}: cannot be restored ({str(exc).splitlines()[0]})") from exc
    for path in existing:
        _remove(path)
    os.replace(staging, db_path)
    # Opening it applies the migrations a newer gpubench has; the outlier flags are
    # computed again (the backup may hold groups not yet rescored when it was taken).
    store = Store(db_path)
    try:
        store.rescore_all()
        counts = {"runs": store.count(), "tokens": len(store.tokens()),
                  "quarantine": store.quarantine_count()}
    finally:
        store.close()
    expected = {"runs": manifest.runs, "tokens": manifest.tokens,
                "quarantine": manifest.quarantined}
    if counts != expected:
        raise BackupError(f"{db_path}: restored {counts}, but the backup's manifest says "
                          f"{expected}; the backup in {folder} is damaged")
    return manifest


def _database_files(db_path: Path) -> list[Path]:
    """The files of the database `db_path` that exist: the file, DuckDB's write-ahead
    log, the collector's intake journal (runs it would insert on opening)."""
    candidates = [db_path, db_path.with_name(db_path.name + ".wal"), journal_folder(db_path)]
    return [path for path in candidates if path.exists()]


def _remove(path: Path) -> None:
    if path.is_dir():
        shutil.rmtree(path)
    else:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
