"""Who gets a connection, with gRPC's own options (collector.transport): floods of
silent connections and of HTTP/2 clients that go quiet leave a new client answered,
and the token check counts failed authentications by the caller's address.

Floods go to 127.0.0.1 only, from loopback source addresses (127.0.0.0/8 is this
machine's), bounded in count, and are closed by the test.
"""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Iterator

import grpc

from gpubench.collector.transport import (
    RESERVED_DESCRIPTORS,
    connection_cap,
    raise_open_files_limit,
    server_options,
)
from gpubench.v1 import collector_pb2 as pb
from gpubench.v1 import collector_pb2_grpc

# What an HTTP/2 client sends first: the connection preface and an empty SETTINGS frame.
HTTP2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
EMPTY_SETTINGS = b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"


@contextlib.contextmanager
def quiet_connections(port: int, count: int, sources: list[str],
                      greeting: bytes = b"") -> Iterator[list[socket.socket]]:
    """`count` TCP connections to 127.0.0.1:`port`, spread over `sources`, that send
    `greeting` and then nothing."""
    raise_open_files_limit()
    opened: list[socket.socket] = []
    try:
        for i in range(count):
            sock = socket.socket()
            opened.append(sock)
            sock.bind((sources[i % len(sources)], 0))
            sock.connect(("127.0.0.1", port))
            if greeting:
                sock.sendall(greeting)
        yield opened
    finally:
        for sock in opened:
            sock.close()


def answered(collector) -> str:
    """CheckAccess on a connection of its own (channels to one address share one),
    waiting for the connection up to its deadline: a connection the collector closes at
    once (at its cap, before it has seen a flood's connections close) is tried again,
    as a client that retries does, rather than failing the call at the first refusal."""
    channel = grpc.insecure_channel(collector.address,
                                    options=[("grpc.use_local_subchannel_pool", 1)])
    try:
        stub = collector_pb2_grpc.CollectorStub(channel)
        return stub.CheckAccess(pb.CheckAccessRequest(), metadata=collector.metadata(),
                                timeout=20, wait_for_ready=True).token_name
    finally:
        channel.close()


def test_a_flood_of_silent_connections_leaves_a_new_client_answered(collector) -> None:
    with quiet_connections(collector.port, 1100, ["127.0.0.1"]):
        assert answered(collector) == "admin"


def test_a_flood_of_http2_clients_gone_quiet_leaves_a_new_client_answered(collector) -> None:
    sources = [f"127.0.0.{i}" for i in range(2, 13)]
    with quiet_connections(collector.port, 1100, sources, HTTP2_PREFACE + EMPTY_SETTINGS):
        assert answered(collector) == "admin"


def _closed_by_the_server(sock: socket.socket, within_s: float) -> bool:
    """Whether the server closes `sock` (an HTTP/2 client's, gone quiet) within
    `within_s`; whatever it sent first (its SETTINGS) is read past."""
    sock.settimeout(within_s)
    try:
        while sock.recv(4096):
            pass
    except TimeoutError:
        return False
    except ConnectionResetError:
        return True
    return True


def test_connections_past_the_cap_are_closed_at_once_and_clients_answered_after(
        collector_factory) -> None:
    collector = collector_factory(max_connections=40)
    with quiet_connections(collector.port, 60, ["127.0.0.1"],
                           HTTP2_PREFACE + EMPTY_SETTINGS) as flood:
        # The first 40 are held (until they have made no call for 60 s); the others
        # are closed at once, before they can take a descriptor the database needs.
        # (at once on an idle machine; a loaded one may take the server a while to get
        # to them: a closed socket's wait ends when it is closed)
        closed = [_closed_by_the_server(sock, 10) for sock in flood[-10:]]
        assert all(closed), closed
        assert not _closed_by_the_server(flood[0], 0.5)
    assert answered(collector) == "admin"


def test_the_collector_holds_connections_below_its_limit_of_open_files() -> None:
    limit = raise_open_files_limit()
    assert limit >= 1024
    assert connection_cap(limit) == limit - RESERVED_DESCRIPTORS
    assert ("grpc.max_allowed_incoming_connections", connection_cap()) in server_options(1 << 20)


def test_the_token_check_counts_failures_by_the_callers_address(collector, monkeypatch) -> None:
    """The peer the token check gets (what failed authentications are counted by) is
    the client's address, as gRPC saw it, from whichever loopback address it called."""
    from gpubench.collector.auth import Gate, peer_key

    seen: list[str] = []
    check = Gate.check

    def noting(self, access, secret, peer=None):
        seen.append(peer_key(peer))
        return check(self, access, secret, peer)

    monkeypatch.setattr(Gate, "check", noting)
    assert answered(collector) == "admin"
    assert seen == ["127.0.0.1"]
