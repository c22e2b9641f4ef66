"""Who may call what: tokens, admin, public reads, the rate limit, the message size limit."""

from __future__ import annotations

import grpc
import pytest
from factories import make_run

from gpubench.v1 import collector_pb2 as pb


@pytest.fixture(params=[1, 2], ids=["1-process", "2-frontends"])
def frontends(request: pytest.FixtureRequest) -> int:
    """Every test here runs against a single-process collector and one with 2 front-ends."""
    return request.param


def code_of(call, *args, **kwargs) -> tuple[grpc.StatusCode, str]:
    with pytest.raises(grpc.RpcError) as caught:
        call(*args, **kwargs)
    return caught.value.code(), caught.value.details()


def bearer(token: str) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {token}"),)


def test_no_token_is_unauthenticated_for_writes_and_reads(collector) -> None:
    stub = collector.collector_stub()
    code, detail = code_of(stub.SubmitRun, pb.SubmitRunRequest(run=make_run()))
    assert code == grpc.StatusCode.UNAUTHENTICATED
    assert "no token" in detail
    code, _ = code_of(stub.Compare, pb.CompareRequest(model="B0"))
    assert code == grpc.StatusCode.UNAUTHENTICATED
    assert collector.store.count() == 0


@pytest.mark.parametrize(
    "metadata",
    [
        bearer("gpb_not-a-real-token"),
        (("authorization", "Basic dXNlcjpwYXNz"),),
        (("authorization", "Bearer "),),
    ],
    ids=["unknown", "not-bearer", "empty"],
)
def test_a_wrong_token_is_unauthenticated(collector, metadata) -> None:
    stub = collector.collector_stub()
    code, detail = code_of(stub.SubmitRun, pb.SubmitRunRequest(run=make_run()), metadata=metadata)
    assert code == grpc.StatusCode.UNAUTHENTICATED
    assert "unknown or revoked" in detail


def test_a_revoked_token_is_refused_at_once(collector) -> None:
    token = collector.make_token("alice")
    stub = collector.collector_stub()
    stub.SubmitRun(pb.SubmitRunRequest(run=make_run()), metadata=bearer(token))
    revoked = collector.admin_stub().RevokeToken(
        pb.RevokeTokenRequest(name="alice"), metadata=collector.metadata()
    )
    assert revoked.token.revoked and revoked.token.name == "alice"
    code, _ = code_of(stub.SubmitRun, pb.SubmitRunRequest(run=make_run()), metadata=bearer(token))
    assert code == grpc.StatusCode.UNAUTHENTICATED
    code, _ = code_of(stub.ListRuns, pb.ListRunsRequest(), metadata=bearer(token))
    assert code == grpc.StatusCode.UNAUTHENTICATED


def test_only_the_submitter_or_an_admin_may_delete(collector) -> None:
    alice, bob = collector.make_token("alice"), collector.make_token("bob")
    stub = collector.collector_stub()
    run = make_run()
    stub.SubmitRun(pb.SubmitRunRequest(run=run), metadata=bearer(alice))
    code, detail = code_of(stub.DeleteRun, pb.DeleteRunRequest(run_id=run.run_id),
                           metadata=bearer(bob))
    assert code == grpc.StatusCode.PERMISSION_DENIED
    assert "submitted by 'alice'" in detail
    assert collector.store.count() == 1
    stub.DeleteRun(pb.DeleteRunRequest(run_id=run.run_id), metadata=collector.metadata())
    assert collector.store.count() == 0


def test_the_admin_service_needs_an_admin_token(collector) -> None:
    plain = collector.make_token("alice")
    admin = collector.admin_stub()
    code, detail = code_of(admin.CreateToken, pb.CreateTokenRequest(name="mallory", admin=True),
                           metadata=bearer(plain))
    assert code == grpc.StatusCode.PERMISSION_DENIED
    assert "not an admin token" in detail
    code, _ = code_of(admin.ListTokens, pb.ListTokensRequest())
    assert code == grpc.StatusCode.UNAUTHENTICATED


def test_tokens_created_over_the_admin_service_work_and_are_listed(collector) -> None:
    admin = collector.admin_stub()
    created = admin.CreateToken(pb.CreateTokenRequest(name="ci-runner"),
                                metadata=collector.metadata())
    assert created.secret.startswith("gpb_") and len(created.secret) > 40
    assert not created.token.admin
    collector.collector_stub().SubmitRun(pb.SubmitRunRequest(run=make_run()),
                                         metadata=bearer(created.secret))
    listed = admin.ListTokens(pb.ListTokensRequest(), metadata=collector.metadata())
    by_name = {t.name: t for t in listed.tokens}
    assert set(by_name) == {"admin", "ci-runner"}
    assert by_name["admin"].admin
    assert by_name["ci-runner"].HasField("last_used_at")
    assert "secret" not in str(listed).lower()

    code, detail = code_of(admin.CreateToken, pb.CreateTokenRequest(name="ci-runner"),
                           metadata=collector.metadata())
    assert code == grpc.StatusCode.ALREADY_EXISTS
    code, detail = code_of(admin.CreateToken, pb.CreateTokenRequest(name="bad name!"),
                           metadata=collector.metadata())
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert "token name" in detail
    code, _ = code_of(admin.RevokeToken, pb.RevokeTokenRequest(name="nobody"),
                      metadata=collector.metadata())
    assert code == grpc.StatusCode.NOT_FOUND


def test_only_the_hash_of_a_secret_is_stored(collector) -> None:
    secret = collector.make_token("alice")
    stored = {t.name: t for t in collector.store.tokens()}["alice"]
    assert secret not in repr(stored)
    assert len(stored.secret_sha256) == 64


def test_public_read_opens_reads_but_not_writes(collector_factory) -> None:
    collector = collector_factory(public_read=True)
    stub = collector.collector_stub()
    run = make_run()
    stub.SubmitRun(pb.SubmitRunRequest(run=run), metadata=collector.metadata())
    assert stub.GetRun(pb.GetRunRequest(run_id=run.run_id)).run == run
    assert len(stub.ListRuns(pb.ListRunsRequest()).runs) == 1
    assert stub.Compare(pb.CompareRequest(model="B0")).groups[0].runs == 1
    board = pb.LeaderboardRequest(model="B0", settings="keras", batch_rule="given")
    assert stub.Leaderboard(board).entries[0].runs == 1
    code, _ = code_of(stub.SubmitRun, pb.SubmitRunRequest(run=make_run()))
    assert code == grpc.StatusCode.UNAUTHENTICATED
    code, _ = code_of(stub.DeleteRun, pb.DeleteRunRequest(run_id=run.run_id))
    assert code == grpc.StatusCode.UNAUTHENTICATED
    # A token that is sent must still be valid.
    code, _ = code_of(stub.ListRuns, pb.ListRunsRequest(), metadata=bearer("gpb_wrong"))
    assert code == grpc.StatusCode.UNAUTHENTICATED


def test_submissions_over_the_rate_limit_are_resource_exhausted(collector_factory) -> None:
    collector = collector_factory(rate_limit=3)  # 3/s, bursts of 3
    alice, bob = collector.make_token("alice"), collector.make_token("bob")
    stub = collector.collector_stub()
    for _ in range(3):
        stub.SubmitRun(pb.SubmitRunRequest(run=make_run()), metadata=bearer(alice))
    code, detail = code_of(stub.SubmitRun, pb.SubmitRunRequest(run=make_run()),
                           metadata=bearer(alice))
    assert code == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "'alice': over the submission rate limit (3/s)" in detail
    # Per token: bob has his own bucket; reads are not limited.
    stub.SubmitRun(pb.SubmitRunRequest(run=make_run()), metadata=bearer(bob))
    stub.ListRuns(pb.ListRunsRequest(), metadata=bearer(alice))
    assert collector.store.count() == 4


def test_a_message_over_the_size_limit_is_refused(collector_factory) -> None:
    collector = collector_factory(max_message_bytes=16 * 1024)
    stub = collector.collector_stub()
    small = make_run()
    stub.SubmitRun(pb.SubmitRunRequest(run=small), metadata=collector.metadata())
    big = make_run()
    big.result.warnings.extend(["w" * 1000] * 30)  # ~30 kB
    code, _ = code_of(stub.SubmitRun, pb.SubmitRunRequest(run=big), metadata=collector.metadata())
    assert code == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert collector.store.count() == 1
