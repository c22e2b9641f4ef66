"""The real `gpubench-collector` process: crash durability, graceful stop, live token
commands, import, a database from before the first release refused."""

from __future__ import annotations

import os
import re
import select
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest
from factories import make_run
from waiting import STOP_DEADLINE_S

from gpubench import record
from gpubench.collector import local_admin
from gpubench.collector.queries import RunFilter
from gpubench.collector.store import Store
from gpubench.v1 import collector_pb2 as pb
from gpubench.v1 import collector_pb2_grpc

CLI = [sys.executable, "-m", "gpubench.collector.cli"]


def cli(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=60)
    if check and done.returncode != 0:
        raise AssertionError(f"{args} exited {done.returncode}: {done.stderr}")
    return done


@dataclass
class Served:
    process: subprocess.Popen[str]
    address: str
    db: Path

    def stub(self) -> collector_pb2_grpc.CollectorStub:
        return collector_pb2_grpc.CollectorStub(grpc.insecure_channel(self.address))

    def stop(self, signum: int) -> int:
        """Send `signum` and wait for the exit; its exit code. A collector still there
        after STOP_DEADLINE_S is killed, and what it said (each thread's stack, past
        its own STOP_STUCK_S) is the failure's message."""
        self.process.send_signal(signum)
        try:
            return self.process.wait(STOP_DEADLINE_S)
        except subprocess.TimeoutExpired:
            self.process.kill()
            _, said = self.process.communicate()
            raise AssertionError(f"no exit {STOP_DEADLINE_S:.0f} s after signal {signum}:\n"
                                 + said[-20000:]) from None


def _wait_for_address(process: subprocess.Popen[str], timeout: float = 60.0) -> str:
    deadline = time.monotonic() + timeout
    seen = ""
    while time.monotonic() < deadline:
        ready, _, _ = select.select([process.stdout], [], [], 0.2)
        if ready:
            line = process.stdout.readline()
            seen += line
            found = re.search(r" on (127\.0\.0\.1:\d+) ", line)
            if found:
                return found.group(1)
        if process.poll() is not None:
            break
    process.kill()
    raise AssertionError(f"collector did not start: {seen}{process.stderr.read()}")


@pytest.fixture
def serve(tmp_path: Path) -> Iterator:
    started: list[subprocess.Popen[str]] = []

    def start(db: Path, *extra: str) -> Served:
        process = subprocess.Popen(
            [*CLI, "serve", "--db", str(db), "--port", "0", *extra],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        started.append(process)
        return Served(process, _wait_for_address(process), db)

    yield start
    for process in started:
        if process.poll() is None:
            process.kill()
            process.wait(10)


def bearer(token: str) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {token}"),)


def test_an_acknowledged_run_survives_a_kill_9_the_next_moment(serve, tmp_path: Path) -> None:
    db = tmp_path / "c.duckdb"
    admin = cli("token", "create", "root", "--admin", "--db", str(db)).stdout.strip()
    served = serve(db)
    stub = served.stub()
    runs = [make_run(gpu_name=g) for g in ("Tesla T4", "NVIDIA H200") * 10]
    for run in runs:
        stub.SubmitRun(pb.SubmitRunRequest(run=run), metadata=bearer(admin), timeout=10)
    os.kill(served.process.pid, signal.SIGKILL)  # right after the last acknowledgement
    served.process.wait(10)

    store = Store(db)  # replays the write-ahead log
    try:
        assert store.runs.count() == len(runs)
        assert store.runs.get(runs[-1].run_id).run == runs[-1]
    finally:
        store.close()


def test_sigterm_stops_gracefully_checkpoints_and_removes_the_admin_folder(
    serve, tmp_path: Path
) -> None:
    db = tmp_path / "c.duckdb"
    admin = cli("token", "create", "root", "--admin", "--db", str(db)).stdout.strip()
    served = serve(db)
    folder = local_admin.admin_folder(db)
    assert folder.stat().st_mode & 0o777 == 0o700  # only its owner may enter
    assert (folder / local_admin.SECRET).stat().st_mode & 0o777 == 0o600
    run = make_run()
    served.stub().SubmitRun(pb.SubmitRunRequest(run=run), metadata=bearer(admin), timeout=10)
    assert served.stop(signal.SIGTERM) == 0
    assert not folder.exists()
    wal = db.with_name(db.name + ".wal")
    assert not wal.exists() or wal.stat().st_size == 0  # checkpointed into the file
    store = Store(db)
    try:
        assert store.runs.get(run.run_id).run == run
    finally:
        store.close()


def test_token_commands_work_against_a_live_collector(serve, tmp_path: Path) -> None:
    db = tmp_path / "c.duckdb"
    served = serve(db)  # a fresh deployment: no token yet
    created = cli("token", "create", "boss", "--admin", "--db", str(db))
    boss = created.stdout.strip()
    assert boss.startswith("gpb_") and "not shown again" in created.stderr
    alice = cli("token", "create", "alice", "--db", str(db)).stdout.strip()

    stub = served.stub()
    stub.SubmitRun(pb.SubmitRunRequest(run=make_run()), metadata=bearer(alice), timeout=10)
    listed = cli("token", "list", "--db", str(db)).stdout
    assert re.search(r"alice\s.*\d{4}-\d\d-\d\d", listed) and "boss" in listed

    again = cli("token", "create", "alice", "--db", str(db), check=False)
    assert again.returncode == 1 and "already exists" in again.stderr

    cli("token", "revoke", "alice", "--db", str(db))
    with pytest.raises(grpc.RpcError) as caught:
        stub.SubmitRun(pb.SubmitRunRequest(run=make_run()), metadata=bearer(alice), timeout=10)
    assert caught.value.code() == grpc.StatusCode.UNAUTHENTICATED
    stub.ListRuns(pb.ListRunsRequest(), metadata=bearer(boss), timeout=10)

    missing = cli("token", "revoke", "nobody", "--db", str(db), check=False)
    assert missing.returncode == 5  # not found


def test_a_database_deep_in_the_tree_is_administered_through_a_short_link(
        serve, tmp_path: Path) -> None:
    # The admin folder's socket path would pass the 107 bytes a Unix socket's path holds.
    db = tmp_path / ("a-folder-with-a-rather-long-name-" * 3) / "c.duckdb"
    db.parent.mkdir()
    assert len(str(db.parent / "c.duckdb.admin" / "socket")) > 107
    served = serve(db)
    boss = cli("token", "create", "boss", "--admin", "--db", str(db)).stdout.strip()
    served.stub().ListRuns(pb.ListRunsRequest(), metadata=bearer(boss), timeout=10)
    alias = Path((db.parent / "c.duckdb.admin" / "alias").read_text())
    assert alias.stat().st_mode & 0o777 == 0o700
    served.process.send_signal(signal.SIGTERM)  # a clean stop removes both
    assert served.process.wait(60) == 0
    assert not alias.exists() and not (db.parent / "c.duckdb.admin").exists()


def test_token_commands_without_a_collector_open_the_database(tmp_path: Path) -> None:
    db = tmp_path / "sub" / "c.duckdb"
    secret = cli("token", "create", "first-admin", "--admin", "--db", str(db)).stdout.strip()
    store = Store(db)
    try:
        [row] = store.tokens.all()
        assert (row.name, row.admin) == ("first-admin", True)
        assert row.secret_sha256 != secret
    finally:
        store.close()
    bad = cli("token", "create", "no spaces", "--db", str(db), check=False)
    assert bad.returncode == 6 and "token name" in bad.stderr
    assert "Traceback" not in bad.stderr


def test_import_validates_and_is_idempotent(serve, tmp_path: Path) -> None:
    db = tmp_path / "c.duckdb"
    files = []
    for i, gpu in enumerate(("Tesla T4", "NVIDIA H200", "NVIDIA RTX 6000 Ada Generation")):
        path = tmp_path / f"run-{i}.json"
        path.write_text(record.to_json(make_run(gpu_name=gpu)))
        files.append(str(path))
    cli("import", *files, "--db", str(db))
    cli("import", *files, "--db", str(db))  # again: nothing new

    broken = make_run()
    broken.config.batch_per_gpu = 0
    bad = tmp_path / "bad.json"
    bad.write_text(record.to_json(broken))
    refused = cli("import", str(bad), "--db", str(db), check=False)
    assert refused.returncode == 6
    # One message, wrapped at 80 columns: the file and the field that is wrong.
    assert "bad.json: run.config.batch_per_gpu: must be >= 1, got 0" in \
        " ".join(refused.stderr.split())

    # While a collector holds the database, import goes through it.
    later = tmp_path / "later.json"
    later.write_text(record.to_json(make_run(model="B7")))
    served = serve(db)
    cli("import", str(later), "--db", str(db))
    assert served.stop(signal.SIGINT) == 0
    store = Store(db)
    try:
        assert store.runs.count() == 4
        assert {r.submitter for r in store.runs.list(RunFilter(), page_size=10)[0]} == {
            "import", "local-admin"}
    finally:
        store.close()


def test_a_collector_killed_9_starts_again_on_the_same_port_at_once(serve, tmp_path: Path) -> None:
    """With calls coming in until the kill, and again at once after it."""
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    db = tmp_path / "c.duckdb"
    admin = cli("token", "create", "root", "--admin", "--db", str(db)).stdout.strip()
    served = serve(db, "--port", str(port), "--rate-limit", "0")
    stop = threading.Event()

    def submitter() -> None:  # calls keep coming, as from agents, retried on any error
        channel = grpc.insecure_channel(served.address)
        stub = collector_pb2_grpc.CollectorStub(channel)
        while not stop.is_set():
            try:
                stub.SubmitRun(pb.SubmitRunRequest(run=make_run()), metadata=bearer(admin),
                               timeout=10)
            except grpc.RpcError:
                stop.wait(0.01)
        channel.close()

    threads = [threading.Thread(target=submitter) for _ in range(8)]
    for thread in threads:
        thread.start()
    try:
        time.sleep(1.0)
        os.kill(served.process.pid, signal.SIGKILL)
        served.process.wait(10)
        again = serve(db, "--port", str(port))  # started again at once
    finally:
        stop.set()
        for thread in threads:
            thread.join(30)
    assert again.address == f"127.0.0.1:{port}"
    # A channel to the address may share the killed collector's connection, in its
    # reconnection backoff: wait for it to be ready, as agents retry UNAVAILABLE.
    again.stub().SubmitRun(pb.SubmitRunRequest(run=make_run()), metadata=bearer(admin),
                           timeout=30, wait_for_ready=True)


def _stored_run_ids(db: Path) -> set[str]:
    """Every run_id in the database, read page by page (more runs than one page holds
    are acknowledged in a second on a fast machine)."""
    store = Store(db)
    try:
        ids: set[str] = set()
        token = ""
        while True:
            page, token = store.runs.list(RunFilter(), page_size=1000, page_token=token)
            ids.update(r.run.run_id for r in page)
            if not token:
                return ids
    finally:
        store.close()


def test_serve_refuses_plaintext_off_loopback(tmp_path: Path) -> None:
    done = cli("serve", "--db", str(tmp_path / "c.duckdb"), "--host", "0.0.0.0", "--port", "0",
               check=False)
    assert done.returncode == 1
    assert "plaintext is only allowed on a loopback address" in " ".join(done.stderr.split())
    assert "Traceback" not in done.stderr
    assert not local_admin.admin_folder(tmp_path / "c.duckdb").exists()


def test_serve_refuses_a_database_from_before_the_first_release(tmp_path: Path) -> None:
    """A database whose schema a collector from before the first release made: refused
    at start, naming the file and what to do, and left as it was."""
    db = tmp_path / "c.duckdb"
    store = Store(db)
    store.database.cursor().execute(
        "DELETE FROM schema_migrations; INSERT INTO schema_migrations VALUES "
        "('0001_runs', now()), ('0015_math_mode', now())")
    store.close()
    done = cli("serve", "--db", str(db), "--port", "0", check=False)
    said = " ".join(done.stderr.split())
    assert done.returncode == 6, done.stderr
    assert f"{db}: made by a gpubench from before its first release (migrations " \
        "0001_runs to 0015_math_mode)" in said
    assert "Start a new database file (another --db)" in said
    assert "gpubench-collector import" in said and "spool's sent/ folder" in said
    assert "Traceback" not in done.stderr
    assert not local_admin.admin_folder(db).exists()
    again = cli("token", "list", "--db", str(db), check=False)
    assert again.returncode == 6 and "before its first release" in again.stderr
