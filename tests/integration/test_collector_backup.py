"""`gpubench-collector backup` while a real collector process serves and submissions go
on, and `restore` into a fresh database served again: every run and token compared."""

from __future__ import annotations

import re
import select
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from factories import make_run
from waiting import STOP_DEADLINE_S

from gpubench.client import Client
from gpubench.collector.auth import TokenBook
from gpubench.collector.backup import key_path
from gpubench.collector.queries import RunFilter
from gpubench.collector.store import Store
from gpubench.v1 import collector_pb2 as pb
from gpubench.v1 import collector_pb2_grpc

CLI = [sys.executable, "-m", "gpubench.collector.cli"]
GPUS = ("Tesla T4", "NVIDIA H200", "NVIDIA A100-SXM4-80GB")


def cli(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=120)
    if check and done.returncode != 0:
        raise AssertionError(f"{args} exited {done.returncode}: {done.stderr}")
    return done


@pytest.fixture
def serve() -> Iterator:
    """Start `gpubench-collector serve --port 0` processes; killed afterwards."""
    started: list[subprocess.Popen[str]] = []

    def start(db: Path, *extra: str) -> tuple[subprocess.Popen[str], str]:
        process = subprocess.Popen([*CLI, "serve", "--db", str(db), "--port", "0",
                                    "--rate-limit", "0", *extra],
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        started.append(process)
        deadline, seen = time.monotonic() + 60, ""
        while time.monotonic() < deadline and process.poll() is None:
            if select.select([process.stdout], [], [], 0.2)[0]:
                line = process.stdout.readline()
                seen += line
                found = re.search(r" on (127\.0\.0\.1:\d+) ", line)
                if found:
                    return process, found.group(1)
        raise AssertionError(f"collector did not start: {seen}")

    yield start
    for process in started:
        if process.poll() is None:
            process.kill()
            process.wait(10)


def bearer(token: str) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {token}"),)


def _everything(db: Path) -> tuple[dict[str, tuple], dict[str, tuple]]:
    """Every run (its record and what the collector added) and every token (all but
    when it was last used) of the database `db`, by run_id and by name."""
    store = Store(db)
    try:
        runs, token = {}, ""
        while True:
            page, token = store.runs.list(RunFilter(), page_size=1000, page_token=token)
            for s in page:
                runs[s.run.run_id] = (s.run.SerializeToString(deterministic=True), s.submitter,
                                      s.received_at.ToDatetime(), s.content_sha256,
                                      s.flagged, tuple(s.flag_reasons))
            if not token:
                break
        tokens = {t.name: (t.admin, t.created_at, t.revoked) for t in store.tokens.all()}
        return runs, tokens
    finally:
        store.close()


def test_a_backup_taken_while_serving_restores_every_acknowledged_run_and_token(
    serve, tmp_path: Path
) -> None:
    db = tmp_path / "live.duckdb"
    admin = _new_token(db, "root", admin=True)
    process, address = serve(db)
    channel = grpc.insecure_channel(address)
    tokens_stub = collector_pb2_grpc.AdminStub(channel)
    lab = tokens_stub.CreateToken(pb.CreateTokenRequest(name="lab"), metadata=bearer(admin),
                                  timeout=10).secret
    tokens_stub.CreateToken(pb.CreateTokenRequest(name="gone"), metadata=bearer(admin), timeout=10)
    tokens_stub.RevokeToken(pb.RevokeTokenRequest(name="gone"), metadata=bearer(admin), timeout=10)
    stub = collector_pb2_grpc.CollectorStub(channel)
    acknowledged: list[str] = []

    def submit_one() -> None:
        run = make_run(gpu_name=GPUS[len(acknowledged) % 3])
        stub.SubmitRun(pb.SubmitRunRequest(run=run), metadata=bearer(lab), timeout=10)
        acknowledged.append(run.run_id)

    for _ in range(60):
        submit_one()
    before_backup = list(acknowledged)
    # An admin token from afar may not make the collector write on its machine.
    with pytest.raises(grpc.RpcError) as refused:
        tokens_stub.Backup(pb.BackupRequest(folder=str(tmp_path / "elsewhere")),
                           metadata=bearer(admin), timeout=10)
    assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED
    assert not (tmp_path / "elsewhere").exists()

    # Submissions go on from two threads while the backup is taken.
    stop = threading.Event()
    errors: list[BaseException] = []

    def submit_on() -> None:
        try:
            while not stop.is_set():
                submit_one()
        except BaseException as exc:  # the test fails below, naming it
            errors.append(exc)

    threads = [threading.Thread(target=submit_on) for _ in range(2)]
    for thread in threads:
        thread.start()
    time.sleep(0.3)
    folder = tmp_path / "backup"
    done = cli("backup", str(folder), "--db", str(db))
    time.sleep(0.3)
    stop.set()
    for thread in threads:
        thread.join(30)
    assert not errors, errors
    assert len(acknowledged) > len(before_backup)  # submissions went on
    assert re.search(r"backed up \d+ run\(s\) and 3 token\(s\)", done.stderr), done.stderr
    process.send_signal(signal.SIGTERM)
    assert process.wait(STOP_DEADLINE_S) == 0
    source_runs, source_tokens = _everything(db)
    assert set(source_runs) == set(acknowledged)

    restored = tmp_path / "restored.duckdb"
    cli("restore", str(folder), "--db", str(restored), "--key", str(key_path(db)))
    runs, tokens = _everything(restored)
    assert set(before_backup) <= set(runs) <= set(acknowledged)
    assert {run_id: source_runs[run_id] for run_id in runs} == runs  # each run as stored
    assert tokens == source_tokens
    # The manifest counted what the backup holds.
    assert f"backed up {len(runs)} run(s)" in done.stderr

    # The restored database serves: its tokens authenticate, a revoked one does not.
    process, address = serve(restored)
    stub = collector_pb2_grpc.CollectorStub(grpc.insecure_channel(address))
    with Client(address, admin) as client:  # pages bounded in bytes: follow the tokens
        assert {s.run.run_id for s in client.iter_runs(page_size=1000)} == set(runs)
    stub.SubmitRun(pb.SubmitRunRequest(run=make_run()), metadata=bearer(lab), timeout=10)
    with pytest.raises(grpc.RpcError) as refused:
        stub.GetRun(pb.GetRunRequest(run_id=before_backup[0]), metadata=bearer("gpb_nope"))
    assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED


def test_restore_refuses_an_existing_database_and_an_unfinished_backup(tmp_path: Path) -> None:
    db = tmp_path / "c.duckdb"
    _new_token(db, "root", admin=True)
    store = Store(db)
    store.submit_many([make_run() for _ in range(3)], "lab")
    store.close()
    folder = tmp_path / "backup"
    first = cli("backup", str(folder), "--db", str(db)).stderr
    assert "backed up 3 run(s) and 1 token(s)" in first
    assert "signed with a new backup key" in first
    # Each line within 80 columns however long the paths (words are never broken).
    assert all(len(line) <= 80 or " " not in line.strip() for line in first.splitlines()), \
        first

    again = cli("backup", str(folder), "--db", str(db), check=False)
    assert again.returncode == 6 and "not an empty folder" in again.stderr
    key = str(key_path(db))
    over = cli("restore", str(folder), "--db", str(db), "--key", key, check=False)
    assert over.returncode == 6 and "--force" in over.stderr
    restored = cli("restore", str(folder), "--db", str(db), "--key", key, "--force").stderr
    assert "restored 3 run(s)" in restored
    assert all(len(line) <= 80 or " " not in line.strip() for line in restored.splitlines()), \
        restored

    (folder / "gpubench-backup.json").unlink()
    unfinished = cli("restore", str(folder), "--db", str(tmp_path / "new.duckdb"), "--key", key,
                     check=False)
    assert unfinished.returncode == 6 and "unfinished" in unfinished.stderr
    assert not (tmp_path / "new.duckdb").exists()


def _new_token(db: Path, name: str, *, admin: bool = False) -> str:
    """A token made in the database directly (no collector serves it yet)."""
    store = Store(db)
    try:
        return TokenBook(store).create(name, admin=admin)[1]
    finally:
        store.close()


