"""A run the database refuses, on a live collector: later runs are stored and read over
gRPC, and the Admin service lists, retries and drops what quarantine holds."""

from __future__ import annotations

import grpc
import pytest
from factories import make_run

from gpubench.v1 import collector_pb2 as pb


@pytest.fixture(params=[1, 2], ids=["1-process", "2-frontends"])
def frontends(request: pytest.FixtureRequest) -> int:
    """Every test here runs against a single-process collector and one with 2 front-ends."""
    return request.param


def poisoned_run():
    """What an older collector's validation let in: 3e9 training images, past the runs
    table's INTEGER column (today's validation refuses it, so it goes in through the
    store, as the journal of such a collector would hand it over)."""
    return make_run(config__train_images=3_000_000_000, config__image_count=0)


def code_of(call, *args, **kwargs) -> tuple[grpc.StatusCode, str]:
    with pytest.raises(grpc.RpcError) as caught:
        call(*args, **kwargs)
    return caught.value.code(), caught.value.details()


def test_a_refused_run_does_not_stop_later_runs_being_stored_and_read(collector) -> None:
    poisoned = poisoned_run()
    collector.store.submit(poisoned, "old-agent")  # acknowledged from the journal
    stub, md = collector.collector_stub(), collector.metadata()
    later = [make_run(label=str(i)) for i in range(5)]
    for run in later:
        stub.SubmitRun(pb.SubmitRunRequest(run=run), metadata=md, timeout=10)
    for run in later:  # every read sees the runs acknowledged before it: no UNKNOWN, no wedge
        assert stub.GetRun(pb.GetRunRequest(run_id=run.run_id), metadata=md,
                           timeout=10).run == run
    listed = stub.ListRuns(pb.ListRunsRequest(page_size=100), metadata=md, timeout=10)
    assert {r.run.run_id for r in listed.runs} == {r.run_id for r in later}
    collector.store.catch_up()  # as the flusher does within a second: around the refused run
    code, detail = code_of(stub.GetRun, pb.GetRunRequest(run_id=poisoned.run_id), metadata=md,
                           timeout=10)
    assert code == grpc.StatusCode.NOT_FOUND and "held in quarantine" in detail
    assert "train_images 3000000000 does not fit INTEGER" in detail


def test_the_admin_service_lists_retries_and_drops_the_quarantine(collector) -> None:
    poisoned = poisoned_run()
    ack = collector.store.submit(poisoned, "old-agent")
    collector.store.catch_up()  # stored around it: into quarantine
    admin, md = collector.admin_stub(), collector.metadata()

    [held] = admin.ListQuarantine(pb.ListQuarantineRequest(), metadata=md, timeout=10).runs
    assert (held.run_id, held.submitter, held.content_sha256) == (
        poisoned.run_id, "old-agent", ack.content_sha256)
    assert held.received_at.ToDatetime() == ack.received_at
    assert "does not fit INTEGER" in held.reason

    retried = admin.RetryQuarantine(pb.RetryQuarantineRequest(), metadata=md, timeout=10)
    assert list(retried.stored) == [] and [r.run_id for r in retried.refused] == [
        poisoned.run_id]

    alice = collector.make_token("alice")
    code, _ = code_of(admin.DropQuarantine, pb.DropQuarantineRequest(run_ids=[poisoned.run_id]),
                      metadata=collector.metadata(alice), timeout=10)
    assert code == grpc.StatusCode.PERMISSION_DENIED
    code, detail = code_of(admin.DropQuarantine, pb.DropQuarantineRequest(), metadata=md,
                           timeout=10)
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "run_ids" in detail
    unknown = "00000000-0000-4000-8000-000000000000"
    code, detail = code_of(admin.DropQuarantine, pb.DropQuarantineRequest(run_ids=[unknown]),
                           metadata=md, timeout=10)
    assert code == grpc.StatusCode.NOT_FOUND and unknown in detail

    dropped = admin.DropQuarantine(pb.DropQuarantineRequest(run_ids=[poisoned.run_id]),
                                   metadata=md, timeout=10).dropped
    assert [r.run_id for r in dropped] == [poisoned.run_id]
    assert not admin.ListQuarantine(pb.ListQuarantineRequest(), metadata=md, timeout=10).runs
