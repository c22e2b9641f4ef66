"""Pushing to a real collector on port 0: sent, never duplicated, retried after the
collector comes back, damaged and refused files moved aside."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from gpubench import record
from gpubench.agent.push import (
    FreshConnection,
    RetryPolicy,
    push_pending,
    submit_with_retries,
)
from gpubench.agent.spool import Spool
from gpubench.client import Client
from gpubench.errors import AccessDenied, CollectorUnavailable

FAST = RetryPolicy(attempts=4, first_delay=0.05, max_delay=0.2, total_seconds=5,
                   call_timeout=2)


def stored_ids(collector) -> set[str]:
    with Client(collector.address, collector.admin_token) as client:
        return {stored.run.run_id for stored in client.iter_runs()}


def test_pending_runs_are_sent_once(tmp_path: Path, collector, make_run) -> None:
    spool = Spool(tmp_path)
    runs = [make_run(model=m) for m in ("B0", "B3", "B7")]
    for run in runs:
        spool.write(run)
    token = collector.make_token("lab")
    with Client(collector.address, token, timeout=5) as client:
        report = push_pending(spool, client, FAST)
        assert report.ok and sorted(report.sent) == sorted(r.run_id for r in runs)
        assert spool.counts()["pending"] == 0 and spool.counts()["sent"] == 3
        # An acknowledgement lost on the way: the agent sends the same runs again.
        for entry in spool.entries("sent"):
            entry.path.rename(tmp_path / "pending" / entry.name)
        again = push_pending(spool, client, FAST)
    assert again.ok and len(again.sent) == 3
    assert stored_ids(collector) == {r.run_id for r in runs}  # no duplicate stored


def test_damaged_file_is_moved_aside_and_the_others_still_go(tmp_path: Path, collector,
                                                             make_run) -> None:
    spool = Spool(tmp_path)
    good = make_run()
    spool.write(good)
    broken = spool.write(make_run())
    broken.write_text("{ this is not json")
    with Client(collector.address, collector.make_token("lab")) as client:
        report = push_pending(spool, client, FAST)
    assert report.sent == [good.run_id]
    [(name, reason)] = report.damaged
    assert name == broken.name and str(broken) in reason
    assert (tmp_path / "damaged" / broken.name).exists()
    assert spool.entries("damaged")[0].reason == reason


def test_refused_run_is_moved_aside(tmp_path: Path, collector, make_run) -> None:
    spool = Spool(tmp_path)
    bad = make_run()
    bad.config.batch_per_gpu = 0  # the collector's validation refuses it
    spool.write(bad)
    good = make_run()
    spool.write(good)
    with Client(collector.address, collector.make_token("lab")) as client:
        report = push_pending(spool, client, FAST)
    assert report.sent == [good.run_id]
    [(name, reason)] = report.refused
    assert name == f"{bad.run_id}.json" and "batch_per_gpu" in reason
    assert stored_ids(collector) == {good.run_id}


def test_wrong_token_stops_the_push_and_keeps_the_runs(tmp_path: Path, collector,
                                                       make_run) -> None:
    spool = Spool(tmp_path)
    spool.write(make_run())
    spool.write(make_run())
    with Client(collector.address, "not-a-token") as client:
        report = push_pending(spool, client, FAST)
    assert isinstance(report.stopped, AccessDenied)
    assert report.left == 2 and report.sent == []


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_unreachable_collector_keeps_everything(tmp_path: Path, make_run) -> None:
    spool = Spool(tmp_path)
    spool.write(make_run())
    pauses: list[float] = []
    with Client(f"127.0.0.1:{free_port()}", "t", timeout=1) as client:
        report = push_pending(spool, client, FAST, sleep=pauses.append)
    assert isinstance(report.stopped, CollectorUnavailable)
    assert report.left == 1
    assert len(pauses) == FAST.attempts - 1  # every attempt made, then it gave up


def test_retries_reach_the_collector_once_it_is_back(tmp_path: Path, make_run) -> None:
    from gpubench.collector.auth import TokenBook
    from gpubench.collector.server import create_server
    from gpubench.collector.store import Store

    port = free_port()
    store = Store(tmp_path / "collector.duckdb")
    tokens = TokenBook(store)
    _, secret = tokens.create("lab", admin=False)
    servers = []

    def come_back_while_waiting(seconds: float) -> None:
        # The first pause of the backoff is when the collector returns.
        if not servers:
            server, _ = create_server(store, port=port, tokens=tokens, rate_limit=0)
            server.start()
            servers.append(server)

    run = make_run()
    try:
        def connect() -> Client:
            return Client(f"127.0.0.1:{port}", secret, timeout=2)

        with FreshConnection(connect) as client:
            submit_with_retries(client, run, FAST, sleep=come_back_while_waiting)
        assert servers, "the first call should have failed"
        with Client(f"127.0.0.1:{port}", secret) as client:
            assert client.get_run(run.run_id).run.run_id == run.run_id
    finally:
        for server in servers:
            server.stop(None).wait()
        tokens.flush()
        store.close()


def test_only_retryable_errors_are_retried(tmp_path: Path, collector, make_run) -> None:
    calls: list[float] = []
    with Client(collector.address, "wrong") as client, pytest.raises(AccessDenied):
        submit_with_retries(client, make_run(), FAST, sleep=calls.append)
    assert calls == []


def test_backoff_grows_is_capped_and_jittered() -> None:
    policy = RetryPolicy(first_delay=1.0, max_delay=8.0)
    assert [policy.delay(n, lambda: 1.0) for n in range(1, 6)] == [1, 2, 4, 8, 8]
    assert [policy.delay(n, lambda: 0.0) for n in range(1, 6)] == [0.5, 1, 2, 4, 4]


def test_a_run_that_did_not_finish_is_sent_only_when_asked(tmp_path: Path, collector,
                                                           make_run) -> None:
    """An interrupted or failed run is kept in unfinished/ and never sent by a plain push;
    one an older agent left in pending/ is moved there. A run that ran out of memory is a
    finding (the batch does not fit) and is sent."""
    spool = Spool(tmp_path)
    ok, oom = make_run(), make_run(status="out_of_memory", model="B7")
    interrupted, failed = make_run(status="interrupted"), make_run(status="error")
    for run in (ok, oom, interrupted, failed):
        spool.write(run)
    assert {e.path.stem for e in spool.unfinished()} == {interrupted.run_id, failed.run_id}
    legacy = make_run(status="interrupted")
    (tmp_path / "pending" / f"{legacy.run_id}.json").write_text(record.to_json(legacy))
    with Client(collector.address, collector.make_token("lab")) as client:
        report = push_pending(spool, client, FAST)
        assert sorted(report.sent) == sorted([ok.run_id, oom.run_id])
        assert report.kept == [f"{legacy.run_id}.json"] and report.ok
        assert stored_ids(collector) == {ok.run_id, oom.run_id}
        assert spool.counts()["unfinished"] == 3 and not spool.pending()
        asked = push_pending(spool, client, FAST, include_failed=True)
    assert sorted(asked.sent) == sorted(r.run_id for r in (interrupted, failed, legacy))
    assert not spool.unfinished() and spool.counts()["sent"] == 5
