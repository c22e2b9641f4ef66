"""A run's size on the wire: a budget per run, no unknown fields, ListRuns pages bounded
in bytes as well as in runs (a real collector on port 0 over a real DuckDB file)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import grpc
import pandas as pd
import pytest
from click.testing import CliRunner
from factories import make_run

from gpubench.cli import cli
from gpubench.client import Client
from gpubench.v1 import collector_pb2 as pb
from gpubench.v1 import run_pb2

# gRPC's default receive limit, which every client has unless it raises it.
DEFAULT_RECEIVE_BYTES = 4 * 1024 * 1024


def padded_run(epochs: int) -> run_pb2.Run:
    """A valid run made large the way the validator allows: `epochs` epochs, and every
    warning and batch trial the record may hold at their longest."""
    run = make_run()
    run.result.warnings.extend(["w" * 1000] * 64)
    for i in range(64):
        trial = run.result.batch_trials.add(batch=i + 1, kind="probe")
        trial.message = "m" * 1000
    last = run.result.epochs[-1]
    run.config.epochs = epochs
    for number in range(len(run.result.epochs) + 1, epochs + 1):
        epoch = run.result.epochs.add()
        epoch.CopyFrom(last)
        epoch.number = number
    return run


def _unknown_field(number: int, payload: bytes) -> bytes:
    """A length-delimited field `number` no message of gpubench.v1 has, as wire bytes."""
    def varint(value: int) -> bytes:
        out = bytearray()
        while True:
            byte, value = value & 0x7F, value >> 7
            out.append(byte | (0x80 if value else 0))
            if not value:
                return bytes(out)
    return varint(number << 3 | 2) + varint(len(payload)) + payload


def test_a_run_over_the_size_budget_is_refused(collector_factory) -> None:
    collector = collector_factory()
    run = padded_run(1000)  # every list at its longest: about 265 KB, no real run's size
    assert run.ByteSize() > 260_000
    stub = collector.collector_stub()
    with pytest.raises(grpc.RpcError) as refused:
        stub.SubmitRun(pb.SubmitRunRequest(run=run), metadata=collector.metadata())
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "run: " in refused.value.details() and "bytes" in refused.value.details()
    # The same run with fewer epochs is within the budget and stored.
    del run.result.epochs[500:]
    run.config.epochs = 500
    stub.SubmitRun(pb.SubmitRunRequest(run=run), metadata=collector.metadata())
    assert collector.store.runs.count() == 1


def test_unknown_fields_are_refused_naming_where(collector_factory) -> None:
    collector = collector_factory()
    stub = collector.collector_stub()
    top = make_run()
    top.MergeFromString(_unknown_field(999, b"x" * 100))
    nested = make_run()
    nested.config.MergeFromString(_unknown_field(77, b"hidden"))
    huge = make_run()
    huge.MergeFromString(_unknown_field(999, b"x" * 900_000))  # 900 KB the schema lacks
    for run, where in ((top, "run: unknown field 999"), (nested, "run.config: unknown field 77"),
                       (huge, "run: 900,9")):
        with pytest.raises(grpc.RpcError) as refused:
            stub.SubmitRun(pb.SubmitRunRequest(run=run), metadata=collector.metadata())
        assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert where in refused.value.details()
    assert collector.store.runs.count() == 0


def test_list_pages_are_bounded_in_bytes_and_clients_follow_them(
    collector: Any, tmp_path: Path
) -> None:
    runs = [padded_run(500) for _ in range(30)]  # about 200 KB each, 6 MB in all
    with Client(collector.address, collector.admin_token) as client:
        for run in runs:
            client.submit_run(run)
    # A client with gRPC's default receive limit asks for every run in one page.
    stub = collector.collector_stub()
    request = pb.ListRunsRequest(page_size=1000)
    seen: list[str] = []
    pages = 0
    while True:
        page = stub.ListRuns(request, metadata=collector.metadata())
        pages += 1
        assert page.runs and page.ByteSize() <= DEFAULT_RECEIVE_BYTES
        seen += [stored.run.run_id for stored in page.runs]
        if not page.next_page_token:
            break
        request.page_token = page.next_page_token
    assert pages > 1
    assert sorted(seen) == sorted(r.run_id for r in runs)  # each once, none missing
    with Client(collector.address, collector.admin_token) as client:
        assert len(list(client.iter_runs(page_size=1000))) == 30
    out = tmp_path / "runs.csv"
    result = CliRunner().invoke(
        cli, ["--collector", collector.address, "--token", collector.admin_token,
              "export", "--format", "csv", "--out", str(out)], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert len(pd.read_csv(out)) == 30
