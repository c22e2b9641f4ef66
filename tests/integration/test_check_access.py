"""CheckAccess, the agent's preflight: a valid token is named with what it may do; any
other is UNAUTHENTICATED, on a single process and through front-ends alike."""

from __future__ import annotations

import grpc
import pytest
from factories import make_run

from gpubench.client import Client, TokenAccess
from gpubench.errors import AccessDenied, ExitCode, is_retryable
from gpubench.v1 import collector_pb2 as pb
from gpubench.versions import SCHEMA_VERSION, VERSION


def refused(address: str, token: str) -> AccessDenied:
    with Client(address, token) as client:
        with pytest.raises(AccessDenied) as caught:
            client.check_access()
    error = caught.value
    assert error.status_code == "UNAUTHENTICATED"
    assert error.exit_code == ExitCode.AUTH and not is_retryable(error)
    return error


def test_a_valid_token_is_named_with_what_it_may_do(collector) -> None:
    with Client(collector.address, collector.make_token("lab-a")) as client:
        assert client.check_access() == TokenAccess(
            token_name="lab-a", may_submit=True, admin=False, collector_version=VERSION,
            schema_version=SCHEMA_VERSION,
        )
    with Client(collector.address, collector.admin_token) as client:
        access = client.check_access()
    assert (access.token_name, access.admin, access.may_submit) == ("admin", True, True)


def test_the_raw_call_answers_the_same(collector) -> None:
    reply = collector.collector_stub().CheckAccess(
        pb.CheckAccessRequest(), metadata=collector.metadata(collector.make_token("lab")),
        timeout=10,
    )
    assert (reply.token_name, reply.may_submit, reply.admin, reply.schema_version) == (
        "lab", True, False, SCHEMA_VERSION)


def test_a_wrong_a_missing_and_a_revoked_token_are_refused(collector) -> None:
    assert "token unknown or revoked" in str(refused(collector.address, "gpb_not-a-token"))
    assert "none was given" in str(refused(collector.address, ""))
    secret = collector.make_token("leaving")
    with Client(collector.address, secret) as client:
        assert client.check_access().token_name == "leaving"
    collector.revoke_token("leaving")
    assert "token unknown or revoked" in str(refused(collector.address, secret))


def test_public_reads_do_not_open_it(collector_factory) -> None:
    collector = collector_factory(public_read=True)
    stub = collector.collector_stub()
    assert stub.ListRuns(pb.ListRunsRequest(), timeout=10).runs == []  # reads are open
    with pytest.raises(grpc.RpcError) as caught:
        stub.CheckAccess(pb.CheckAccessRequest(), timeout=10)
    assert caught.value.code() == grpc.StatusCode.UNAUTHENTICATED
    assert "none was given" in str(refused(collector.address, ""))
    refused(collector.address, "gpb_wrong")


def test_it_uses_up_no_submission_of_the_rate_limit(collector_factory) -> None:
    collector = collector_factory(rate_limit=2)  # 2/s, bursts of 2
    secret = collector.make_token("lab")
    with Client(collector.address, secret) as client:
        for _ in range(6):
            assert client.check_access().may_submit
        client.submit_run(make_run())
        client.submit_run(make_run())
    assert collector.store.runs.count() == 2
