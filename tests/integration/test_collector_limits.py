"""What one client can take of a collector at once: streams per connection, calls in
flight."""

from __future__ import annotations

import socket
import struct
import time

import grpc
import pytest
from factories import make_run

from gpubench.collector.statuses import MAX_DETAILS_CHARS
from gpubench.collector.transport import MAX_CONCURRENT_STREAMS
from gpubench.v1 import collector_pb2 as pb

_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
_SETTINGS = 0x4
_SETTINGS_MAX_CONCURRENT_STREAMS = 0x3


def server_settings(port: int) -> dict[int, int]:
    """The HTTP/2 SETTINGS the server at 127.0.0.1:`port` sends a new connection."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(_PREFACE + struct.pack(">I", _SETTINGS)[1:] + bytes([_SETTINGS, 0])
                     + struct.pack(">I", 0))  # an empty SETTINGS frame: length 0, stream 0
        data = b""
        while True:
            while len(data) < 9:
                data += sock.recv(4096)
            length = int.from_bytes(data[:3], "big")
            kind, flags = data[3], data[4]
            while len(data) < 9 + length:
                data += sock.recv(4096)
            payload, data = data[9:9 + length], data[9 + length:]
            if kind == _SETTINGS and not flags & 0x1:  # the server's own, not an ACK
                return {int.from_bytes(payload[i:i + 2], "big"):
                        int.from_bytes(payload[i + 2:i + 6], "big")
                        for i in range(0, len(payload), 6)}


def test_a_connection_is_offered_a_limited_number_of_streams(collector_factory) -> None:
    collector = collector_factory()
    for _ in range(4):
        settings = server_settings(collector.port)
        assert settings.get(_SETTINGS_MAX_CONCURRENT_STREAMS) == MAX_CONCURRENT_STREAMS


def test_calls_past_the_concurrent_limit_are_resource_exhausted(collector_factory) -> None:
    collector = collector_factory(max_concurrent_calls=4)
    stub = collector.collector_stub()
    with collector.store.database.write_lock:  # submissions wait: they stay in flight
        calls = [stub.SubmitRun.future(pb.SubmitRunRequest(run=make_run()),
                                       metadata=collector.metadata(), timeout=30)
                 for _ in range(8)]
        deadline = time.monotonic() + 10
        while sum(c.done() for c in calls) < 4 and time.monotonic() < deadline:
            time.sleep(0.05)
        refused = [c.exception().code() for c in calls if c.done()]
    assert refused == [grpc.StatusCode.RESOURCE_EXHAUSTED] * 4
    assert sum(c.exception() is None for c in calls) == 4  # the others were stored


def test_a_huge_run_id_is_not_found_in_a_bounded_message(collector_factory) -> None:
    """The message quotes what was asked for: a 512 KB run_id once came back whole, past
    what a client takes in trailers (RESOURCE_EXHAUSTED instead of NOT_FOUND)."""
    collector = collector_factory()
    stub = collector.collector_stub()
    with pytest.raises(grpc.RpcError) as missing:
        stub.GetRun(pb.GetRunRequest(run_id="x" * (512 << 10)), metadata=collector.metadata(),
                    timeout=30)
    assert missing.value.code() == grpc.StatusCode.NOT_FOUND
    details = missing.value.details()
    assert len(details) <= MAX_DETAILS_CHARS
    assert details.startswith("run_id xxx") and details.endswith(": no such run")
    assert "characters ...]" in details
