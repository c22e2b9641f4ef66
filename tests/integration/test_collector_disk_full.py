"""A full disk: retryable refusals naming the cause, NOT_SERVING while it lasts, one log
line when it starts and one when it ends, no files left behind by the failed tries,
and recovery by itself once space is freed.

The collector's database lives on a small tmpfs mounted for the test (`mount -t tmpfs`
needs root with the right to mount, CAP_SYS_ADMIN: skipped otherwise), filled up with a
file.
"""

from __future__ import annotations

import logging
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from factories import make_run
from grpc_health.v1 import health_pb2, health_pb2_grpc

from gpubench.client import Client
from gpubench.errors import is_retryable
from gpubench.v1 import collector_pb2 as pb
from gpubench.v1 import collector_pb2_grpc

DISK_SIZE = "16m"
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING
SERVING = health_pb2.HealthCheckResponse.SERVING


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A tmpfs of DISK_SIZE mounted for the test (unmounted after the collector stops)."""
    mount_point = tmp_path / "disk"
    mount_point.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={DISK_SIZE},mode=0700", "tmpfs", str(mount_point)],
        capture_output=True, text=True,
    )
    if mounted.returncode != 0:
        # Mounting takes root with the right to mount (CAP_SYS_ADMIN), which a container's
        # root lacks unless given it.
        missing = ("this root lacks the right to mount (CAP_SYS_ADMIN; a container needs "
                   "--cap-add SYS_ADMIN)" if os.geteuid() == 0 else "it takes root")
        pytest.skip(f"needs a small file system to fill: `mount -t tmpfs` failed, {missing}: "
                    f"{mounted.stderr.strip() or mounted.returncode}")
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], check=False)


def fill(disk: Path) -> Path:
    """Fill `disk` to the last byte with a file; the file (remove it to free the space)."""
    filler = disk / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        for size in (1 << 16, 1 << 12, 1):
            while True:
                try:
                    os.write(fd, b"\0" * size)
                except OSError:
                    break
    finally:
        os.close(fd)
    return filler


def health_of(channel: grpc.Channel, service: str = "") -> int:
    stub = health_pb2_grpc.HealthStub(channel)
    return stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=10).status


def wait_for_health(channels: list[grpc.Channel], status: int, within_s: float = 15) -> None:
    deadline = time.monotonic() + within_s
    while True:
        found = [health_of(c, s) for c in channels for s in ("", "gpubench.v1.Collector")]
        if all(f == status for f in found):
            return
        assert time.monotonic() < deadline, f"health {found}, wanted {status} everywhere"
        time.sleep(0.1)


def test_a_full_disk_refuses_submissions_retryably_until_space_is_freed(
    small_disk: Path, collector_factory, caplog: pytest.LogCaptureFixture
) -> None:
    collector = collector_factory(db_path=small_disk / "c.duckdb")
    channels = [collector.channel()]
    stub = collector.collector_stub()
    stub.SubmitRun(pb.SubmitRunRequest(run=make_run()), metadata=collector.metadata(),
                   timeout=10)
    filler = fill(small_disk)
    caplog.set_level(logging.INFO)
    # A submission writes its run alone: the last block of the database's log may hold
    # a few more. They are stored (and acknowledged) until one does not fit.
    stored_in_slack = 0
    while True:
        try:
            stub.SubmitRun(pb.SubmitRunRequest(run=make_run()), metadata=collector.metadata(),
                           timeout=10)
        except grpc.RpcError:
            break
        stored_in_slack += 1
        assert stored_in_slack < 100, "the full disk took 100 runs"

    for _ in range(3):
        with pytest.raises(grpc.RpcError) as refused:
            stub.SubmitRun(pb.SubmitRunRequest(run=make_run()), metadata=collector.metadata(),
                           timeout=10)
        assert refused.value.code() in (grpc.StatusCode.RESOURCE_EXHAUSTED,
                                        grpc.StatusCode.UNAVAILABLE), refused.value.details()
        assert "cannot store runs now" in refused.value.details()
    # The agent's client takes it as "try again later", not as a refusal of the run.
    with Client(collector.address, token=collector.admin_token) as client:
        with pytest.raises(Exception) as caught:
            client.submit_run(make_run())
        assert is_retryable(caught.value), caught.value
    wait_for_health(channels, NOT_SERVING)

    # Failed tries and the retries for free space leave nothing behind.
    before = sorted(os.listdir(small_disk))
    time.sleep(2.5)  # a few retries
    for _ in range(3):
        with pytest.raises(grpc.RpcError):
            stub.SubmitRun(pb.SubmitRunRequest(run=make_run()), metadata=collector.metadata(),
                           timeout=10)
    assert sorted(os.listdir(small_disk)) == before

    # Space back: SERVING again by itself (no submission needed), and runs are stored.
    filler.unlink()
    wait_for_health(channels, SERVING)
    later = make_run()
    stub.SubmitRun(pb.SubmitRunRequest(run=later), metadata=collector.metadata(), timeout=10)
    listed = stub.ListRuns(pb.ListRunsRequest(), metadata=collector.metadata(), timeout=10)
    assert later.run_id in [r.run.run_id for r in listed.runs]
    assert len(listed.runs) == 2 + stored_in_slack
    # The whole episode: one line when it began, one when it ended, and no traceback.
    lines = [r for r in caplog.records if r.name.startswith("gpubench.collector")
             and r.levelno >= logging.WARNING]
    assert [r.levelname for r in lines] == ["ERROR", "WARNING"], [r.getMessage() for r in lines]
    assert "no space left on device" in lines[0].getMessage() or \
        "cannot store runs now" in lines[0].getMessage()
    assert "writes are durable again" in lines[1].getMessage()
    assert not any(r.exc_info for r in caplog.records)


def test_a_database_a_full_disk_broke_is_opened_again_once_space_is_back(
    small_disk: Path, collector_factory
) -> None:
    """A checkpoint that fails for want of space leaves DuckDB refusing every statement
    until the database is opened again: the collector does so itself. A run whose
    answer was an error is submitted again, as agents do: stored once."""
    collector = collector_factory(db_path=small_disk / "c.duckdb")
    # DuckDB checkpoints its log into the file past this size (16 MB by default).
    collector.store.database.cursor().execute("SET checkpoint_threshold = '1KB'")
    channels = [collector.channel()]
    stub = collector.collector_stub()
    runs = [make_run() for _ in range(3)]
    for run in runs[:2]:
        stub.SubmitRun(pb.SubmitRunRequest(run=run), metadata=collector.metadata(), timeout=10)
    filler = fill(small_disk)
    os.truncate(filler, filler.stat().st_size - 64 * 1024)  # room for the log, not a checkpoint
    try:
        stub.SubmitRun(pb.SubmitRunRequest(run=runs[2]), metadata=collector.metadata(),
                       timeout=10)
    except grpc.RpcError as refused:
        assert refused.code() in (grpc.StatusCode.RESOURCE_EXHAUSTED,
                                  grpc.StatusCode.UNAVAILABLE), refused.details()
    # A read answers, or refuses retryably: never a failure that looks final.
    try:
        stub.ListRuns(pb.ListRunsRequest(), metadata=collector.metadata(), timeout=10)
    except grpc.RpcError as refused:
        assert refused.code() in (grpc.StatusCode.RESOURCE_EXHAUSTED,
                                  grpc.StatusCode.UNAVAILABLE), refused.details()

    filler.unlink()
    wait_for_health(channels, SERVING)
    stub.SubmitRun(pb.SubmitRunRequest(run=runs[2]), metadata=collector.metadata(), timeout=10)
    listed = stub.ListRuns(pb.ListRunsRequest(), metadata=collector.metadata(), timeout=10)
    assert sorted(r.run.run_id for r in listed.runs) == sorted(r.run_id for r in runs)
    later = make_run()
    stub.SubmitRun(pb.SubmitRunRequest(run=later), metadata=collector.metadata(), timeout=10)
    assert collector.store.runs.count() == 4


def test_a_start_on_a_full_disk_says_what_to_do_or_serves_what_it_holds(
    small_disk: Path
) -> None:
    """Not a traceback at every restart. A new database on a full disk: one line that
    says what to do. A collector killed -9 with runs acknowledged, started again once its
    disk is full: it serves every one of them, and refuses submissions retryably while
    the disk stays full."""
    import signal
    import sys

    from gpubench.collector import local_admin

    cli = [sys.executable, "-m", "gpubench.collector.cli"]
    filler = fill(small_disk)
    done = subprocess.run([*cli, "serve", "--db", str(small_disk / "new.duckdb"), "--port",
                           "0"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    assert "cannot start the collector: no space left on device" in done.stderr
    assert "free space on its disk" in done.stderr
    filler.unlink()
    for leftover in small_disk.iterdir():
        leftover.unlink()

    db = small_disk / "c.duckdb"

    def started() -> tuple[subprocess.Popen, collector_pb2_grpc.CollectorStub, tuple]:
        serving = subprocess.Popen([*cli, "serve", "--db", str(db), "--port", "0"],
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        line = serving.stdout.readline()
        assert "collector serving" in line, serving.stderr.read() if not line else line
        credential = local_admin.read(db)
        stub = collector_pb2_grpc.CollectorStub(grpc.insecure_channel(credential.address))
        return serving, stub, (("authorization", f"Bearer {credential.secret}"),)

    serving, stub, md = started()
    runs = [make_run() for _ in range(5)]
    for run in runs:  # acknowledged: in DuckDB's log, not yet checkpointed
        stub.SubmitRun(pb.SubmitRunRequest(run=run), timeout=30, metadata=md)
    serving.send_signal(signal.SIGKILL)
    serving.wait(30)
    fill(small_disk)
    serving, stub, md = started()
    try:
        listed = stub.ListRuns(pb.ListRunsRequest(), metadata=md, timeout=30)
        assert sorted(r.run.run_id for r in listed.runs) == sorted(r.run_id for r in runs)
        # Opening may have checkpointed DuckDB's log into the file, and the log's pages
        # may be written again in place: a few runs may still fit. Runs are submitted
        # until one does not; it is refused retryably, and every one acknowledged is kept.
        fill(small_disk)
        stored = []
        with pytest.raises(grpc.RpcError) as refused:
            for _ in range(500):
                run = make_run()
                stub.SubmitRun(pb.SubmitRunRequest(run=run), timeout=30, metadata=md)
                stored.append(run.run_id)
        assert refused.value.code() in (grpc.StatusCode.RESOURCE_EXHAUSTED,
                                        grpc.StatusCode.UNAVAILABLE), refused.value.details()
        listed = stub.ListRuns(pb.ListRunsRequest(page_size=1000), metadata=md, timeout=30)
        assert {r.run.run_id for r in listed.runs} == {r.run_id for r in runs} | set(stored)
    finally:
        serving.send_signal(signal.SIGTERM)
        serving.wait(60)
    assert "Traceback" not in serving.stderr.read()
