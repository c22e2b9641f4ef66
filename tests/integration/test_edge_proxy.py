"""The collector's public edge, for real: Debian's HAProxy with docker/edge/haproxy.cfg in
front of a collector on port 0 and the results site, TLS from a certificate made here.

Clients of other addresses (127.0.0.2, 127.0.0.3) come through a relay that connects
from that address (tests/source_address.py), or bind it themselves.
"""

from __future__ import annotations

import http.client
import select
import socket
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc
import pytest
from edge import MISSING, Edge, haproxy_binary, start_edge
from factories import make_run
from source_address import Relay
from waiting import until

from gpubench.client import Client
from gpubench.v1 import collector_pb2 as pb
from gpubench.v1 import collector_pb2_grpc as pb_grpc

# HAProxy is a fetched Debian tool: these tests are part of `make test-e2e`.
pytestmark = pytest.mark.e2e

PER_ADDRESS = 120  # connections one address may hold (100 visitors fit)
FAILURES = 5  # failed authentications a minute per client address
REQUEST_TIMEOUT_S = 6  # from the TLS handshake to a whole request's headers
IDLE_TIMEOUT_S = 10  # silent before the handshake, or between requests


@pytest.fixture(scope="module")
def haproxy() -> Path:
    binary = haproxy_binary()
    if binary is None:
        pytest.skip(MISSING)
    return binary


@pytest.fixture
def stack(haproxy: Path, tmp_path: Path, collector_factory) -> Iterator[tuple[Edge, object]]:
    """A collector trusting 127.0.0.1 (where the edge connects from), the site in a
    thread, the edge in front of both."""
    from site_in_thread import start_in_thread

    from gpubench.collector.web.reads import SiteConfig

    collector = collector_factory(trusted_proxies=["127.0.0.1"],
                                  auth_failures_per_minute=FAILURES)
    site = start_in_thread(SiteConfig(address=collector.address,
                                      token=collector.make_token("site")))
    try:
        with start_edge(haproxy, tmp_path / "edge", collector=collector.address,
                        site=f"127.0.0.1:{site.port}",
                        settings={"EDGE_CONNECTIONS_PER_ADDRESS": str(PER_ADDRESS),
                                  "EDGE_REQUEST_TIMEOUT": f"{REQUEST_TIMEOUT_S}s",
                                  "EDGE_IDLE_TIMEOUT": f"{IDLE_TIMEOUT_S}s"}) as edge:
            yield edge, collector
    finally:
        site.stop()


def get(edge: Edge, path: str, source: str = "127.0.0.1") -> tuple[int, bytes]:
    """A GET of the site through the edge, over TLS, from `source`."""
    connection = http.client.HTTPSConnection(
        "localhost", edge.site_port, context=edge.tls_context(), timeout=60,
        source_address=(source, 0))
    try:
        connection.request("GET", path)
        answer = connection.getresponse()
        return answer.status, answer.read()
    finally:
        connection.close()


def closed_by_peer(sock: socket.socket, within_s: float) -> bool:
    """Whether the other end closes `sock` within `within_s` (nothing is sent on it; what
    the other end says before closing, such as a 408, is read and let go)."""
    deadline = time.monotonic() + within_s
    try:
        while (left := deadline - time.monotonic()) > 0:
            sock.settimeout(left)
            if sock.recv(4096) == b"":
                return True
    except (ConnectionResetError, ConnectionAbortedError):
        return True
    except TimeoutError:
        pass
    return False


def bearer(token: str) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {token}"),)


def test_a_grpc_client_submits_and_compares_through_tls(stack) -> None:
    edge, collector = stack
    token = collector.make_token("lab")
    with Client(edge.grpc_address, token, ca=edge.ca, timeout=30) as client:
        ack = client.submit_run(make_run())
        assert client.get_run(ack.run_id).submitter == "lab"
        compared = client.compare_response("B0")
        assert len(compared.groups) == 1
    assert collector.store.runs.count() == 1


def test_the_site_answers_through_the_edge_and_takes_100_visitors_of_one_address(
        stack) -> None:
    edge, _ = stack
    status, page = get(edge, "/")
    assert status == 200 and b"<html" in page.lower()
    assert get(edge, "/healthz")[0] == 200
    gate = threading.Barrier(100)

    def visit(_: int) -> int:
        gate.wait(timeout=120)
        return get(edge, "/")[0]

    with ThreadPoolExecutor(100) as pool:
        statuses = list(pool.map(visit, range(100)))
    assert statuses == [200] * 100


def test_connections_past_the_limit_of_an_address_are_refused_not_others(stack) -> None:
    edge, _ = stack
    over = 5
    # Silent connections count: past the limit, this address's connections are closed at
    # once (which ones is up to the edge's threads), the others stay open...
    silent: list[socket.socket] = []
    reset = 0  # refused so fast that connect() itself saw the reset
    for _ in range(PER_ADDRESS + over):
        try:
            silent.append(socket.create_connection(("127.0.0.1", edge.site_port), timeout=10))
        except ConnectionResetError:
            reset += 1
    try:
        closed = closed_among(silent, within_s=REQUEST_TIMEOUT_S / 2)
        assert reset + len(closed) == over
        # ...while another address is served.
        assert get(edge, "/healthz", source="127.0.0.2")[0] == 200
    finally:
        for sock in silent:
            sock.close()
    # Once they are gone, this address is served again.
    assert until(lambda: served(edge), within_s=30)


def served(edge: Edge) -> bool:
    """Whether the site answers 200 through the edge now."""
    try:
        return get(edge, "/healthz")[0] == 200
    except OSError:
        return False


def closed_among(sockets: list[socket.socket], within_s: float) -> list[socket.socket]:
    """Those of `sockets` (nothing sent on them) the other end closes within `within_s`."""
    deadline = time.monotonic() + within_s
    closed: list[socket.socket] = []
    open_ = list(sockets)
    while open_ and (left := deadline - time.monotonic()) > 0:
        readable, _, _ = select.select(open_, [], [], left)
        for sock in readable:
            open_.remove(sock)
            if closed_by_peer(sock, within_s=1):
                closed.append(sock)
    return closed


def test_silent_connections_are_closed_after_the_request_timeout(stack) -> None:
    edge, _ = stack
    plain = socket.create_connection(("127.0.0.1", edge.grpc_port), timeout=10)
    raw = socket.create_connection(("127.0.0.1", edge.site_port), timeout=10)
    handshaken = edge.tls_context().wrap_socket(raw, server_hostname="localhost")
    with plain, handshaken:
        # Generous bounds: open a while, then closed by the edge, before the TLS
        # handshake (IDLE_TIMEOUT_S) and after it (REQUEST_TIMEOUT_S).
        assert not closed_by_peer(plain, within_s=0.5)
        assert closed_by_peer(plain, within_s=25)
        assert closed_by_peer(handshaken, within_s=25)


def test_failed_authentications_are_counted_by_the_real_client_address(stack) -> None:
    """Through the edge, 127.0.0.1 and 127.0.0.2 have a budget each (the collector sees
    both as the edge's 127.0.0.1); a forged x-forwarded-for changes nothing, through the
    edge or straight from a peer the collector does not trust."""
    edge, collector = stack
    forged = (("x-forwarded-for", "203.0.113.50"),)

    def guesses(stub: pb_grpc.CollectorStub, count: int) -> list[tuple[grpc.StatusCode, str]]:
        answers = []
        for n in range(count):
            try:
                stub.CheckAccess(pb.CheckAccessRequest(),
                                 metadata=(*bearer(f"gpb_guess{n}"), *forged), timeout=30)
            except grpc.RpcError as exc:
                answers.append((exc.code(), exc.details()))
        return answers

    def through(address: str) -> grpc.Channel:
        credentials = grpc.ssl_channel_credentials(edge.ca.read_bytes())
        return grpc.secure_channel(address, credentials,
                                   options=[("grpc.ssl_target_name_override", "localhost")])

    host, port = "127.0.0.1", edge.grpc_port
    with through(edge.grpc_address) as own, \
            Relay((host, port), "127.0.0.2") as other, through(other.address) as second:
        first = guesses(pb_grpc.CollectorStub(own), FAILURES + 1)
        assert [code for code, _ in first] == (
            [grpc.StatusCode.UNAUTHENTICATED] * FAILURES + [grpc.StatusCode.RESOURCE_EXHAUSTED])
        assert "too many failed authentications from 127.0.0.1 " in first[-1][1]
        # 127.0.0.2 through the same edge: a budget of its own.
        then = guesses(pb_grpc.CollectorStub(second), FAILURES + 1)
        assert [code for code, _ in then[:FAILURES]] == [grpc.StatusCode.UNAUTHENTICATED] * FAILURES
        assert "too many failed authentications from 127.0.0.2 " in then[-1][1]
    # Straight to the collector from 127.0.0.3, which it does not trust: the forged
    # header is ignored and 127.0.0.3 is counted.
    host, port = collector.address.rsplit(":", 1)
    with Relay((host, int(port)), "127.0.0.3") as direct, \
            grpc.insecure_channel(direct.address) as channel:
        answers = guesses(pb_grpc.CollectorStub(channel), FAILURES + 1)
    assert [code for code, _ in answers[:FAILURES]] == [grpc.StatusCode.UNAUTHENTICATED] * FAILURES
    assert "too many failed authentications from 127.0.0.3 " in answers[-1][1]
