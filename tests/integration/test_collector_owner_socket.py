"""The owner's Unix socket of a multi-process collector, spoken to directly.

A real owner (this process: the database, the gRPC front-end processes it started) and
raw connections to its socket that follow the documented protocol
(protos/gpubench/v1/collector_ipc.proto) or break it: a connection that does not
prove the secret, or that announces a frame over the limit, is closed, and the
collector goes on serving its front-ends.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import stat
import threading
import time
from pathlib import Path

import grpc
import pytest
from factories import make_run

from gpubench.collector import ipc
from gpubench.collector.frontend import OwnerClient
from gpubench.collector.server import DEFAULT_MAX_MESSAGE_BYTES
from gpubench.collector.transport import Refusal
from gpubench.v1 import collector_ipc_pb2 as ipc_pb2
from gpubench.v1 import collector_pb2 as pb

pytestmark = pytest.mark.skipif(not hasattr(socket, "AF_UNIX"), reason="needs Unix sockets")

LIMIT = ipc.frame_limit(DEFAULT_MAX_MESSAGE_BYTES)


@pytest.fixture
def collector(collector_factory):
    return collector_factory(frontends=2)


@pytest.fixture
def owner_log(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    """The owner's warnings (why it closed a connection)."""
    caplog.set_level(logging.WARNING, logger="gpubench.collector.owner")
    return caplog


def _connect(collector) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(10)
    sock.connect(collector.frontends.socket_path)
    return sock


def _nonce(sock: socket.socket) -> bytes:
    return ipc.nonce_of(ipc.receive(sock, ipc_pb2.OwnerMessage, ipc.HANDSHAKE_LIMIT))


def _authenticated(collector) -> socket.socket:
    """A connection that proved the secret, as a front-end's does."""
    sock = _connect(collector)
    ipc.send(sock, ipc.proof(collector.frontends._secret, _nonce(sock)), ipc.HANDSHAKE_LIMIT)
    return sock


def _closed_by_the_owner(sock: socket.socket) -> bool:
    """Whether the owner closes the connection (within the socket's timeout)."""
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


def _still_serves(collector) -> None:
    """Both front-ends still store runs through the owner."""
    stub = collector.collector_stub()
    before = collector.store.count()
    for _ in range(4):
        stub.SubmitRun(pb.SubmitRunRequest(run=make_run()), metadata=collector.metadata(),
                       timeout=30)
    assert collector.store.count() == before + 4


def _ask(sock: socket.socket, message: ipc_pb2.FrontendMessage) -> ipc_pb2.Reply:
    ipc.send(sock, message, LIMIT)
    return ipc.receive(sock, ipc_pb2.OwnerMessage, LIMIT).reply


def test_the_socket_lives_in_a_folder_only_its_user_may_enter(collector) -> None:
    folder = Path(collector.frontends.socket_path).parent
    info = folder.stat()
    assert stat.S_IMODE(info.st_mode) == 0o700 and info.st_uid == os.getuid()


def test_a_connection_that_proves_the_secret_is_served_as_documented(collector) -> None:
    """A client written from the .proto alone: auth, a forwarded call, a submission."""
    sock = _authenticated(collector)
    admin = f"Bearer {collector.admin_token}"
    assert ipc.outcome(_ask(sock, ipc.auth_request(admin, "ipv4:127.0.0.1:1"))) is None
    with pytest.raises(Refusal) as caught:
        ipc.outcome(_ask(sock, ipc.auth_request("Bearer nonsense", "ipv4:127.0.0.1:1")))
    assert caught.value.code == grpc.StatusCode.UNAUTHENTICATED
    listed = ipc.outcome(_ask(sock, ipc.call_request(
        "/gpubench.v1.Collector/ListRuns", pb.ListRunsRequest().SerializeToString(), admin,
        "ipv4:127.0.0.1:1")))
    assert pb.ListRunsResponse.FromString(listed).runs == []
    from gpubench.collector.rows import run_row

    run = make_run()
    ack = ipc.outcome(_ask(sock, ipc.submit_request(admin, "ipv4:127.0.0.1:1",
                                                    run_row(run, ""), [])))
    assert ack.run_id == run.run_id and collector.store.count() == 1
    with pytest.raises(Refusal) as caught:
        ipc.outcome(_ask(sock, ipc.submit_request(
            admin, "ipv4:127.0.0.1:1", None, [("run.run_id", "missing")])))
    assert (caught.value.code, caught.value.details) == (
        grpc.StatusCode.INVALID_ARGUMENT, "run.run_id: missing")
    sock.close()


def test_a_connection_without_the_secret_is_closed(collector, owner_log) -> None:
    wrong = _connect(collector)
    ipc.send(wrong, ipc.proof(ipc.new_secret(), _nonce(wrong)), ipc.HANDSHAKE_LIMIT)
    assert _closed_by_the_owner(wrong)
    assert "did not prove the front-ends' secret" in owner_log.text
    # A request in place of the proof: closed, nothing done.
    bold = _connect(collector)
    _nonce(bold)
    ipc.send(bold, ipc.submit_request(f"Bearer {collector.admin_token}", None,
                                      None, [("run", "x")]), LIMIT)
    assert _closed_by_the_owner(bold)
    _still_serves(collector)


def test_a_proof_made_for_another_connection_is_refused(collector) -> None:
    """A proof seen once (here: made for the first connection's nonce) opens nothing."""
    first = _connect(collector)
    seen = ipc.proof(collector.frontends._secret, _nonce(first))
    second = _connect(collector)
    _nonce(second)
    ipc.send(second, seen, ipc.HANDSHAKE_LIMIT)
    assert _closed_by_the_owner(second)
    first.close()


def test_a_frame_over_the_limit_is_refused_and_the_connection_closed(
    collector, owner_log
) -> None:
    sock = _authenticated(collector)
    # Only the length: the owner refuses it before any of the body comes.
    sock.sendall((LIMIT + 1).to_bytes(4, "big"))
    assert _closed_by_the_owner(sock)
    assert f"a frame of {LIMIT + 1:,} bytes announced; at most {LIMIT:,}" in owner_log.text
    # Before the handshake the bound is a kilobyte.
    early = _connect(collector)
    _nonce(early)
    early.sendall((ipc.HANDSHAKE_LIMIT + 1).to_bytes(4, "big"))
    assert _closed_by_the_owner(early)
    _still_serves(collector)


def test_a_request_of_the_largest_size_goes_through(collector) -> None:
    """The bound is the collector's largest message plus slack: a forwarded request of
    the largest size gRPC lets in still goes through."""
    sock = _authenticated(collector)
    request = pb.GetRunRequest(run_id="x" * (DEFAULT_MAX_MESSAGE_BYTES - 8))
    with pytest.raises(Refusal) as caught:
        ipc.outcome(_ask(sock, ipc.call_request(
            "/gpubench.v1.Collector/GetRun", request.SerializeToString(),
            f"Bearer {collector.admin_token}", None)))
    assert caught.value.code in (grpc.StatusCode.NOT_FOUND, grpc.StatusCode.INVALID_ARGUMENT)


def test_bytes_that_are_no_message_close_the_connection(collector) -> None:
    sock = _authenticated(collector)
    garbage = b"\xff\xfe\xfd\xfc"
    sock.sendall(len(garbage).to_bytes(4, "big") + garbage)
    assert _closed_by_the_owner(sock)
    other = _authenticated(collector)  # a second proof after the handshake: out of place
    ipc.send(other, ipc.proof(collector.frontends._secret, b"n" * 32), LIMIT)
    assert _closed_by_the_owner(other)
    _still_serves(collector)


def test_a_peer_that_stalls_in_the_handshake_is_dropped_and_others_get_in(collector) -> None:
    silent = _connect(collector)
    _nonce(silent)  # ... and never answers
    began = time.monotonic()
    assert _closed_by_the_owner(silent)
    assert time.monotonic() - began < ipc.HANDSHAKE_TIMEOUT_S + 3
    _authenticated(collector).close()
    _still_serves(collector)


def _scripted_owner(path: str, secret: bytes, reply: bytes) -> tuple[threading.Thread, list]:
    """An owner's socket answering the first request with `reply` (raw bytes); what it
    saw afterwards goes into the list."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(8)
    seen: list = []

    def serve() -> None:
        links = []
        for _ in range(2):  # the control connection, then a request link
            sock, _ = listener.accept()
            sock.settimeout(10)
            nonce, challenge = ipc.challenge()
            sock.sendall(challenge)
            assert ipc.proves(ipc.receive(sock, ipc_pb2.FrontendMessage, ipc.HANDSHAKE_LIMIT),
                              secret, nonce)
            links.append(sock)
        seen.append(ipc.receive(links[1], ipc_pb2.FrontendMessage, LIMIT))
        links[1].sendall(reply)
        seen.append(links[1].recv(1))  # b"": the front-end closed the link
        for sock in links:
            sock.close()
        listener.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return thread, seen


@pytest.mark.parametrize("reply", [
    (1 << 31).to_bytes(4, "big"),  # 2 GiB announced
    (4).to_bytes(4, "big") + b"\xff\xff\xff\xff",  # no message
    ipc.framed(ipc.health(True), 1024),  # not a reply
], ids=["over-the-limit", "garbage", "not-a-reply"])
def test_a_front_end_closes_a_link_whose_reply_breaks_the_protocol(tmp_path, reply) -> None:
    secret = ipc.new_secret()
    path = str(tmp_path / "owner.sock")
    thread, seen = _scripted_owner(path, secret, reply)

    async def ask() -> None:
        client = OwnerClient(path, secret, LIMIT)
        with pytest.raises(Refusal) as caught:
            await client.ask(ipc.auth_request("Bearer x", None))
        assert caught.value.code == grpc.StatusCode.UNAVAILABLE

    asyncio.run(ask())
    thread.join(10)
    assert seen[0].WhichOneof("kind") == "auth" and seen[1] == b""
