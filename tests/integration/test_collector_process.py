"""The real `gpubench-collector` process: crash durability, graceful stop, live token
commands, import."""

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
from datetime import datetime
from pathlib import Path

import grpc
import pytest
from factories import make_run
from waiting import STOP_DEADLINE_S

from gpubench import record
from gpubench.collector import local_admin
from gpubench.collector.frontend import OWNER_GONE
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


@pytest.mark.parametrize("frontends", ["1", "2"])
def test_an_acknowledged_run_survives_a_kill_9_the_next_moment(
    serve, tmp_path: Path, frontends: str
) -> None:
    db = tmp_path / "c.duckdb"
    admin = cli("token", "create", "root", "--admin", "--db", str(db)).stdout.strip()
    served = serve(db, "--frontends", frontends)
    stub = served.stub()
    runs = [make_run(gpu_name=g) for g in ("Tesla T4", "NVIDIA H200") * 10]
    for run in runs:
        stub.SubmitRun(pb.SubmitRunRequest(run=run), metadata=bearer(admin), timeout=10)
    os.kill(served.process.pid, signal.SIGKILL)  # right after the last acknowledgement
    served.process.wait(10)

    store = Store(db)  # replays the write-ahead log
    try:
        assert store.count() == len(runs)
        assert store.get(runs[-1].run_id).run == runs[-1]
    finally:
        store.close()


def test_sigterm_stops_gracefully_checkpoints_and_removes_the_credential(
    serve, tmp_path: Path
) -> None:
    db = tmp_path / "c.duckdb"
    admin = cli("token", "create", "root", "--admin", "--db", str(db)).stdout.strip()
    served = serve(db)
    credential = local_admin.credential_path(db)
    assert credential.stat().st_mode & 0o777 == 0o600
    run = make_run()
    served.stub().SubmitRun(pb.SubmitRunRequest(run=run), metadata=bearer(admin), timeout=10)
    served.process.send_signal(signal.SIGTERM)
    assert served.process.wait(STOP_DEADLINE_S) == 0
    assert not credential.exists()
    wal = db.with_name(db.name + ".wal")
    assert not wal.exists() or wal.stat().st_size == 0  # checkpointed into the file
    store = Store(db)
    try:
        assert store.get(run.run_id).run == run
    finally:
        store.close()


@pytest.mark.parametrize("frontends", ["1", "2"])
def test_token_commands_work_against_a_live_collector(
    serve, tmp_path: Path, frontends: str
) -> None:
    db = tmp_path / "c.duckdb"
    served = serve(db, "--frontends", frontends)  # a fresh deployment: no token yet
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


def test_token_commands_without_a_collector_open_the_database(tmp_path: Path) -> None:
    db = tmp_path / "sub" / "c.duckdb"
    secret = cli("token", "create", "first-admin", "--admin", "--db", str(db)).stdout.strip()
    store = Store(db)
    try:
        [row] = store.tokens()
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
    served.process.send_signal(signal.SIGINT)
    assert served.process.wait(STOP_DEADLINE_S) == 0
    store = Store(db)
    try:
        assert store.count() == 4
        assert {r.submitter for r in store.list(RunFilter(), page_size=10)[0]} == {
            "import", "local-admin"}
    finally:
        store.close()


def _children(pid: int) -> list[int]:
    """The process ids of `pid`'s children (Linux /proc)."""
    found = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        found += [int(c) for c in (task / "children").read_text().split()]
    return found


def _gone(pids: list[int], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not any(Path(f"/proc/{pid}").exists() and "zombie" not in
                   Path(f"/proc/{pid}/status").read_text().lower() for pid in pids):
            return True
        time.sleep(0.1)
    return False


def test_sigterm_with_frontends_stops_them_first_and_loses_nothing_acknowledged(
    serve, tmp_path: Path
) -> None:
    db = tmp_path / "c.duckdb"
    admin = cli("token", "create", "root", "--admin", "--db", str(db)).stdout.strip()
    served = serve(db, "--frontends", "2", "--rate-limit", "0")
    frontends = _children(served.process.pid)
    assert len(frontends) == 2
    acknowledged: list[str] = []
    refused: list[grpc.StatusCode] = []
    lock = threading.Lock()
    started = threading.Barrier(5)

    def submitter() -> None:
        channel = grpc.insecure_channel(served.address,
                                        options=[("grpc.use_local_subchannel_pool", 1)])
        stub = collector_pb2_grpc.CollectorStub(channel)
        started.wait()
        try:
            while True:
                run = make_run()
                stub.SubmitRun(pb.SubmitRunRequest(run=run), metadata=bearer(admin), timeout=10)
                with lock:
                    acknowledged.append(run.run_id)
        except grpc.RpcError as exc:  # the collector stopped: refused or unreachable
            with lock:
                refused.append(exc.code())
        finally:
            channel.close()

    threads = [threading.Thread(target=submitter) for _ in range(4)]
    for t in threads:
        t.start()
    started.wait()
    time.sleep(1.0)  # submissions flowing through both front-ends
    served.process.send_signal(signal.SIGTERM)
    assert served.process.wait(STOP_DEADLINE_S) == 0
    for t in threads:
        t.join(30)
    assert _gone(frontends, STOP_DEADLINE_S)
    assert len(acknowledged) > 10 and len(refused) == 4
    # What gRPC answers a call arriving while a server shuts down: neither acknowledges.
    assert set(refused) <= {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED}
    stored = _stored_run_ids(db)
    assert set(acknowledged) <= stored  # every acknowledged run survived the stop
    assert len(stored) - len(acknowledged) <= len(threads)  # at most one unanswered each


def test_frontends_exit_when_the_owner_is_killed(serve, tmp_path: Path) -> None:
    served = serve(tmp_path / "c.duckdb", "--frontends", "2")
    frontends = _children(served.process.pid)
    assert len(frontends) == 2
    os.kill(served.process.pid, signal.SIGKILL)
    served.process.wait(10)
    assert _gone(frontends, STOP_DEADLINE_S)


def test_a_collector_killed_9_starts_again_on_the_same_port_at_once(serve, tmp_path: Path) -> None:
    """Its orphaned front-ends, answering the calls that kept coming, used to hold the
    port for seconds ("address in use")."""
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    db = tmp_path / "c.duckdb"
    admin = cli("token", "create", "root", "--admin", "--db", str(db)).stdout.strip()
    served = serve(db, "--frontends", "2", "--port", str(port), "--rate-limit", "0")
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
        again = serve(db, "--frontends", "2", "--port", str(port))  # started again at once
    finally:
        stop.set()
        for thread in threads:
            thread.join(30)
    assert again.address == f"127.0.0.1:{port}"
    # Until the killed collector's front-ends see their owner gone (longer on a loaded
    # machine), the port's new connections may still reach one of them, which answers
    # UNAVAILABLE (OWNER_GONE): retryable, as agents retry it. Nothing else is allowed.
    stub = again.stub()
    deadline = time.monotonic() + 30
    while True:
        try:
            stub.SubmitRun(pb.SubmitRunRequest(run=make_run()), metadata=bearer(admin),
                           timeout=30)
            break
        except grpc.RpcError as exc:
            orphan = exc.code() == grpc.StatusCode.UNAVAILABLE and OWNER_GONE in exc.details()
            if not orphan or time.monotonic() > deadline:
                raise
            time.sleep(0.1)


# Enough calls in flight that some are still waiting when a front-end sees its owner gone.
CRASH_CALLERS = 128


def test_an_owner_crash_answers_calls_in_flight_unavailable(serve, tmp_path: Path) -> None:
    """Retryable, so that agents send their runs again (to a restarted collector)."""
    db = tmp_path / "c.duckdb"
    admin = cli("token", "create", "root", "--admin", "--db", str(db)).stdout.strip()
    served = serve(db, "--frontends", "2", "--rate-limit", "0")
    frontends = _children(served.process.pid)
    ended: list[tuple[grpc.StatusCode, str]] = []
    lock = threading.Lock()
    started = threading.Barrier(CRASH_CALLERS + 1)

    def submitter() -> None:
        channel = grpc.insecure_channel(served.address,
                                        options=[("grpc.use_local_subchannel_pool", 1)])
        stub = collector_pb2_grpc.CollectorStub(channel)
        started.wait()
        try:
            while True:  # always a call in flight, most of the time waiting for the owner
                stub.SubmitRun(pb.SubmitRunRequest(run=make_run()), metadata=bearer(admin),
                               timeout=10)
        except grpc.RpcError as exc:
            with lock:
                ended.append((exc.code(), exc.details()))
        finally:
            channel.close()

    threads = [threading.Thread(target=submitter) for _ in range(CRASH_CALLERS)]
    for t in threads:
        t.start()
    started.wait()
    time.sleep(1.0)
    os.kill(served.process.pid, signal.SIGKILL)
    served.process.wait(10)
    for t in threads:
        t.join(30)
    assert _gone(frontends, 15)
    assert len(ended) == len(threads)
    assert [e for e in ended if e[0] != grpc.StatusCode.UNAVAILABLE] == []


def test_serve_frontends_help_and_bad_values(tmp_path: Path) -> None:
    assert "--frontends N|auto" in cli("serve", "--help").stdout
    bad = cli("serve", "--db", str(tmp_path / "c.duckdb"), "--frontends", "0", check=False)
    assert bad.returncode == 2 and "a number 1-64 or auto" in bad.stderr


def _stored_run_ids(db: Path) -> set[str]:
    """Every run_id in the database, read page by page (more runs than one page holds
    are acknowledged in a second on a fast machine)."""
    store = Store(db)
    try:
        ids: set[str] = set()
        token = ""
        while True:
            page, token = store.list(RunFilter(), page_size=1000, page_token=token)
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
    assert not local_admin.credential_path(tmp_path / "c.duckdb").exists()


def _poisoned_journal(db: Path) -> tuple[str, str]:
    """A database whose journal holds, as a crash leaves it, a run the database refuses
    (3e9 training images, let in by an older validation) and a good one; their run_ids."""
    from gpubench.collector.intake import Journal, JournalEntry, journal_folder

    Store(db).close()
    poisoned = make_run(config__train_images=3_000_000_000, config__image_count=0)
    good = make_run()
    journal = Journal(journal_folder(db))
    for run in (poisoned, good):
        journal.append([JournalEntry(run.run_id, "old-agent", datetime(2026, 1, 1),
                                     record.content_sha256(run),
                                     run.SerializeToString(deterministic=True))])
    journal.close()
    return poisoned.run_id, good.run_id


def test_quarantine_commands_list_retry_and_drop(tmp_path: Path) -> None:
    db = tmp_path / "c.duckdb"
    poisoned, good = _poisoned_journal(db)
    listed = cli("quarantine", "list", "--db", str(db))  # opening stores the journal
    assert poisoned in listed.stdout and "does not fit INTEGER" in listed.stdout
    assert good not in listed.stdout and "1 run(s) in quarantine" in listed.stderr
    assert "held in quarantine" in listed.stderr  # the warning on opening, and the log line

    retried = cli("quarantine", "retry", "--db", str(db), check=False)
    assert retried.returncode == 1
    assert f"still refused {poisoned}" in retried.stdout
    assert "stay in quarantine" in " ".join(retried.stderr.split())

    nothing = cli("quarantine", "drop", "--db", str(db), check=False)
    assert nothing.returncode == 2  # a run_id is required: there is no "drop all"
    unknown = cli("quarantine", "drop", "00000000-0000-4000-8000-000000000000", "--db", str(db),
                  check=False)
    assert unknown.returncode == 5 and "not in quarantine" in " ".join(unknown.stderr.split())

    dropped = cli("quarantine", "drop", poisoned, "--db", str(db))
    assert f"dropped {poisoned} (submitter old-agent" in dropped.stdout
    assert "not stored anywhere" in " ".join(dropped.stderr.split())
    assert "no runs in quarantine" in cli("quarantine", "list", "--db", str(db)).stderr
    store = Store(db)
    try:
        assert store.count() == 1 and store.get(good).submitter == "old-agent"
    finally:
        store.close()


def test_a_poisoned_journal_stops_no_command_and_quarantine_works_live(
    serve, tmp_path: Path
) -> None:
    """Each of these replays the journal on opening; none may fail because of one entry."""
    db = tmp_path / "c.duckdb"
    poisoned, good = _poisoned_journal(db)
    listed = cli("token", "list", "--db", str(db))
    assert "held in quarantine" in listed.stderr  # the operator is told, the command works
    admin = cli("token", "create", "root", "--admin", "--db", str(db)).stdout.strip()
    later = tmp_path / "later.json"
    later.write_text(record.to_json(make_run(model="B3")))
    cli("import", str(later), "--db", str(db))
    served = serve(db)
    stub = served.stub()
    stub.SubmitRun(pb.SubmitRunRequest(run=make_run()), metadata=bearer(admin), timeout=10)
    assert stub.GetRun(pb.GetRunRequest(run_id=good), metadata=bearer(admin), timeout=10)

    # While it serves, the commands go through it.
    assert poisoned in cli("quarantine", "list", "--db", str(db)).stdout
    assert cli("quarantine", "retry", poisoned, "--db", str(db), check=False).returncode == 1
    assert f"dropped {poisoned}" in cli("quarantine", "drop", poisoned, "--db", str(db)).stdout
    served.process.send_signal(signal.SIGTERM)
    assert served.process.wait(STOP_DEADLINE_S) == 0
    store = Store(db)
    try:
        assert store.count() == 3 and store.quarantine_count() == 0
    finally:
        store.close()
