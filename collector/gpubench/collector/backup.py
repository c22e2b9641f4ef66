"""Backups of a collector's database, taken while it serves, and restores of them.

A backup is a folder holding data only: one Parquet file per table that holds what no
code can compute again (runs.parquet, tokens.parquet), and a manifest,
gpubench-backup.json, written last: a folder without it is an unfinished backup and is
not restored. The files are written from one snapshot of the database
(collector.store.Store.export_to), so the backup holds every run acknowledged before
it began; submissions go on meanwhile. The serving collector writes it (the Admin
service's Backup, called over loopback with its local credential,
collector.local_admin), since only the process holding the database can read it.

The manifest lists the SHA-256 of every file and is signed (HMAC-SHA256) with the
collector's backup key, a file beside its database (`key_path`, made at the first
backup, readable by its owner only). A backup folder is as exposed as wherever backups
are kept, so a restore trusts nothing in it until the signature and every file's hash
check out with the key the operator gives; then it makes the schema from the
collector's own migrations, never from anything in the folder, and loads the tables'
data into it: each run again from its stored record (its content_sha256 checked
against the record, its columns computed from it as at submission), the tokens as
they were. The outlier flags are computed again. The counts must match the
manifest's. Everything happens in a new file beside the target, moved into place
only once every check has passed: a restore that fails leaves no database behind.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import os
import secrets
import shutil
import stat
import tempfile
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from gpubench.collector import migrations
from gpubench.collector.database import database_in_use
from gpubench.collector.errors import DatabaseLocked
from gpubench.collector.store import Store
from gpubench.errors import ExitCode, GpubenchError
from gpubench.versions import VERSION

MANIFEST = "gpubench-backup.json"
# The manifest's format (1 was unsigned, 2 held a third table): a backup of another
# format is refused, with the gpubench that restores it.
FORMAT = 3
# The tables a backup holds, each in a file of its name (run_groups and
# schema_migrations are derived: the restore makes them).
TABLES = ("runs", "tokens")
# A manifest is a few hundred bytes; anything much larger is not one.
MANIFEST_MOST_BYTES = 1 << 20
# A backup key: this many random bytes, written as hex.
KEY_BYTES = 32
SIGNATURE_SCHEME = "hmac-sha256"


@dataclass(frozen=True)
class Manifest:
    """What a backup holds: written with it, checked by a restore."""

    format: int
    created_at: str  # ISO 8601, UTC
    gpubench_version: str
    migrations: list[str]
    runs: int
    tokens: int
    files: dict[str, str] = field(default_factory=dict)  # file name -> SHA-256 (hex)
    key_id: str = ""  # which key signed it: the start of the key's own SHA-256
    signature: str = ""  # "hmac-sha256:" + hex, over everything above


class BackupError(GpubenchError):
    """A backup or restore that cannot be made, naming the folder or file."""

    def __init__(self, message: str) -> None:
        super().__init__(message, exit_code=ExitCode.BAD_DATA)


# -- the key ---------------------------------------------------------------------------------


def key_path(db_path: Path) -> Path:
    """The backup key of the collector serving `db_path`: `<db>.backup-key`."""
    db_path = Path(db_path)
    return db_path.with_name(db_path.name + ".backup-key")


def read_key(path: Path) -> bytes:
    """The key in `path`; BackupError naming the file when it is unreadable or no key."""
    try:
        key = Path(path).read_bytes().strip()
    except OSError as exc:
        raise BackupError(f"{path}: cannot read the backup key ({exc.strerror or exc})") from None
    if len(key) < KEY_BYTES:
        raise BackupError(f"{path}: not a backup key (fewer than {KEY_BYTES} bytes)")
    return key


def ensure_key(path: Path) -> tuple[bytes, bool]:
    """The key in `path`, made (readable by its owner only) if there is none; and whether
    it was made now."""
    path = Path(path)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return read_key(path), False
    with os.fdopen(fd, "w") as out:
        out.write(secrets.token_hex(KEY_BYTES) + "\n")
        out.flush()
        os.fsync(out.fileno())
    return read_key(path), True


def key_id(key: bytes) -> str:
    """What a manifest says of the key that signed it (not the key)."""
    return hashlib.sha256(b"gpubench backup key " + key).hexdigest()[:16]


def _signature(manifest: Manifest, key: bytes) -> str:
    body = {k: v for k, v in asdict(manifest).items() if k != "signature"}
    text = json.dumps(body, sort_keys=True, separators=(",", ":")).encode()
    return f"{SIGNATURE_SCHEME}:{hmac.new(key, text, hashlib.sha256).hexdigest()}"


def signed(manifest: Manifest, key: bytes) -> Manifest:
    """`manifest` signed with `key` (and naming it by its key_id)."""
    named = Manifest(**{**asdict(manifest), "key_id": key_id(key), "signature": ""})
    return Manifest(**{**asdict(named), "signature": _signature(named, key)})


def write_manifest(folder: Path, manifest: Manifest) -> None:
    """Write `manifest` into `folder`, synced, in one rename: its presence says the
    backup is whole."""
    target = Path(folder) / MANIFEST
    partial = Path(folder) / (MANIFEST + ".partial")
    with open(partial, "w") as out:
        json.dump(asdict(manifest), out, indent=2)
        out.flush()
        os.fsync(out.fileno())
    os.replace(partial, target)


def file_sha256(path: Path) -> str:
    """The SHA-256 of a file's bytes (hex)."""
    digest = hashlib.sha256()
    with open(path, "rb") as data:
        for chunk in iter(lambda: data.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


# -- taking a backup -------------------------------------------------------------------------


def take(store: Store, folder: Path) -> Manifest:
    """Back up `store` into `folder` (absolute; must not exist, or be empty), signed with
    the key beside its database (made if there is none)."""
    folder = Path(folder)
    if not folder.is_absolute():
        raise BackupError(f"{folder}: the backup folder must be an absolute path")
    if folder.exists() and (not folder.is_dir() or any(folder.iterdir())):
        raise BackupError(f"{folder}: exists and is not an empty folder; a backup "
                          "goes into a new folder")
    key, _ = ensure_key(key_path(store.path))
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise BackupError(f"{folder}: cannot create it ({exc.strerror or exc})") from None
    counts = store.export_to(folder, TABLES)
    manifest = Manifest(
        format=FORMAT,
        created_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        gpubench_version=VERSION,
        migrations=store.database.applied_migrations(),
        runs=counts["runs"],
        tokens=counts["tokens"],
        files={f"{table}.parquet": file_sha256(folder / f"{table}.parquet") for table in TABLES},
    )
    manifest = signed(manifest, key)
    write_manifest(folder, manifest)  # last: its presence says the export finished
    return manifest


# -- checking one ----------------------------------------------------------------------------


def read_manifest(folder: Path) -> Manifest:
    """The manifest of the backup in `folder`, or BackupError saying why there is none."""
    path = Path(folder) / MANIFEST
    try:
        with open(path, "rb") as data:
            text = data.read(MANIFEST_MOST_BYTES + 1)
    except FileNotFoundError:
        raise BackupError(f"{path}: missing; {folder} is no gpubench backup, or an "
                          "unfinished one") from None
    except OSError as exc:
        raise BackupError(f"{path}: cannot read it ({exc.strerror or exc})") from None
    if len(text) > MANIFEST_MOST_BYTES:
        raise BackupError(f"{path}: not a backup manifest (over {MANIFEST_MOST_BYTES:,} bytes)")
    try:
        data = json.loads(text)
        if not isinstance(data, dict):
            raise TypeError("not a JSON object")
        if data.get("format") != FORMAT:
            raise BackupError(
                f"{path}: backup format {data.get('format')!r}; this gpubench restores "
                f"format {FORMAT}: restore it with the gpubench that took it, or take a "
                "new backup with this one")
        manifest = Manifest(**data)
        _check_types(manifest)
    except BackupError:
        raise
    except (ValueError, TypeError) as exc:
        raise BackupError(f"{path}: not a backup manifest ({exc})") from None
    return manifest


def _check_types(manifest: Manifest) -> None:
    for name in ("runs", "tokens", "format"):
        value = getattr(manifest, name)
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise TypeError(f"{name} is not a count")
    texts = (manifest.created_at, manifest.gpubench_version, manifest.key_id,
             manifest.signature, *manifest.migrations, *manifest.files, *manifest.files.values())
    if not isinstance(manifest.migrations, list) or not isinstance(manifest.files, dict) \
            or not all(isinstance(t, str) for t in texts):
        raise TypeError("a field of the wrong type")


def verify(folder: Path, key: bytes) -> Manifest:
    """The manifest of the backup in `folder` once its signature checks out with `key`
    and the folder holds the files it lists and no other; otherwise BackupError saying
    what does not. Each file's SHA-256 is checked as it is copied (`copy_verified`)."""
    folder = Path(folder)
    manifest = read_manifest(folder)
    where = folder / MANIFEST
    if not hmac.compare_digest(manifest.signature.encode(), _signature(manifest, key).encode()):
        theirs = f" (signed with key {manifest.key_id}, not this key {key_id(key)})" \
            if manifest.key_id and manifest.key_id != key_id(key) else ""
        raise BackupError(f"{where}: its signature does not match the backup key{theirs}: "
                          "the manifest was changed after the backup, or the key is another "
                          "collector's; nothing restored")
    expected = {f"{table}.parquet" for table in TABLES}
    if set(manifest.files) != expected:
        raise BackupError(f"{where}: lists {sorted(manifest.files)}, not the files a backup "
                          f"holds ({sorted(expected)})")
    known = {m.name for m in migrations.MIGRATIONS}
    newer = [name for name in manifest.migrations if name not in known]
    if newer:
        raise BackupError(f"{where}: taken by a newer collector (migrations "
                          f"{', '.join(newer)}); restore it with a newer gpubench")
    present = {path.name for path in folder.iterdir()}
    unlisted = sorted(present - set(manifest.files) - {MANIFEST})
    if unlisted:
        raise BackupError(f"{folder}: holds files its manifest does not list "
                          f"({', '.join(unlisted)}): not as the collector wrote it; "
                          "nothing restored")
    return manifest


# -- restoring -------------------------------------------------------------------------------


def restore(folder: Path, db_path: Path, *, key: Path, replace: bool = False) -> Manifest:
    """Make the database `db_path` from the backup in `folder`, checked with the backup
    key in the file `key`; with `replace`, an existing database there (not one a
    collector serves) is replaced once the restore has succeeded. The restored database
    keeps that key beside it (unless it has one)."""
    folder, db_path = Path(folder).resolve(), Path(db_path)
    secret = read_key(key)
    manifest = verify(folder, secret)
    existing = _database_files(db_path)
    if existing:
        if not replace:
            raise BackupError(f"{db_path}: a database exists there; restore into a new "
                              "path, or pass --force to replace it")
        if db_path.exists() and database_in_use(db_path):
            raise DatabaseLocked(f"{db_path}: in use by another process (a running "
                                 "collector?); stop it before replacing its database")
    db_path.parent.mkdir(parents=True, exist_ok=True)
    # Made beside the target, moved into place once whole and checked.
    staging = db_path.with_name(db_path.name + ".restoring")
    _remove_database(staging)
    try:
        # What is loaded is a private copy, hashed as it was copied: a file swapped in
        # the backup's folder after the check above is never what gets loaded.
        with tempfile.TemporaryDirectory(prefix=".gpubench-restore-",
                                         dir=db_path.parent) as private:
            copied = copy_verified(folder, manifest, Path(private))
            _load(copied, staging, manifest, shown=folder)
    except BaseException as exc:
        _remove_database(staging)
        if isinstance(exc, BackupError):
            raise
        if isinstance(exc, Exception):
            raise BackupError(f"{folder}: cannot be restored "
                              f"({str(exc).splitlines()[0] if str(exc) else type(exc).__name__})"
                              ) from exc
        raise
    for path in existing:
        _remove(path)
    os.replace(staging, db_path)
    own_key = key_path(db_path)
    if not own_key.exists():
        fd = os.open(own_key, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as out:
            out.write(secret + b"\n")
    return manifest


def copy_verified(folder: Path, manifest: Manifest, private: Path) -> Path:
    """Copy the files `manifest` lists from `folder` into `private` (a folder only this
    user reaches, 0700), each hashed as it is read; BackupError unless every copy has the
    SHA-256 the signed manifest lists. Returns `private`: what is loaded from there is
    exactly what was checked, whatever happens to `folder` meanwhile."""
    private.chmod(0o700)
    for name, digest in sorted(manifest.files.items()):
        source = folder / name
        try:
            # O_NOFOLLOW: a link swapped in is refused, not followed; fstat: the file opened.
            fd = os.open(source, os.O_RDONLY | os.O_NOFOLLOW)
        except OSError as exc:
            raise BackupError(f"{source}: missing or not a plain file "
                              f"({exc.strerror or exc}); nothing restored") from None
        with os.fdopen(fd, "rb") as data:
            if not stat.S_ISREG(os.fstat(data.fileno()).st_mode):
                raise BackupError(f"{source}: missing or not a plain file; nothing restored")
            hashed = hashlib.sha256()
            target = os.open(private / name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(target, "wb") as out:
                for chunk in iter(lambda: data.read(1 << 20), b""):
                    hashed.update(chunk)
                    out.write(chunk)
        if not hmac.compare_digest(hashed.hexdigest(), digest):
            raise BackupError(f"{source}: its SHA-256 is not the one the signed manifest "
                              "lists: the file was changed after the backup; nothing restored")
    return private


def _load(folder: Path, staging: Path, manifest: Manifest, *, shown: Path) -> None:
    """Make `staging` (the collector's own schema) and load the backup's data, the
    checked copies in `folder`, into it; errors name the backup's folder `shown`."""
    store = Store(staging)
    try:
        counts = store.load_backup({table: folder / f"{table}.parquet" for table in TABLES})
    finally:
        store.close()
    expected = {"runs": manifest.runs, "tokens": manifest.tokens}
    if counts != expected:
        raise BackupError(f"{shown}: holds {_counted(counts)}, but its manifest says "
                          f"{_counted(expected)}; nothing restored")


def _counted(counts: dict[str, Any]) -> str:
    return f"{counts['runs']} run(s), {counts['tokens']} token(s)"


def _database_files(db_path: Path) -> list[Path]:
    """The files of the database `db_path` that exist: the file and DuckDB's
    write-ahead log."""
    candidates = [db_path, db_path.with_name(db_path.name + ".wal")]
    return [path for path in candidates if path.exists()]


def _remove_database(db_path: Path) -> None:
    for path in _database_files(db_path):
        _remove(path)


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
