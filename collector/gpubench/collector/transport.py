"""What every collector process listening for gRPC shares: TLS, addresses, options,
health and reflection.

Kept free of the database (no DuckDB or Arrow imports), so that the front-end
processes of a multi-process collector (collector.frontend) start fast and small.
"""

from __future__ import annotations

import errno
import ipaddress
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
from google.protobuf.message import DecodeError
from gpubench.collector import reflection
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from gpubench.errors import GpubenchError
from gpubench.v1 import collector_pb2

DEFAULT_MAX_MESSAGE_BYTES = 1 << 20
# Enough threads that every concurrent submitter can wait for its group commit.
DEFAULT_WORKERS = 64
# How long in-flight calls get to finish on a graceful stop.
STOP_GRACE_S = 10.0
# Limits of each serving process, so that no one client holds it all: calls at once on
# one connection (HTTP/2 streams: more wait in the client), connections (more are
# closed at once: UNAVAILABLE), and calls at once in all (more: RESOURCE_EXHAUSTED,
# retryable). An agent makes one call at a time; each call may hold its request (up to
# the message limit) in memory.
MAX_CONCURRENT_STREAMS = 100
MAX_CONNECTIONS = 1000
MAX_CONCURRENT_CALLS = 1000
SERVICE_NAMES = (
    collector_pb2.DESCRIPTOR.services_by_name["Collector"].full_name,
    collector_pb2.DESCRIPTOR.services_by_name["Admin"].full_name,
)


class Refusal(Exception):
    """A call refused with a gRPC status code and message.

    Raised where no gRPC context is at hand (the multi-process collector's owner
    answers calls that front-end processes forward); a servicer context turns it
    into `context.abort(code, details)`.
    """

    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        super().__init__(details)
        self.code = code
        self.details = details


def parse_request(message_class: Any, data: bytes) -> Any:
    """`data` parsed as a `message_class` request; Refusal (INVALID_ARGUMENT) when it is
    not one.

    Servers take requests as bytes and parse them here, only once the call's token
    has been checked: nobody without a token makes the collector parse anything, and
    bytes that are no message answer INVALID_ARGUMENT rather than gRPC's INTERNAL.
    """
    try:
        return message_class.FromString(data)
    except DecodeError as exc:
        raise Refusal(
            grpc.StatusCode.INVALID_ARGUMENT,
            f"request: not a valid {message_class.DESCRIPTOR.full_name} message ({exc})",
        ) from None


@dataclass(frozen=True)
class TlsFiles:
    """A PEM certificate (chain) and its private key."""

    cert: Path
    key: Path

    def credentials(self) -> grpc.ServerCredentials:
        """The server credentials; a GpubenchError names an unreadable file."""
        try:
            cert, key = self.cert.read_bytes(), self.key.read_bytes()
        except OSError as exc:
            raise GpubenchError(f"{exc.filename}: cannot read ({exc.strerror})") from exc
        return grpc.ssl_server_credentials([(key, cert)])


def is_loopback(host: str) -> bool:
    """Whether `host` names only this machine (127.0.0.0/8, ::1, localhost)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def bind_address(host: str, port: int) -> str:
    """host:port with IPv6 literals bracketed."""
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"
    return f"{host}:{port}"


def check_plaintext(host: str, tls: TlsFiles | None, insecure: bool) -> None:
    """Refuse plaintext on any address but loopback unless `insecure`."""
    if tls is None and not insecure and not is_loopback(host):
        raise GpubenchError(
            f"--host {host}: plaintext is only allowed on a loopback address; "
            "give --tls-cert and --tls-key, or --insecure to accept plaintext"
        )


def server_options(
    max_message_bytes: int, *, share_port: bool,
    max_concurrent_streams: int = MAX_CONCURRENT_STREAMS, max_connections: int = MAX_CONNECTIONS,
) -> list[tuple[str, Any]]:
    """Channel options of a collector's gRPC server.

    `share_port` (SO_REUSEPORT) lets several front-end processes listen on one port,
    the kernel spreading connections over them; a single-process collector leaves it
    off, so that a second collector started on the same port fails instead of
    silently sharing it.
    """
    return [
        ("grpc.max_receive_message_length", max_message_bytes),
        ("grpc.max_send_message_length", 64 << 20),
        ("grpc.so_reuseport", 1 if share_port else 0),
        ("grpc.max_concurrent_streams", max_concurrent_streams),
        ("grpc.max_allowed_incoming_connections", max_connections),
    ]


def _status(serving: bool) -> Any:
    return (health_pb2.HealthCheckResponse.SERVING if serving
            else health_pb2.HealthCheckResponse.NOT_SERVING)


def set_serving(health_servicer: health.HealthServicer, serving: bool) -> None:
    """Every service of the collector (and the server as a whole, "") SERVING, or
    NOT_SERVING while runs cannot be stored durably (a full disk)."""
    for name in ("", *SERVICE_NAMES):
        health_servicer.set(name, _status(serving))


async def set_serving_aio(health_servicer: health.aio.HealthServicer, serving: bool) -> None:
    """`set_serving` for an asyncio server's health servicer."""
    for name in ("", *SERVICE_NAMES):
        await health_servicer.set(name, _status(serving))


def add_health_and_reflection(server: grpc.Server) -> health.HealthServicer:
    """The standard health service (every service SERVING) and server reflection; the
    health servicer, for `set_serving`."""
    health_servicer = health.HealthServicer()
    set_serving(health_servicer, True)
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    _add_reflection(server)
    return health_servicer


async def add_health_and_reflection_aio(server: grpc.aio.Server) -> health.aio.HealthServicer:
    """The same for an asyncio server (its health servicer's methods are coroutines)."""
    health_servicer = health.aio.HealthServicer()
    await set_serving_aio(health_servicer, True)
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    _add_reflection(server)
    return health_servicer


def _add_reflection(server: grpc.Server | grpc.aio.Server) -> None:
    reflection.enable((*SERVICE_NAMES, health.SERVICE_NAME), server)


def check_port(host: str, port: int) -> None:
    """Refuse a host:port this machine cannot listen on (in use, or not one of its
    addresses) before gRPC tries: gRPC would first log a line of its own."""
    if port == 0:
        return
    address = bind_address(host, port)
    try:
        found = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise GpubenchError(f"--host {host}: cannot resolve it ({exc.strerror})") from None
    for family, kind, protocol, _, where in found:
        with socket.socket(family, kind, protocol) as probe:
            # As gRPC binds: a port whose old connections linger (TIME_WAIT) is free.
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind(where)
            except OSError as exc:
                if exc.errno == errno.EADDRINUSE:
                    raise GpubenchError(
                        f"--port {port}: {address} is in use (another collector, or another "
                        "program, listens there): stop it, or choose another port with "
                        "--port (0: any free port)") from None
                if exc.errno == errno.EADDRNOTAVAIL:
                    raise GpubenchError(f"--host {host}: not an address of this machine; "
                                        "give one of its addresses, or 0.0.0.0 for all") from None
                raise GpubenchError(f"--host/--port {address}: cannot listen "
                                    f"({exc.strerror})") from None


def listen(server: grpc.Server, host: str, port: int, tls: TlsFiles | None) -> int:
    """Bind `server` to host:port (TLS when `tls`); the port bound, or a GpubenchError."""
    address = bind_address(host, port)
    try:
        if tls is not None:
            bound = server.add_secure_port(address, tls.credentials())
        else:
            bound = server.add_insecure_port(address)
    except RuntimeError as exc:
        raise GpubenchError(f"--host/--port {address}: cannot listen ({exc})") from exc
    if bound == 0:
        raise GpubenchError(f"--host/--port {address}: cannot listen (in use or not local)")
    return bound
