"""A full disk: retryable refusals naming the cause, NOT_SERVING while it lasts, no files
left behind by the failed tries, and recovery by itself once space is freed.

The collector's database and journal live on a small tmpfs mounted for the test
(`mount -t tmpfs` needs root with the right to mount, CAP_SYS_ADMIN: skipped
otherwise), filled up with a file.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from factories import make_run
from grpc_health.v1 import health_pb2, health_pb2_grpc
from test_collector_frontends import channels_to_each_frontend

from gpubench.client import Client
from gpubench.collector.intake import journal_folder
from gpubench.errors import is_retryable
from gpubench.v1 import collector_pb2 as pb

DISK_SIZE = "16m"
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING
SERVING = health_pb2.HealthCheckResponse.SERVING


@pytest.fixture(params=[1, 2], ids=["1-process", "2-frontends"])
def frontends(request: pytest.FixtureRequest) -> int:
    """Every test here runs against a single-process collector and one with 2 front-ends."""
    return request.param


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


def health_channels(collector) -> list[grpc.Channel]:
    """A channel to each process answering health checks."""
    if collector.frontends is None:
        return [collector.channel()]
    return channels_to_each_frontend(collector)


def wait_for_health(channels: list[grpc.Channel], status: int, within_s: float = 15) -> None:
    deadline = time.monotonic() + within_s
    while True:
        found = [health_of(c, s) for c in channels for s in ("", "gpubench.v1.Collector")]
        if all(f == status for f in found):
            return
        assert time.monotonic() < deadline, f"health {found}, wanted {status} everywhere"
        time.sleep(0.1)


def test_a_full_disk_refuses_submissions_retryably_until_space_is_freed(
    small_disk: Path, collector_factory
) -> None:
    collector = collector_factory(db_path=small_disk / "c.duckdb")
    channels = health_channels(collector)
    stub = collector.collector_stub()
    journal = journal_folder(collector.db_path)
    # Filled before any run: a run's entry could fit in what the journal's last page
    # has left, and the test would depend on the runs' sizes.
    filler = fill(small_disk)

    for _ in range(3):
        with pytest.raises(grpc.RpcError) as refused:
            stub.SubmitRun(pb.SubmitRunRequest(run=make_run()), metadata=collector.metadata(),
                           timeout=10)
        assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "no space left on device" in refused.value.details()
        assert "intake journal" in refused.value.details()
    # The agent's client takes it as "try again later", not as a refusal of the run.
    with Client(collector.address, token=collector.admin_token) as client:
        with pytest.raises(Exception) as caught:
            client.submit_run(make_run())
        assert is_retryable(caught.value), caught.value
    wait_for_health(channels, NOT_SERVING)

    # Failed tries and the probes for free space leave nothing behind.
    before = sorted(os.listdir(journal))
    time.sleep(2.5)  # a few probes
    for _ in range(3):
        with pytest.raises(grpc.RpcError):
            stub.SubmitRun(pb.SubmitRunRequest(run=make_run()), metadata=collector.metadata(),
                           timeout=10)
    assert sorted(os.listdir(journal)) == before
    assert len(before) <= 2, before

    # Space back: SERVING again by itself (no submission needed), and runs are stored.
    filler.unlink()
    wait_for_health(channels, SERVING)
    later = make_run()
    stub.SubmitRun(pb.SubmitRunRequest(run=later), metadata=collector.metadata(), timeout=10)
    listed = stub.ListRuns(pb.ListRunsRequest(), metadata=collector.metadata(), timeout=10)
    assert [r.run.run_id for r in listed.runs] == [later.run_id]
    assert not [name for name in os.listdir(journal) if not name.endswith(".log")]


def test_runs_acknowledged_before_the_disk_filled_are_kept_and_read_once_space_is_back(
    small_disk: Path, collector_factory
) -> None:
    collector = collector_factory(db_path=small_disk / "c.duckdb")
    channels = health_channels(collector)
    stub = collector.collector_stub()
    runs = [make_run() for _ in range(3)]
    for run in runs:
        stub.SubmitRun(pb.SubmitRunRequest(run=run), metadata=collector.metadata(), timeout=10)
    filler = fill(small_disk)  # within a second: before the runs go from the journal to DuckDB
    journal = journal_folder(collector.db_path)
    assert any(p.stat().st_size for p in journal.iterdir()), "the runs were stored too soon"

    # Reads go on meanwhile: the runs DuckDB cannot take are read from the backlog.
    listed = stub.ListRuns(pb.ListRunsRequest(), metadata=collector.metadata(), timeout=10)
    assert {r.run.run_id for r in listed.runs} == {r.run_id for r in runs}
    wait_for_health(channels, NOT_SERVING)  # the flusher could not store them
    time.sleep(3)  # the flusher tries again every second
    segments = sorted(os.listdir(journal))
    assert len(segments) <= 2, f"a segment per failed try: {segments}"

    filler.unlink()
    wait_for_health(channels, SERVING)
    listed = stub.ListRuns(pb.ListRunsRequest(), metadata=collector.metadata(), timeout=10)
    assert {r.run.run_id for r in listed.runs} == {r.run_id for r in runs}
    assert len(os.listdir(journal)) == 1  # the current segment, empty


def test_a_database_a_full_disk_broke_is_opened_again_once_space_is_back(
    small_disk: Path, collector_factory
) -> None:
    """A checkpoint that fails for want of space leaves DuckDB refusing every statement
    until the database is opened again: the collector does so itself."""
    collector = collector_factory(db_path=small_disk / "c.duckdb")
    # DuckDB checkpoints its log into the file past this size (16 MB by default).
    collector.store.database.cursor().execute("SET checkpoint_threshold = '1KB'")
    channels = health_channels(collector)
    stub = collector.collector_stub()
    runs = [make_run() for _ in range(3)]
    for run in runs[:2]:
        stub.SubmitRun(pb.SubmitRunRequest(run=run), metadata=collector.metadata(), timeout=10)
    collector.store.catch_up()  # in DuckDB before the disk fills
    filler = fill(small_disk)
    os.truncate(filler, filler.stat().st_size - 64 * 1024)  # room for the journal only
    stub.SubmitRun(pb.SubmitRunRequest(run=runs[2]), metadata=collector.metadata(), timeout=10)
    wait_for_health(channels, NOT_SERVING)  # the flusher's insert broke the database
    # A read answers with every acknowledged run (the flusher opened the database again),
    # or refuses retryably: never a failure that looks final.
    try:
        listed = stub.ListRuns(pb.ListRunsRequest(), metadata=collector.metadata(), timeout=10)
    except grpc.RpcError as refused:
        assert refused.code() in (grpc.StatusCode.RESOURCE_EXHAUSTED,
                                  grpc.StatusCode.UNAVAILABLE), refused.details()
    else:
        assert {r.run.run_id for r in listed.runs} == {r.run_id for r in runs}

    filler.unlink()
    wait_for_health(channels, SERVING)
    listed = stub.ListRuns(pb.ListRunsRequest(), metadata=collector.metadata(), timeout=10)
    assert {r.run.run_id for r in listed.runs} == {r.run_id for r in runs}
    later = make_run()
    stub.SubmitRun(pb.SubmitRunRequest(run=later), metadata=collector.metadata(), timeout=10)
    assert collector.store.count() == 4


@pytest.mark.parametrize("frontends", [1, 2], ids=["1-process", "2-frontends"])
def test_a_start_on_a_full_disk_exits_with_one_line_saying_what_to_do(
    small_disk: Path, frontends: int
) -> None:
    """Not a traceback at every restart: a collector killed with runs in its journal,
    started again once its disk is full."""
    import json
    import signal
    import sys

    from gpubench.collector import local_admin
    from gpubench.collector.store import Store
    from gpubench.v1 import collector_pb2_grpc

    db = small_disk / "c.duckdb"
    store = Store(db)
    store.submit_many([make_run() for _ in range(20)], "lab")
    store.close()
    cli = [sys.executable, "-m", "gpubench.collector.cli"]
    serving = subprocess.Popen([*cli, "serve", "--db", str(db), "--port", "0",
                                "--frontends", str(frontends)],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = serving.stdout.readline()
    assert "collector serving" in line, serving.stderr.read() if not line else line
    credential = json.loads(local_admin.credential_path(db).read_text())
    channel = grpc.insecure_channel(credential["address"])
    stub = collector_pb2_grpc.CollectorStub(channel)
    for _ in range(5):  # acknowledged: in the journal, not yet all in DuckDB
        stub.SubmitRun(pb.SubmitRunRequest(run=make_run()), timeout=30,
                       metadata=(("authorization", f"Bearer {credential['secret']}"),))
    channel.close()
    serving.send_signal(signal.SIGKILL)
    serving.wait(30)
    fill(small_disk)
    done = subprocess.run([*cli, "serve", "--db", str(db), "--port", "0",
                           "--frontends", str(frontends)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    assert "cannot start the collector: no space left on device" in done.stderr
    assert "free space on its disk" in done.stderr

