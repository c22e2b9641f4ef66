"""A restore trusts nothing in the backup's folder: the signed manifest, every file's
SHA-256 and every run's record are checked, the schema comes from the collector's own
migrations, and a restore that fails leaves no database behind."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from factories import make_run
from gpubench.collector import backup
from gpubench.collector.auth import TokenBook, secret_hash
from gpubench.collector.queries import RunFilter
from gpubench.collector.store import Store

from gpubench.v1 import run_pb2

CLI = [sys.executable, "-m", "gpubench.collector.cli"]


@pytest.fixture(scope="module")
def taken(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, dict[str, float]]:
    """A backup of a database with runs on three GPUs, tokens (an admin's, a user's, a
    revoked one) and a run in quarantine: its folder, its key, each run's epoch 2."""
    folder = tmp_path_factory.mktemp("source")
    db = folder / "c.duckdb"
    store = Store(db)
    try:
        tokens = TokenBook(store)
        tokens.create("root", admin=True)
        tokens.create("lab", admin=False)
        tokens.create("gone", admin=False)
        tokens.revoke("gone")
        runs = [make_run(gpu_name=gpu, epoch2_seconds=seconds)
                for gpu, seconds in (("Tesla T4", 16.0), ("Tesla T4", 17.0),
                                     ("NVIDIA H200", 5.0), ("NVIDIA A100-SXM4-80GB", 8.0))]
        store.submit_many(runs, "lab")
        # What an older collector let in, refused by the database: held in quarantine.
        store.submit(make_run(config__train_images=3_000_000_000, config__image_count=0), "old")
        store.catch_up()
        assert store.quarantine_count() == 1
        backup.take(store, folder / "backup")
    finally:
        store.close()
    return folder / "backup", backup.key_path(db), {r.run_id: 0.0 for r in runs} | {
        r.run_id: r.result.epoch2_seconds for r in runs}


def copy_of(taken, tmp_path: Path) -> Path:
    folder = tmp_path / "backup"
    shutil.copytree(taken[0], folder)
    return folder


def left_behind(db: Path) -> list[str]:
    """What of a database there is at `db`: the file, its log, its journal, a staging copy."""
    return sorted(p.name for p in db.parent.iterdir() if p.name.startswith(db.name)
                  and not p.name.endswith(".backup-key"))


def rewrite(folder: Path, table: str, change: Callable[[list[dict]], list[dict]]) -> None:
    """Rewrite `table`'s Parquet file of the backup in `folder` with `change` of its rows."""
    path = folder / f"{table}.parquet"
    old = pq.read_table(path)
    rows = change(old.to_pylist())
    pq.write_table(pa.Table.from_pylist(rows, schema=old.schema), path)


def resign(folder: Path, key: bytes) -> None:
    """Sign the manifest again over the files as they are now (what only a holder of
    the key can do)."""
    manifest = backup.read_manifest(folder)
    files = {name: backup.file_sha256(folder / name) for name in manifest.files}
    changed = backup.Manifest(**{**asdict(manifest), "files": files})
    backup.write_manifest(folder, backup.signed(changed, key))


def edit_manifest(folder: Path, **fields) -> None:
    path = folder / backup.MANIFEST
    data = json.loads(path.read_text())
    data.update(fields)
    path.write_text(json.dumps(data))


def backdoor_admin(rows: list[dict]) -> list[dict]:
    """The same number of tokens, one of them now an admin whose secret the attacker knows."""
    for row in rows:
        if row["name"] == "lab":
            row["secret_sha256"] = secret_hash("gpb_attackers-own-secret")
            row["admin"] = True
    return rows


def faster(rows: list[dict]) -> list[dict]:
    for row in rows:
        row["epoch2_seconds"] = row["epoch2_seconds"] and row["epoch2_seconds"] * 0.01
    return rows


def another_record(rows: list[dict]) -> list[dict]:
    """A run's record rewritten (epoch 2 x 0.01), its content_sha256 left as it was."""
    run = run_pb2.Run.FromString(rows[0]["record"])
    run.result.epoch2_seconds *= 0.01
    rows[0]["record"] = run.SerializeToString(deterministic=True)
    return rows


TAMPERED = {
    # The folder's SQL is never run: a file the manifest does not list refuses it.
    "schema.sql added": (
        lambda f, key: (f / "schema.sql").write_text(
            "CREATE TABLE stolen AS SELECT * FROM read_csv('/etc/hostname');"),
        "holds files its manifest does not list (schema.sql)"),
    "tokens rewritten": (lambda f, key: rewrite(f, "tokens", backdoor_admin),
                         "tokens.parquet: its SHA-256 is not the one the signed manifest lists"),
    "run figures rewritten": (lambda f, key: rewrite(f, "runs", faster),
                              "runs.parquet: its SHA-256 is not the one"),
    "a file missing": (lambda f, key: (f / "quarantine.parquet").unlink(),
                       "quarantine.parquet: missing or not a plain file"),
    "a file a link": (lambda f, key: ((f / "runs.parquet").unlink(),
                                      (f / "runs.parquet").symlink_to("/etc/hostname")),
                      "runs.parquet: missing or not a plain file"),
    "counts changed": (lambda f, key: edit_manifest(f, runs=3),
                       "its signature does not match the backup key"),
    "signed with another key": (lambda f, key: resign(f, b"x" * 64),
                                "signature does not match the backup key (signed with key"),
    "unsigned": (lambda f, key: edit_manifest(f, signature=""),
                 "its signature does not match"),
    "an older, unsigned format": (lambda f, key: edit_manifest(f, format=1),
                                  "backup format 1; this gpubench restores format 2"),
    # What only the key's holder could make: still checked against the data itself.
    "a record unlike its hash, signed": (
        lambda f, key: (rewrite(f, "runs", another_record), resign(f, key)),
        "its content_sha256 is not its record's"),
    "a run less than counted, signed": (
        lambda f, key: (rewrite(f, "runs", lambda rows: rows[1:]), resign(f, key)),
        "holds 3 run(s), 3 token(s), 1 quarantined run(s), but its manifest says 4 run(s)"),
}


@pytest.mark.parametrize("case", list(TAMPERED))
def test_a_tampered_backup_is_refused_with_the_reason_and_leaves_no_database(
    taken, tmp_path: Path, case: str
) -> None:
    folder = copy_of(taken, tmp_path)
    tamper, reason = TAMPERED[case]
    tamper(folder, backup.read_key(taken[1]))
    db = tmp_path / "restored.duckdb"
    with pytest.raises(backup.BackupError) as refused:
        backup.restore(folder, db, key=taken[1])
    assert reason in str(refused.value)
    assert left_behind(db) == []


def test_a_failed_restore_over_a_database_leaves_that_database_as_it_was(
    taken, tmp_path: Path
) -> None:
    db = tmp_path / "live.duckdb"
    store = Store(db)
    store.submit_many([make_run()], "here")
    store.close()
    before, files = hashlib.sha256(db.read_bytes()).hexdigest(), left_behind(db)
    folder = copy_of(taken, tmp_path)
    rewrite(folder, "tokens", backdoor_admin)
    with pytest.raises(backup.BackupError):
        backup.restore(folder, db, key=taken[1], replace=True)
    assert hashlib.sha256(db.read_bytes()).hexdigest() == before
    assert left_behind(db) == files


def test_a_restore_makes_each_run_from_its_record(taken, tmp_path: Path) -> None:
    """Columns rewritten and signed by the key's holder still come back as the records say."""
    folder = copy_of(taken, tmp_path)
    rewrite(folder, "runs", faster)
    resign(folder, backup.read_key(taken[1]))
    db = tmp_path / "restored.duckdb"
    manifest = backup.restore(folder, db, key=taken[1])
    assert (manifest.runs, manifest.tokens, manifest.quarantined) == (4, 3, 1)
    store = Store(db)
    try:
        page, _ = store.list(RunFilter(), page_size=100)
        assert {s.run.run_id: s.run.result.epoch2_seconds for s in page} == \
            {k: v for k, v in taken[2].items() if v}
        compare = {g.gpu_name: g.epoch2_median_seconds
                   for g in store.compare_groups(_b0_query())}
        assert compare["Tesla T4"] == pytest.approx(16.5)
        assert {t.name: (t.admin, t.revoked) for t in store.tokens()} == {
            "root": (True, False), "lab": (False, False), "gone": (False, True)}
        assert store.quarantine_count() == 1
    finally:
        store.close()
    assert backup.key_path(db).read_bytes().strip() == backup.read_key(taken[1])


def test_restore_names_the_reason_and_exits_6(taken, tmp_path: Path) -> None:
    folder = copy_of(taken, tmp_path)
    rewrite(folder, "tokens", backdoor_admin)
    db = tmp_path / "restored.duckdb"
    done = subprocess.run([*CLI, "restore", str(folder), "--db", str(db), "--key", str(taken[1])],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 6, done.stderr
    assert "tokens.parquet: its SHA-256 is not the one the signed manifest lists" in done.stderr
    assert "Traceback" not in done.stderr
    assert left_behind(db) == []


def _b0_query():
    from gpubench.collector.aggregates import CompareQuery

    return CompareQuery(model="B0", precision="", backend="", image_size=0, train_images=0,
                        settings="", batch_rule="", pipeline="", weights="", data="", epochs=0,
                        benchmark_version="", gpu_names=(), include_outliers=True,
                        include_flagged=True, allow_mixed=True)
