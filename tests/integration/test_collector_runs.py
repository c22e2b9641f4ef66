"""Submitting, reading, listing and deleting runs on a real collector over gRPC."""

from __future__ import annotations

import threading
from datetime import datetime, timedelta, timezone

import grpc
import pytest
from factories import make_run
from google.protobuf.timestamp_pb2 import Timestamp

from gpubench import record
from gpubench.v1 import collector_pb2 as pb


def submit(collector, run, token=None):
    return collector.collector_stub().SubmitRun(
        pb.SubmitRunRequest(run=run), metadata=collector.metadata(token), timeout=10
    )


def test_submit_then_get_returns_the_run_with_what_the_collector_adds(collector) -> None:
    token = collector.make_token("lab-a")
    run = make_run(gpu_name="NVIDIA H200", model="B3", label="lab workstation")
    before = datetime.now(timezone.utc)
    ack = submit(collector, run, token)
    assert ack.run_id == run.run_id
    assert ack.content_sha256 == record.content_sha256(run)
    received = ack.received_at.ToDatetime(tzinfo=timezone.utc)
    assert before - timedelta(seconds=1) <= received <= datetime.now(timezone.utc)

    stored = collector.collector_stub().GetRun(
        pb.GetRunRequest(run_id=run.run_id), metadata=collector.metadata(token)
    )
    assert stored.run == run
    assert stored.submitter == "lab-a"
    assert stored.received_at == ack.received_at
    assert stored.content_sha256 == ack.content_sha256
    assert not stored.outlier


def test_resubmitting_the_same_run_returns_the_first_acknowledgement(collector) -> None:
    run = make_run()
    first = submit(collector, run)
    again = submit(collector, run)
    assert again == first
    assert collector.store.runs.count() == 1


def test_the_same_run_id_with_other_content_is_already_exists(collector) -> None:
    run = make_run(epoch2_seconds=17.0)
    submit(collector, run)
    changed = make_run(run_id=run.run_id, epoch2_seconds=16.0)
    with pytest.raises(grpc.RpcError) as caught:
        submit(collector, changed)
    assert caught.value.code() == grpc.StatusCode.ALREADY_EXISTS
    assert run.run_id in caught.value.details()
    stored = collector.collector_stub().GetRun(
        pb.GetRunRequest(run_id=run.run_id), metadata=collector.metadata()
    )
    assert stored.run.result.epoch2_seconds == 17.0


def test_an_invalid_run_is_invalid_argument_naming_the_field(collector) -> None:
    run = make_run()
    run.config.batch_per_gpu = 0
    with pytest.raises(grpc.RpcError) as caught:
        submit(collector, run)
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "run.config.batch_per_gpu: must be >= 1, got 0" in caught.value.details()
    assert collector.store.runs.count() == 0


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ({"config__train_images": 3_000_000_000, "config__image_count": 0},
         "run.config.train_images: must be <= 100000000, got 3000000000"),
        ({"config__batch_per_gpu": 3_000_000_000, "config__global_batch": 3_000_000_000},
         "run.config.batch_per_gpu: must be <= 1048576, got 3000000000"),
        ({"config__batch_per_gpu": 1_500_000_000, "config__global_batch": 3_000_000_000,
          "gpu_count": 2}, "run.config.global_batch: must be <= 67108864, got 3000000000"),
    ],
    ids=["train_images", "batch_per_gpu", "global_batch"],
)
def test_counts_past_a_32_bit_column_are_refused_before_the_acknowledgement(
    collector, fields, named
) -> None:
    """3e9 training images or a batch of 3e9 would fit the record but not the runs
    table: refused at once, and the runs after them are stored and read as usual."""
    with pytest.raises(grpc.RpcError) as caught:
        submit(collector, make_run(**fields))
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert named in caught.value.details()
    later = make_run()
    submit(collector, later)
    assert collector.collector_stub().GetRun(
        pb.GetRunRequest(run_id=later.run_id), metadata=collector.metadata(), timeout=10
    ).run == later
    assert collector.store.runs.count() == 1


def test_get_of_an_unknown_run_is_not_found(collector) -> None:
    with pytest.raises(grpc.RpcError) as caught:
        collector.collector_stub().GetRun(
            pb.GetRunRequest(run_id="00000000-0000-4000-8000-000000000000"),
            metadata=collector.metadata(),
        )
    assert caught.value.code() == grpc.StatusCode.NOT_FOUND


def test_list_filters_and_pages_newest_first(collector) -> None:
    alice, bob = collector.make_token("alice"), collector.make_token("bob")
    start = datetime(2026, 3, 1, tzinfo=timezone.utc)
    runs = []
    for i in range(7):
        gpu = "Tesla T4" if i % 2 else "NVIDIA H200"
        run = make_run(gpu_name=gpu, created_at=start + timedelta(hours=i),
                       backend="torch" if i == 6 else "tensorflow")
        submit(collector, run, alice if i < 5 else bob)
        runs.append(run)
    stub = collector.collector_stub()
    md = collector.metadata()

    ids: list[str] = []
    token = ""
    while True:
        page = stub.ListRuns(pb.ListRunsRequest(page_size=3, page_token=token), metadata=md)
        ids += [r.run.run_id for r in page.runs]
        assert len(page.runs) <= 3
        token = page.next_page_token
        if not token:
            break
    assert ids == [r.run_id for r in reversed(runs)]

    def listed(**filters) -> list[str]:
        reply = stub.ListRuns(pb.ListRunsRequest(**filters), metadata=md)
        return [r.run.run_id for r in reply.runs]

    assert listed(gpu_name="t4") == [runs[5].run_id, runs[3].run_id, runs[1].run_id]
    assert listed(submitter="bob") == [runs[6].run_id, runs[5].run_id]
    assert listed(backend="torch") == [runs[6].run_id]
    assert listed(model="B7") == []
    since, until = pb.ListRunsRequest().since, pb.ListRunsRequest().until
    since.FromDatetime(start + timedelta(hours=2))
    until.FromDatetime(start + timedelta(hours=4))
    assert listed(since=since, until=until) == [runs[3].run_id, runs[2].run_id]
    assert listed(gpu_count=2) == []


def test_list_refuses_oversized_pages_and_forged_tokens(collector) -> None:
    stub = collector.collector_stub()
    for request, words in (
        (pb.ListRunsRequest(page_size=5000), "page_size: must be <= 1000"),
        (pb.ListRunsRequest(page_token="not-a-token"), "page_token"),
    ):
        with pytest.raises(grpc.RpcError) as caught:
            stub.ListRuns(request, metadata=collector.metadata())
        assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert words in caught.value.details()


@pytest.mark.parametrize("field", ["since", "until"])
@pytest.mark.parametrize(
    "stamp",
    [Timestamp(seconds=-(10**15)), Timestamp(seconds=10**15), Timestamp(seconds=0, nanos=-5)],
    ids=["before-year-1", "after-year-9999", "negative-nanos"],
)
def test_list_refuses_times_out_of_range_naming_the_field(collector, field, stamp) -> None:
    stub = collector.collector_stub()
    with pytest.raises(grpc.RpcError) as caught:
        stub.ListRuns(pb.ListRunsRequest(**{field: stamp}), metadata=collector.metadata(),
                      timeout=10)
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT, caught.value.details()
    assert caught.value.details().startswith(f"{field}: ")


def test_delete_by_its_submitter(collector) -> None:
    token = collector.make_token("alice")
    run = make_run()
    submit(collector, run, token)
    stub = collector.collector_stub()
    request = pb.DeleteRunRequest(run_id=run.run_id)
    reply = stub.DeleteRun(request, metadata=collector.metadata(token))
    assert reply.run_id == run.run_id
    assert collector.store.runs.count() == 0
    with pytest.raises(grpc.RpcError) as caught:
        stub.DeleteRun(pb.DeleteRunRequest(run_id=run.run_id), metadata=collector.metadata(token))
    assert caught.value.code() == grpc.StatusCode.NOT_FOUND


def test_many_threads_submitting_at_once_each_get_their_own_acknowledgement(collector) -> None:
    tokens = [collector.make_token(f"agent-{i}") for i in range(8)]
    runs = [[make_run(gpu_name=g) for g in ("Tesla T4", "NVIDIA H200") * 10] for _ in tokens]
    acks: dict[str, pb.SubmitRunResponse] = {}
    errors: list[BaseException] = []
    lock = threading.Lock()

    def agent(token: str, mine: list) -> None:
        stub = collector.collector_stub()
        try:
            for run in mine:
                ack = stub.SubmitRun(pb.SubmitRunRequest(run=run),
                                     metadata=collector.metadata(token), timeout=30)
                with lock:
                    acks[run.run_id] = ack
            # Everyone also resubmits one run concurrently: still one copy.
            stub.SubmitRun(pb.SubmitRunRequest(run=runs[0][0]),
                           metadata=collector.metadata(token), timeout=30)
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=agent, args=pair) for pair in zip(tokens, runs, strict=True)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert len(acks) == 160
    assert all(ack.run_id == run_id for run_id, ack in acks.items())
    assert collector.store.runs.count() == 160
    listed = collector.collector_stub().ListRuns(
        pb.ListRunsRequest(submitter="agent-3", page_size=1000), metadata=collector.metadata()
    )
    assert {r.run.run_id for r in listed.runs} == {r.run_id for r in runs[3]}


def test_a_bug_is_internal_with_its_traceback_in_the_log_and_not_retryable(
    collector, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from gpubench.client import Client
    from gpubench.collector import compare

    def broken(*args, **kwargs):
        raise RuntimeError("a bug in the comparison")

    submit(collector, make_run())
    monkeypatch.setattr(compare, "compare", broken)
    with pytest.raises(grpc.RpcError) as caught:
        collector.collector_stub().Compare(pb.CompareRequest(model="B0"),
                                           metadata=collector.metadata(), timeout=10)
    assert caught.value.code() == grpc.StatusCode.INTERNAL, caught.value.details()
    assert "RuntimeError" in caught.value.details()
    logged = [r for r in caplog.records if r.exc_info and "a bug in the comparison"
              in str(r.exc_info[1])]
    assert logged and logged[0].levelname == "ERROR"
    with Client(collector.address, token=collector.admin_token) as client:
        with pytest.raises(Exception) as failed:
            client.compare("B0")
    assert not getattr(failed.value, "retryable", True)


def test_a_collector_shutting_down_is_unavailable(collector) -> None:
    run = make_run()
    submit(collector, run)
    collector.store.close()  # as a stop does, after its grace period
    for call, request in (
        (collector.collector_stub().SubmitRun, pb.SubmitRunRequest(run=make_run())),
        (collector.collector_stub().GetRun, pb.GetRunRequest(run_id=run.run_id)),
    ):
        with pytest.raises(grpc.RpcError) as caught:
            call(request, metadata=collector.metadata(), timeout=10)
        assert caught.value.code() == grpc.StatusCode.UNAVAILABLE, caught.value.details()
        assert "shutting down" in caught.value.details()
