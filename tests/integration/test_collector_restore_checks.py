"""A restore trusts nothing in the backup's folder: the signed manifest, every file's
SHA-256 and every run's record are checked, the schema comes from the collector's own
migrations, and a restore that fails leaves no database behind."""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from factories import make_run
from tampering import TAMPERED, backdoor_admin, faster, resign, rewrite

from gpubench.collector import backup
from gpubench.collector.auth import TokenBook
from gpubench.collector.queries import RunFilter
from gpubench.collector.store import Store

CLI = [sys.executable, "-m", "gpubench.collector.cli"]


@pytest.fixture(scope="module")
def taken(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, dict[str, float]]:
    """A backup of a database with runs on three GPUs and tokens (an admin's, a user's,
    a revoked one), what tampering.TAMPERED expects: its folder, its key, each run's
    epoch 2."""
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
    assert (manifest.runs, manifest.tokens) == (4, 3)
    store = Store(db)
    try:
        page, _ = store.runs.list(RunFilter(), page_size=100)
        assert {s.run.run_id: s.run.result.epoch2_seconds for s in page} == \
            {k: v for k, v in taken[2].items() if v}
        compare = {g.gpu_name: g.epoch2_median_seconds
                   for g in store.aggregates.compare_groups(_b0_query())}
        assert compare["Tesla T4"] == pytest.approx(16.5)
        assert {t.name: (t.admin, t.revoked) for t in store.tokens.all()} == {
            "root": (True, False), "lab": (False, False), "gone": (False, True)}
    finally:
        store.close()
    assert backup.key_path(db).read_bytes().strip() == backup.read_key(taken[1])


def backdoored_tokens(folder: Path, tmp_path: Path) -> Path:
    """A tokens.parquet with an admin token the attacker knows, beside the backup."""
    evil = tmp_path / "evil"
    shutil.copytree(folder, evil)
    rewrite(evil, "tokens", backdoor_admin)
    return evil / "tokens.parquet"


def test_a_file_swapped_after_the_check_is_refused_as_it_is_copied(
    taken, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The old gap: the files hashed, then read again to load them. A tokens.parquet
    swapped in right after the check is hashed as it is copied, and refused."""
    folder = copy_of(taken, tmp_path)
    swap = backdoored_tokens(folder, tmp_path)
    checked = backup.verify

    def verify_then_swap(*args, **kwargs):
        manifest = checked(*args, **kwargs)
        swap.replace(folder / "tokens.parquet")
        return manifest

    monkeypatch.setattr(backup, "verify", verify_then_swap)
    db = tmp_path / "restored.duckdb"
    with pytest.raises(backup.BackupError) as refused:
        backup.restore(folder, db, key=taken[1])
    assert "tokens.parquet: its SHA-256 is not the one the signed manifest lists" in \
        str(refused.value)
    assert left_behind(db) == []
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".gpubench-restore-")] == []


def test_a_file_swapped_after_the_copy_is_not_what_gets_loaded(
    taken, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Swapped once the private copies are checked, just before the load: the load reads
    the copies, so the tokens restored are the backup's."""
    folder = copy_of(taken, tmp_path)
    swap = backdoored_tokens(folder, tmp_path)
    load = backup._load

    def swap_then_load(*args, **kwargs):
        swap.replace(folder / "tokens.parquet")
        return load(*args, **kwargs)

    monkeypatch.setattr(backup, "_load", swap_then_load)
    db = tmp_path / "restored.duckdb"
    backup.restore(folder, db, key=taken[1])
    assert not swap.exists()  # it was swapped in
    store = Store(db)
    try:
        assert {t.name: (t.admin, t.revoked) for t in store.tokens.all()} == {
            "root": (True, False), "lab": (False, False), "gone": (False, True)}
        assert TokenBook(store).identify("gpb_attackers-own-secret") is None
    finally:
        store.close()


def test_restore_names_the_reason_and_exits_6(taken, tmp_path: Path) -> None:
    folder = copy_of(taken, tmp_path)
    rewrite(folder, "tokens", backdoor_admin)
    db = tmp_path / "restored.duckdb"
    done = subprocess.run([*CLI, "restore", str(folder), "--db", str(db), "--key", str(taken[1])],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 6, done.stderr
    assert "tokens.parquet: its SHA-256 is not the one the signed manifest lists" in \
        " ".join(done.stderr.split())
    assert "Traceback" not in done.stderr
    assert left_behind(db) == []


def _b0_query():
    from gpubench.collector.aggregates import CompareQuery

    return CompareQuery(model="B0", precision="", backend="", image_size=0, train_images=0,
                        settings="", batch_rule="", pipeline="", weights="", data="", epochs=0,
                        benchmark_version="", gpu_names=(), include_outliers=True,
                        include_flagged=True, allow_mixed=True)
