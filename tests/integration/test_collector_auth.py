"""Who may call what: tokens, admin, public reads, the rate limit, the message size limit."""

from __future__ import annotations

import contextlib
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import grpc
import pytest
from factories import make_run
from source_address import Relay
from waiting import until

from gpubench.v1 import collector_pb2 as pb
from gpubench.v1 import collector_pb2_grpc as pb_grpc


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
    assert collector.store.runs.count() == 0


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
    assert collector.store.runs.count() == 1
    stub.DeleteRun(pb.DeleteRunRequest(run_id=run.run_id), metadata=collector.metadata())
    assert collector.store.runs.count() == 0


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
    stored = {t.name: t for t in collector.store.tokens.all()}["alice"]
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
    assert collector.store.runs.count() == 4


def test_a_message_over_the_size_limit_is_refused(collector_factory) -> None:
    collector = collector_factory(max_message_bytes=16 * 1024)
    stub = collector.collector_stub()
    small = make_run()
    stub.SubmitRun(pb.SubmitRunRequest(run=small), metadata=collector.metadata())
    big = make_run()
    big.result.warnings.extend(["w" * 1000] * 30)  # ~30 kB
    code, _ = code_of(stub.SubmitRun, pb.SubmitRunRequest(run=big), metadata=collector.metadata())
    assert code == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert collector.store.runs.count() == 1


# Each trial a fresh token, its first uses (cache misses) racing its revocation.
REVOKE_TRIALS = 150
REVOKE_RACERS = 6


def test_a_revoke_racing_the_first_uses_of_a_token_always_wins(collector) -> None:
    stub, admin = collector.collector_stub(), collector.admin_stub()
    still_valid = []
    with ThreadPoolExecutor(REVOKE_RACERS) as pool:
        for trial in range(REVOKE_TRIALS):
            name = f"racer-{trial}"
            token = collector.make_token(name)
            start = threading.Barrier(REVOKE_RACERS + 1)

            def use(token: str = token, start: threading.Barrier = start) -> None:
                start.wait()
                with contextlib.suppress(grpc.RpcError):  # before or after the revoke
                    stub.CheckAccess(pb.CheckAccessRequest(), metadata=bearer(token), timeout=10)

            racing = [pool.submit(use) for _ in range(REVOKE_RACERS)]
            start.wait()
            admin.RevokeToken(pb.RevokeTokenRequest(name=name), metadata=collector.metadata())
            for future in racing:
                future.result()
            # The revoke has returned: from now on the token must be refused, everywhere.
            try:
                stub.CheckAccess(pb.CheckAccessRequest(), metadata=bearer(token), timeout=10)
            except grpc.RpcError as refused:
                assert refused.code() == grpc.StatusCode.UNAUTHENTICATED
            else:
                still_valid.append(name)
    assert not still_valid, f"revoked tokens still accepted: {still_valid}"


# Not a protobuf message: 0xff starts a field of wire type 7, which does not exist.
GARBAGE = b"\xff" * 4 + bytes(range(256)) * 64


def raw_call(collector, method: str):
    """`method` called with raw bytes (identity serialisers), as any program could."""
    return collector.channel().unary_unary(
        method, request_serializer=None, response_deserializer=None
    )


@pytest.mark.parametrize("method", ["SubmitRun", "ListRuns", "CheckAccess"])
def test_garbage_without_a_token_is_refused_before_it_is_parsed(collector, method) -> None:
    call = raw_call(collector, f"/gpubench.v1.Collector/{method}")
    code, detail = code_of(call, GARBAGE, timeout=10)
    assert code == grpc.StatusCode.UNAUTHENTICATED, detail
    assert "no token" in detail
    code, detail = code_of(call, GARBAGE, metadata=bearer("gpb_not-a-real-token"), timeout=10)
    assert code == grpc.StatusCode.UNAUTHENTICATED, detail


@pytest.mark.parametrize("method", ["SubmitRun", "ListRuns", "CheckAccess"])
def test_garbage_with_a_valid_token_is_invalid_argument(collector, method) -> None:
    call = raw_call(collector, f"/gpubench.v1.Collector/{method}")
    code, detail = code_of(call, GARBAGE, metadata=collector.metadata(), timeout=10)
    assert code == grpc.StatusCode.INVALID_ARGUMENT, detail
    assert "request" in detail and "not a valid" in detail
    assert collector.store.runs.count() == 0


def test_a_guesser_never_shuts_out_valid_calls_from_its_address(collector_factory) -> None:
    """Valid tokens, of an admin too, and public reads are answered while a guesser of
    the same address is refused past its allowance."""
    collector = collector_factory(auth_failures_per_minute=3, public_read=True)
    stub = collector.collector_stub()
    alice = collector.make_token("alice")
    for _ in range(3):  # the allowance: checked and answered
        code, _ = code_of(stub.CheckAccess, pb.CheckAccessRequest(),
                          metadata=bearer("gpb_guess"), timeout=10)
        assert code == grpc.StatusCode.UNAUTHENTICATED
    code, detail = code_of(stub.CheckAccess, pb.CheckAccessRequest(),
                           metadata=bearer("gpb_guess"), timeout=10)
    assert code == grpc.StatusCode.RESOURCE_EXHAUSTED, detail
    assert "too many failed authentications from 127.0.0.1" in detail and "retry in" in detail
    for _ in range(3):
        stub.SubmitRun(pb.SubmitRunRequest(run=make_run()), metadata=bearer(alice), timeout=30)
        stub.ListRuns(pb.ListRunsRequest(), metadata=collector.metadata(), timeout=30)
        stub.ListRuns(pb.ListRunsRequest(), timeout=30)  # a public read, no token
    assert collector.store.runs.count() == 3


def test_parallel_guessers_get_their_budget_and_no_more(collector_factory) -> None:
    """16 guessers in parallel from one address get the address's failures a minute
    checked, however many calls they have in flight, and RESOURCE_EXHAUSTED past them;
    meanwhile a valid caller from another address (127.0.0.2) is answered."""
    per_minute = 30
    collector = collector_factory(auth_failures_per_minute=per_minute)
    alice = collector.make_token("alice")
    stub = collector.collector_stub()
    host, port = collector.address.rsplit(":", 1)
    codes: Counter[grpc.StatusCode] = Counter()
    lock = threading.Lock()
    stop = threading.Event()

    def guess(guesser: int) -> None:
        for n in range(10_000):  # bounded: stopped by `stop` long before
            if stop.is_set():
                return
            code, _ = code_of(stub.CheckAccess, pb.CheckAccessRequest(),
                              metadata=bearer(f"gpb_guess-{guesser}-{n}"), timeout=30)
            with lock:
                codes[code] += 1

    began = time.monotonic()
    with Relay((host, int(port)), "127.0.0.2") as other, \
            grpc.insecure_channel(other.address) as channel, \
            ThreadPoolExecutor(16) as pool:
        guessers = [pool.submit(guess, i) for i in range(16)]
        try:
            assert until(lambda: sum(codes.values()) > 2 * per_minute, within_s=60)
            other_stub = pb_grpc.CollectorStub(channel)
            for _ in range(20):
                other_stub.CheckAccess(pb.CheckAccessRequest(), metadata=bearer(alice),
                                       timeout=30)
                other_stub.ListRuns(pb.ListRunsRequest(), metadata=bearer(alice), timeout=30)
            assert not any(g.done() for g in guessers)  # they guessed all along
        finally:
            stop.set()
        for g in guessers:
            g.result()
    elapsed = time.monotonic() - began
    assert set(codes) == {grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.RESOURCE_EXHAUSTED}
    # The burst, and one more failure for every 2 s the guessing lasted: no more.
    assert codes[grpc.StatusCode.UNAUTHENTICATED] <= per_minute + elapsed * per_minute / 60 + 1
    assert codes[grpc.StatusCode.RESOURCE_EXHAUSTED] > per_minute


def test_valid_tokens_never_count_as_failures(collector_factory) -> None:
    collector = collector_factory(auth_failures_per_minute=2)
    stub = collector.collector_stub()
    for _ in range(10):
        stub.CheckAccess(pb.CheckAccessRequest(), metadata=collector.metadata(), timeout=10)
