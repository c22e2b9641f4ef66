"""A collector with front-end processes: one state behind every front-end.

The kernel spreads connections over the front-ends (SO_REUSEPORT); these tests
find out which front-end process holds each connection (/proc) so that they can
use two different ones on purpose.
"""

from __future__ import annotations

import os
import re
import signal
import sys
import time
from pathlib import Path

import grpc
import pytest
from factories import make_run

from gpubench.v1 import collector_pb2 as pb
from gpubench.v1 import collector_pb2_grpc

pytestmark = pytest.mark.skipif(not Path("/proc/net/tcp").exists(), reason="needs Linux /proc")


def _established_inodes(port: int) -> set[str]:
    """Socket inodes of established TCP connections whose local port is `port`."""
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        if not os.path.exists(table):
            continue
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if int(fields[1].rsplit(":", 1)[1], 16) == port and fields[3] == "01":
                found.add(fields[9])
    return found


def _connections_of(pid: int, inodes: set[str]) -> int:
    held = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            held.add(target[8:-1])
    return len(held & inodes)


def channels_to_each_frontend(collector) -> list[grpc.Channel]:
    """A channel per front-end process, each connected to that one."""
    pids = collector.frontends.pids
    found: dict[int, grpc.Channel] = {}
    for _ in range(64):
        before = {pid: _connections_of(pid, _established_inodes(collector.port)) for pid in pids}
        # A subchannel pool of its own: otherwise channels to one address share a connection.
        channel = grpc.insecure_channel(collector.address,
                                        options=[("grpc.use_local_subchannel_pool", 1)])
        collector._channels.append(channel)  # closed with the collector
        stub = collector_pb2_grpc.CollectorStub(channel)
        stub.ListRuns(pb.ListRunsRequest(), metadata=collector.metadata(), timeout=10)
        inodes = _established_inodes(collector.port)
        landed = [pid for pid in pids if _connections_of(pid, inodes) > before[pid]]
        if len(landed) == 1:
            found.setdefault(landed[0], channel)
        if len(found) == len(pids):
            return [found[pid] for pid in pids]
    raise AssertionError(f"connections never reached every front-end: {sorted(found)}")


def stubs_on_each_frontend(collector) -> list[collector_pb2_grpc.CollectorStub]:
    """A Collector stub per front-end process, each on a connection to that one."""
    return [collector_pb2_grpc.CollectorStub(c) for c in channels_to_each_frontend(collector)]


def kill_frontend_and_watch(collector, index: int) -> None:
    """SIGKILL front-end `index`, then watch (as serve does) until it is replaced and
    serves."""
    pool = collector.frontends
    victim = pool.pids[index]
    os.kill(victim, signal.SIGKILL)
    deadline = time.monotonic() + 60
    while pool.pids[index] == victim or len(pool.serving_pids) < len(pool.pids):
        assert time.monotonic() < deadline, "the front-end was not restarted"
        pool.watch()
        time.sleep(0.05)


def bearer(token: str) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {token}"),)


def code_of(call, *args, **kwargs) -> tuple[grpc.StatusCode, str]:
    with pytest.raises(grpc.RpcError) as caught:
        call(*args, **kwargs)
    return caught.value.code(), caught.value.details()


def test_runs_submitted_through_different_frontends_are_compared_together(
    collector_factory,
) -> None:
    collector = collector_factory(frontends=2)
    first, second = stubs_on_each_frontend(collector)
    md = collector.metadata()
    for seconds in (16.0, 17.0, 18.0):
        first.SubmitRun(pb.SubmitRunRequest(run=make_run(gpu_name="Tesla T4",
                                                         epoch2_seconds=seconds)), metadata=md)
    for seconds in (5.0, 5.2):
        second.SubmitRun(pb.SubmitRunRequest(run=make_run(gpu_name="NVIDIA H200",
                                                          epoch2_seconds=seconds)), metadata=md)
    # An outlier through the second front-end, in the first one's group: rescored at once.
    second.SubmitRun(pb.SubmitRunRequest(run=make_run(gpu_name="Tesla T4", epoch2_seconds=90.0)),
                     metadata=md)
    for stub in (first, second):
        reply = stub.Compare(pb.CompareRequest(model="B0"), metadata=md)
        by_gpu = {g.gpu_name: g for g in reply.groups}
        assert (by_gpu["Tesla T4"].runs, by_gpu["NVIDIA H200"].runs) == (3, 2)
        assert by_gpu["Tesla T4"].outliers_excluded == 1
        assert by_gpu["Tesla T4"].epoch2_median_seconds == pytest.approx(17.0)
        assert by_gpu["NVIDIA H200"].speedup == pytest.approx(17.0 / 5.1)
    assert collector.store.count() == 6


def test_a_resubmission_through_another_frontend_gets_the_first_acknowledgement(
    collector_factory,
) -> None:
    collector = collector_factory(frontends=2)
    first, second = stubs_on_each_frontend(collector)
    run = make_run()
    ack = first.SubmitRun(pb.SubmitRunRequest(run=run), metadata=collector.metadata())
    assert second.SubmitRun(pb.SubmitRunRequest(run=run), metadata=collector.metadata()) == ack
    changed = make_run(run_id=run.run_id, epoch2_seconds=3.0)
    code, detail = code_of(second.SubmitRun, pb.SubmitRunRequest(run=changed),
                           metadata=collector.metadata())
    assert code == grpc.StatusCode.ALREADY_EXISTS and run.run_id in detail
    assert collector.store.count() == 1


def test_a_token_revoked_through_one_frontend_is_refused_by_the_other_at_once(
    collector_factory,
) -> None:
    collector = collector_factory(frontends=2)
    one, other = channels_to_each_frontend(collector)
    first, second = map(collector_pb2_grpc.CollectorStub, (one, other))
    alice = collector.make_token("alice")
    second.SubmitRun(pb.SubmitRunRequest(run=make_run()), metadata=bearer(alice))
    admin = collector_pb2_grpc.AdminStub(one)
    admin.RevokeToken(pb.RevokeTokenRequest(name="alice"), metadata=collector.metadata())
    for stub in (first, second):
        code, detail = code_of(stub.SubmitRun, pb.SubmitRunRequest(run=make_run()),
                               metadata=bearer(alice))
        assert (code, detail) == (grpc.StatusCode.UNAUTHENTICATED, "token unknown or revoked")


def test_the_rate_limit_counts_a_tokens_submissions_through_every_frontend(
    collector_factory,
) -> None:
    collector = collector_factory(frontends=2, rate_limit=3)  # 3/s, bursts of 3
    first, second = stubs_on_each_frontend(collector)
    alice = collector.make_token("alice")
    for stub in (first, second, first):
        stub.SubmitRun(pb.SubmitRunRequest(run=make_run()), metadata=bearer(alice))
    code, detail = code_of(second.SubmitRun, pb.SubmitRunRequest(run=make_run()),
                           metadata=bearer(alice))
    assert code == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "'alice': over the submission rate limit (3/s)" in detail
    assert collector.store.count() == 3


def test_a_frontend_that_dies_is_restarted_and_serves_again(collector_factory) -> None:
    collector = collector_factory(frontends=2)
    kill_frontend_and_watch(collector, 0)
    for stub in stubs_on_each_frontend(collector):  # both answer, the new one included
        stub.SubmitRun(pb.SubmitRunRequest(run=make_run()), metadata=collector.metadata())
    assert collector.store.count() == 2


def test_a_frontend_that_keeps_dying_is_restarted_with_backoff_while_the_other_serves(
    collector_factory, caplog: pytest.LogCaptureFixture
) -> None:
    collector = collector_factory(frontends=2, restart_backoff_s=(0.05, 0.2))
    other = stubs_on_each_frontend(collector)[1]
    for _ in range(6):  # more than a few deaths a minute used to stop the whole collector
        kill_frontend_and_watch(collector, 0)
        other.SubmitRun(pb.SubmitRunRequest(run=make_run()), metadata=collector.metadata(),
                        timeout=10)
    for stub in stubs_on_each_frontend(collector):  # both answer, the new one included
        stub.SubmitRun(pb.SubmitRunRequest(run=make_run()), metadata=collector.metadata())
    assert collector.store.count() == 8
    delays = [float(m.group(1)) for m in (
        re.search(r"front-end 0 .* restarting it in ([0-9.e-]+) s", r.getMessage())
        for r in caplog.records) if m]
    assert delays == [0, 0.05, 0.1, 0.2, 0.2, 0.2]


def test_when_no_frontend_serves_one_starts_at_once_whatever_the_backoff(
    collector_factory, caplog: pytest.LogCaptureFixture
) -> None:
    """Each front-end's own backoff once had both wait at once, nothing serving."""
    collector = collector_factory(frontends=2, restart_backoff_s=(60.0, 60.0))
    pool = collector.frontends
    for _ in range(2):  # the second time round, a backoff of 60 s is due for each
        victims = list(pool.pids)
        for pid in victims:
            os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 60
        pool.watch()
        while not set(pool.serving_pids) - set(victims):
            assert time.monotonic() < deadline, "no front-end serves again"
            time.sleep(0.05)
            pool.watch()
        stub = collector_pb2_grpc.CollectorStub(collector.channel())
        stub.SubmitRun(pb.SubmitRunRequest(run=make_run()), metadata=collector.metadata(),
                       timeout=30)
    messages = [r.getMessage() for r in caplog.records if "exited with" in r.getMessage()]
    # The log says whether another front-end serves meanwhile, truly.
    assert all(("no other front-end serves" in m) != ("serve meanwhile" in m) for m in messages)
    assert any("no other front-end serves: restarting one now" in m for m in messages)
    assert collector.store.count() == 2


def test_frontends_that_cannot_start_stop_the_collector_saying_so(
    collector_factory, monkeypatch: pytest.MonkeyPatch
) -> None:
    from gpubench.collector.owner import Frontends
    from gpubench.errors import GpubenchError

    collector = collector_factory(frontends=2, restart_backoff_s=(0.05, 0.1), give_up_after=3)
    # From now on a front-end exits before it listens (as with a TLS file gone).
    monkeypatch.setattr(Frontends, "command", (sys.executable, "-c", "raise SystemExit(3)"))
    os.kill(collector.frontends.pids[0], signal.SIGKILL)
    deadline = time.monotonic() + 120
    with pytest.raises(GpubenchError, match=r"front-ends failed to start 3 times in a row "
                       r"\(last: front-end 0: .*exit code 3.*\); giving up: stopping"):
        while time.monotonic() < deadline:
            collector.frontends.watch()
            time.sleep(0.05)


def test_a_collector_without_deaths_for_a_while_starts_its_count_again(
    collector_factory, caplog: pytest.LogCaptureFixture
) -> None:
    collector = collector_factory(frontends=2, restart_backoff_s=(0.05, 0.1), stable_s=0.5)
    for _ in range(3):
        kill_frontend_and_watch(collector, 0)
        deadline = time.monotonic() + 0.6
        while time.monotonic() < deadline:  # longer than stable_s without a death
            collector.frontends.watch()
            time.sleep(0.05)
    assert sum("(1 front-end exit(s) in a row)" in r.getMessage() for r in caplog.records) == 3


def _unix_sockets_of(pid: int) -> int:
    """How many Unix-domain sockets `pid` holds, but those of its door's links to its
    gRPC server (collector.door): a front-end's links to its owner, and wake-ups."""
    unix = {fields[6] for fields in (line.split() for line in
                                     Path("/proc/net/unix").read_text().splitlines()[1:])
            if len(fields) > 6 and not (len(fields) > 7 and "gpubench-door-" in fields[7])}
    held = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:  # closed since the listing
            continue
        if target.startswith("socket:["):
            held.add(target[8:-1])
    return len(held & unix)


def test_more_concurrent_calls_than_links_to_the_owner_all_get_answers(
    collector_factory,
) -> None:
    """A front-end opens at most MAX_LINKS connections to the owner; the rest wait."""
    from gpubench.collector.frontend import MAX_LINKS

    collector = collector_factory(frontends=2, rate_limit=1e6)
    first, _ = stubs_on_each_frontend(collector)
    pid = collector.frontends.pids[0]
    calls = MAX_LINKS + 36
    runs = [make_run(label=str(i)) for i in range(calls)]
    with collector.store.backlog.lock:  # the owner's writer waits: every call stays in flight
        pending = [first.SubmitRun.future(pb.SubmitRunRequest(run=run),
                                          metadata=collector.metadata(), timeout=60)
                   for run in runs]
        deadline = time.monotonic() + 30
        while _unix_sockets_of(pid) < MAX_LINKS and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.5)  # time for any link beyond the limit to open
        held = _unix_sockets_of(pid)
    acks = [call.result() for call in pending]
    # Its links, its control link and the socket pairs asyncio and gRPC wake loops with
    # (69 in all here); without the limit each call in flight would hold a link.
    assert MAX_LINKS <= held <= MAX_LINKS + 8
    assert sorted(a.run_id for a in acks) == sorted(r.run_id for r in runs)
    assert collector.store.count() == calls
