"""Ways to tamper with a collector's backup folder, each with the words of its refusal:
what the restore tests and the fault campaign (tests/chaos/chaos_attacks.py) try."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from gpubench.collector import backup
from gpubench.collector.auth import secret_hash
from gpubench.v1 import run_pb2


def rewrite(folder: Path, table: str, change: Callable[[list[dict]], list[dict]]) -> None:
    """Rewrite `table`'s Parquet file of the backup in `folder` with `change` of its rows."""
    path = folder / f"{table}.parquet"
    old = pq.read_table(path)
    rows = change(old.to_pylist())
    pq.write_table(pa.Table.from_pylist(rows, schema=old.schema), path)


def resign(folder: Path, key: bytes) -> None:
    """Sign the manifest again over the files as they are now (what only a holder of the
    key can do)."""
    manifest = backup.read_manifest(folder)
    files = {name: backup.file_sha256(folder / name) for name in manifest.files}
    changed = backup.Manifest(**{**asdict(manifest), "files": files})
    backup.write_manifest(folder, backup.signed(changed, key))


def edit_manifest(folder: Path, **fields: object) -> None:
    """Change fields of the manifest as text (no signing)."""
    path = folder / backup.MANIFEST
    data = json.loads(path.read_text())
    data.update(fields)
    path.write_text(json.dumps(data))


def backdoor_admin(rows: list[dict]) -> list[dict]:
    """As many tokens, one of them ("lab") now an admin whose secret the attacker knows."""
    for row in rows:
        if row["name"] == "lab":
            row["secret_sha256"] = secret_hash("gpb_attackers-own-secret")
            row["admin"] = True
    return rows


def faster(rows: list[dict]) -> list[dict]:
    """Every run's epoch 2 x 0.01, in its column."""
    for row in rows:
        row["epoch2_seconds"] = row["epoch2_seconds"] and row["epoch2_seconds"] * 0.01
    return rows


def another_record(rows: list[dict]) -> list[dict]:
    """A run's record rewritten (epoch 2 x 0.01), its content_sha256 left as it was."""
    run = run_pb2.Run.FromString(rows[0]["record"])
    run.result.epoch2_seconds *= 0.01
    rows[0]["record"] = run.SerializeToString(deterministic=True)
    return rows


def _link_runs(folder: Path) -> None:
    (folder / "runs.parquet").unlink()
    (folder / "runs.parquet").symlink_to("/etc/hostname")


# name -> (how to tamper with a backup folder given its key, words of the refusal). The
# backup is of runs on several GPUs and tokens "root" (admin), "lab" and a revoked one.
TAMPERED: dict[str, tuple[Callable[[Path, bytes], object], str]] = {
    # The folder's SQL is never run: a file the manifest does not list refuses it.
    "schema.sql added": (
        lambda f, key: (f / "schema.sql").write_text(
            "CREATE TABLE stolen AS SELECT * FROM read_csv('/etc/hostname');"),
        "holds files its manifest does not list (schema.sql)"),
    "tokens rewritten": (lambda f, key: rewrite(f, "tokens", backdoor_admin),
                         "tokens.parquet: its SHA-256 is not the one the signed manifest lists"),
    "run figures rewritten": (lambda f, key: rewrite(f, "runs", faster),
                              "runs.parquet: its SHA-256 is not the one"),
    "a file missing": (lambda f, key: (f / "tokens.parquet").unlink(),
                       "tokens.parquet: missing or not a plain file"),
    "a file a link": (lambda f, key: _link_runs(f), "runs.parquet: missing or not a plain file"),
    "counts changed": (lambda f, key: edit_manifest(f, runs=3),
                       "its signature does not match the backup key"),
    "signed with another key": (lambda f, key: resign(f, b"x" * 64),
                                "signature does not match the backup key (signed with key"),
    "unsigned": (lambda f, key: edit_manifest(f, signature=""),
                 "its signature does not match"),
    "an older, unsigned format": (lambda f, key: edit_manifest(f, format=1),
                                  "backup format 1; this gpubench restores format 3"),
    "an older format, of three tables": (
        lambda f, key: edit_manifest(f, format=2, quarantined=0),
        "backup format 2; this gpubench restores format 3: restore it with the gpubench "
        "that took it"),
    # What only the key's holder could make: still checked against the data itself.
    "a record unlike its hash, signed": (
        lambda f, key: (rewrite(f, "runs", another_record), resign(f, key)),
        "its content_sha256 is not its record's"),
    "a run less than counted, signed": (
        lambda f, key: (rewrite(f, "runs", lambda rows: rows[1:]), resign(f, key)),
        "token(s), but its manifest says"),
}
