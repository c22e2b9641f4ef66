"""Who gets a connection (collector.door): a flood of idle connections leaves new clients
answered, a peer holds at most its share, health says when connections are refused.

Floods go to 127.0.0.1 only, from loopback source addresses (127.0.0.0/8 is this
machine's), bounded in count, and are closed by the test.
"""

from __future__ import annotations

import contextlib
import socket
import time
from collections.abc import Iterator
from concurrent import futures

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from gpubench.collector.door import HTTP2_PREFACE
from gpubench.collector.transport import (
    PEER_CONNECTIONS,
    door_limits,
    listen_behind,
    open_door,
)
from gpubench.v1 import collector_pb2 as pb
from gpubench.v1 import collector_pb2_grpc


@contextlib.contextmanager
def idle_connections(port: int, count: int, source: str) -> Iterator[list[socket.socket]]:
    """`count` TCP connections to 127.0.0.1:`port` from `source` that send nothing."""
    opened: list[socket.socket] = []
    try:
        for _ in range(count):
            sock = socket.socket()
            opened.append(sock)
            sock.bind((source, 0))
            sock.connect(("127.0.0.1", port))
        yield opened
    finally:
        for sock in opened:
            sock.close()


def fresh_stub(address: str) -> tuple[grpc.Channel, collector_pb2_grpc.CollectorStub]:
    """A stub on a connection of its own (channels to one address otherwise share one)."""
    channel = grpc.insecure_channel(address, options=[("grpc.use_local_subchannel_pool", 1)])
    return channel, collector_pb2_grpc.CollectorStub(channel)


def closed_by_peer(sock: socket.socket, timeout: float) -> bool:
    """Whether the collector closes `sock` within `timeout` seconds."""
    sock.settimeout(timeout)
    try:
        while True:
            data = sock.recv(65536)  # the server's HTTP/2 settings may come first
            if not data:
                return True
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


@pytest.mark.parametrize("frontends", [1, 2], ids=["1-process", "2-frontends"])
@pytest.mark.parametrize("source", ["127.0.0.2", "127.0.0.1"],
                         ids=["another-address", "the-same-address"])
def test_a_flood_of_idle_connections_leaves_a_new_client_answered(
    collector_factory, frontends: int, source: str
) -> None:
    collector = collector_factory()
    # More than every serving process holds (1,000 each): it used to shut every new
    # client out until gRPC's handshake deadline (UNAVAILABLE, "Socket closed").
    with idle_connections(collector.port, 1000 * frontends + 100, source):
        channel, stub = fresh_stub(collector.address)
        try:
            reply = stub.CheckAccess(pb.CheckAccessRequest(), metadata=collector.metadata(),
                                     timeout=20)
        finally:
            channel.close()
    assert reply.token_name == "admin"


@pytest.mark.parametrize("frontends", [1, 2], ids=["1-process", "2-frontends"])
def test_a_connection_that_sends_nothing_is_closed_at_its_deadline(collector) -> None:
    with idle_connections(collector.port, 1, "127.0.0.1") as (sock,):
        assert closed_by_peer(sock, 30.0)  # gRPC alone held it 60 s or more


def test_a_connection_that_is_no_grpc_client_is_closed_at_once(collector) -> None:
    with socket.create_connection(("127.0.0.1", collector.port), timeout=10) as sock:
        sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        assert closed_by_peer(sock, 30.0)


def test_one_address_holds_at_most_its_share_of_proven_connections(collector_factory) -> None:
    collector = collector_factory()
    held = []
    try:
        for _ in range(PEER_CONNECTIONS):
            sock = socket.create_connection(("127.0.0.1", collector.port), timeout=10)
            held.append(sock)
            sock.sendall(HTTP2_PREFACE)  # proven: a gRPC client, as far as the door knows
        deadline = time.monotonic() + 30
        while collector.server.door.connections() != (PEER_CONNECTIONS, 0):
            assert time.monotonic() < deadline, collector.server.door.connections()
            time.sleep(0.02)  # until every one is in and proven
        refused = socket.create_connection(("127.0.0.1", collector.port), timeout=10)
        held.append(refused)
        assert closed_by_peer(refused, 30.0)
        # Another address still gets in.
        other = socket.create_connection(("127.0.0.1", collector.port), timeout=10,
                                         source_address=("127.0.0.2", 0))
        held.append(other)
        other.sendall(HTTP2_PREFACE)
        assert not closed_by_peer(other, 1.0)
    finally:
        for sock in held:
            sock.close()
    assert collector.server.door.refused_peer >= 1


def test_health_is_not_serving_while_new_connections_are_refused(collector_factory) -> None:
    collector = collector_factory(max_connections=3)
    channels = [fresh_stub(collector.address) for _ in range(3)]
    try:
        health = health_pb2_grpc.HealthStub(channels[0][0])
        for _, stub in channels:  # every place held by a client that called
            stub.CheckAccess(pb.CheckAccessRequest(), metadata=collector.metadata(), timeout=20)
        assert health.Check(health_pb2.HealthCheckRequest(), timeout=20).status == \
            health_pb2.HealthCheckResponse.SERVING
        channel, stub = fresh_stub(collector.address)
        with pytest.raises(grpc.RpcError) as refused:
            stub.CheckAccess(pb.CheckAccessRequest(), metadata=collector.metadata(), timeout=20)
        channel.close()
        assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
        assert health.Check(health_pb2.HealthCheckRequest(), timeout=20).status == \
            health_pb2.HealthCheckResponse.NOT_SERVING
    finally:
        for channel, _ in channels:
            channel.close()


def test_calls_carry_the_clients_address_through_the_door(tmp_path) -> None:
    """What the token check's limits count by is the client's address, not the door's."""
    door = open_door("127.0.0.1", 0, tls=False, limits=door_limits())
    seen: list[str] = []

    def echo_peer(request: bytes, context: grpc.ServicerContext) -> bytes:
        seen.append(door.peer_of(context.peer()))
        return b""

    server = grpc.server(futures.ThreadPoolExecutor(2))
    server.add_generic_rpc_handlers([grpc.method_handlers_generic_handler(
        "test.Echo", {"Peer": grpc.unary_unary_rpc_method_handler(echo_peer)})])
    listen_behind(server, door, None)
    server.start()
    door.start_thread()
    try:
        channel = grpc.insecure_channel(f"127.0.0.1:{door.port}")
        channel.unary_unary("/test.Echo/Peer")(b"", timeout=20)
        channel.close()
    finally:
        door.stop_thread_accepting()
        server.stop(None).wait()
        door.close_thread()
    assert len(seen) == 1 and seen[0].startswith("ipv4:127.0.0.1:"), seen
