"""What every collector process listening for gRPC shares: TLS, addresses, the door
and its limits (collector.door), options, health and reflection.

Kept free of the database (no DuckDB or Arrow imports), so that the front-end
processes of a multi-process collector (collector.frontend) start fast and small.
"""

from __future__ import annotations

import contextlib
import errno
import ipaddress
import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
from google.protobuf.message import DecodeError
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from gpubench.collector import reflection
from gpubench.collector.door import Door, DoorLimits, listening_sockets
from gpubench.errors import GpubenchError
from gpubench.v1 import collector_pb2

DEFAULT_MAX_MESSAGE_BYTES = 1 << 20
# Enough threads that every concurrent submitter can wait for its group commit.
DEFAULT_WORKERS = 64
# How long in-flight calls get to finish on a graceful stop.
STOP_GRACE_S = 10.0
# Limits of each serving process, so that no one client holds it all: calls at once on
# one connection (HTTP/2 streams: more wait in the client), connections (collector.door:
# past them a new one closes the oldest that has not yet shown it is a gRPC client, or
# is refused: UNAVAILABLE), and calls at once in all (more: RESOURCE_EXHAUSTED,
# retryable). An agent makes one call at a time on one connection; each call may hold
# its request (up to the message limit) in memory.
MAX_CONCURRENT_STREAMS = 100
MAX_CONNECTIONS = 1000
MAX_CONCURRENT_CALLS = 1000
# Connections one address (an IPv6 one by its /64) may hold of a process's
# MAX_CONNECTIONS: a lab's agents behind one NAT fit, one peer cannot take them all.
PEER_CONNECTIONS = 100
# How long a new connection has to send its first bytes (the HTTP/2 preface, or the
# start of its TLS handshake), and then to finish the TLS handshake and send its HTTP/2
# settings (s).
PREFACE_TIMEOUT_S = 5.0
HANDSHAKE_TIMEOUT_S = 10.0
# A connection without a call for this long is closed (GOAWAY: its client reconnects
# when it calls again) (s).
IDLE_CONNECTION_S = 120.0
# The collector pings a connection after this long without a frame and closes it when
# no answer comes within KEEPALIVE_TIMEOUT_S: dead peers do not hold places (s).
KEEPALIVE_S = 60.0
KEEPALIVE_TIMEOUT_S = 20.0
# Clients may ping no more often than this while no call is under way (gpubench's client
# pings every 5 minutes, and only during calls); a client that pings more often is
# warned twice (HTTP/2 strikes), then its connection closed (s).
CLIENT_PING_MIN_S = 300.0
CLIENT_PING_STRIKES = 2
# Descriptors a serving process asks for (the soft limit raised towards the hard one):
# each connection takes one, and one more on each side of its link to gRPC.
FILES_PER_CONNECTION = 3
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

    def __init__(self, code: grpc.StatusCode, details: str, hold_s: float = 0.0) -> None:
        super().__init__(details)
        self.code = code
        self.details = details
        # How long whoever answers holds the answer back (a failed authentication past
        # its address's allowance: collector.auth.AuthFailures).
        self.hold_s = hold_s


def held_for(exc: BaseException, remaining_s: float | None) -> float:
    """How long to hold the answer to a call refused with `exc` (a failed
    authentication past its address's allowance: AuthFailures), within the call's
    remaining time (s)."""
    hold = getattr(exc, "hold_s", 0.0)
    if hold <= 0:
        return 0.0
    if remaining_s is not None:
        hold = min(hold, remaining_s - 0.2)
    return max(hold, 0.0)


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
    max_message_bytes: int, *, max_concurrent_streams: int = MAX_CONCURRENT_STREAMS,
    max_connections: int = MAX_CONNECTIONS,
) -> list[tuple[str, Any]]:
    """Channel options of a collector's gRPC server (behind collector.door, which
    holds the places of `max_connections`; gRPC's own limit is a backstop above it)."""
    return [
        ("grpc.max_receive_message_length", max_message_bytes),
        ("grpc.max_send_message_length", 64 << 20),
        ("grpc.max_concurrent_streams", max_concurrent_streams),
        ("grpc.max_allowed_incoming_connections", max_connections + 64),
        ("grpc.server_handshake_timeout_ms", int(HANDSHAKE_TIMEOUT_S * 1000)),
        ("grpc.max_connection_idle_ms", int(IDLE_CONNECTION_S * 1000)),
        ("grpc.keepalive_time_ms", int(KEEPALIVE_S * 1000)),
        ("grpc.keepalive_timeout_ms", int(KEEPALIVE_TIMEOUT_S * 1000)),
        ("grpc.keepalive_permit_without_calls", 0),
        ("grpc.http2.min_recv_ping_interval_without_data_ms", int(CLIENT_PING_MIN_S * 1000)),
        ("grpc.http2.max_ping_strikes", CLIENT_PING_STRIKES),
    ]


class Serving:
    """What health says, from two sources: whether runs can be stored durably (a full
    disk: `durable`) and whether new connections get in (collector.door: `room`).
    `tell(serving)` is called at every change of the two together."""

    def __init__(self, tell: Callable[[bool], None]) -> None:
        self._tell = tell
        self._lock = threading.Lock()
        self._durable = True
        self._room = True
        self._told: bool | None = None

    def durable(self, durable: bool) -> None:
        """Runs can (not) be stored durably now."""
        self._set(durable=durable)

    def room(self, room: bool) -> None:
        """New connections do (not) get in now."""
        self._set(room=room)

    def _set(self, **change: bool) -> None:
        with self._lock:
            self._durable = change.get("durable", self._durable)
            self._room = change.get("room", self._room)
            serving = self._durable and self._room
            if serving == self._told:
                return
            self._told = serving
            self._tell(serving)


def _status(serving: bool) -> Any:
    return (health_pb2.HealthCheckResponse.SERVING if serving
            else health_pb2.HealthCheckResponse.NOT_SERVING)


def set_serving(health_servicer: health.HealthServicer, serving: bool) -> None:
    """Every service of the collector (and the server as a whole, "") SERVING, or
    NOT_SERVING while runs cannot be stored durably (a full disk) or new connections
    are refused (`Serving`)."""
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


def door_limits(max_connections: int = MAX_CONNECTIONS) -> DoorLimits:
    """The door's limits for a process holding at most `max_connections`."""
    return DoorLimits(max_connections=max_connections,
                      peer_connections=min(PEER_CONNECTIONS, max_connections),
                      preface_timeout_s=PREFACE_TIMEOUT_S)


def open_door(
    host: str, port: int, *, tls: bool, limits: DoorLimits, share_port: bool = False,
) -> Door:
    """The door listening on host:port (0: any free port), not yet accepting; a
    GpubenchError when it cannot listen. `share_port` (SO_REUSEPORT) lets several
    front-end processes listen on one port; a single-process collector leaves it off,
    so that a second collector started on the same port fails instead of silently
    sharing it. `listen_behind` puts the gRPC server behind it."""
    try:
        sockets = listening_sockets(host, port, share_port=share_port)
    except OSError as exc:
        raise GpubenchError(f"--host/--port {bind_address(host, port)}: cannot listen "
                            f"({exc.strerror or exc})") from exc
    raise_open_files_limit(limits.max_connections * FILES_PER_CONNECTION + 256)
    return Door(sockets, limits, tls=tls)


def listen_behind(server: grpc.Server | grpc.aio.Server, door: Door,
                  tls: TlsFiles | None) -> None:
    """Make `server` listen on `door`'s private Unix socket (TLS when `tls`); a
    GpubenchError (the door closed) when it cannot."""
    try:
        if tls is not None:
            bound = server.add_secure_port(door.upstream, tls.credentials())
        else:
            bound = server.add_insecure_port(door.upstream)
    except (RuntimeError, GpubenchError) as exc:
        door.discard()
        raise GpubenchError(f"cannot listen behind the door ({exc})") from exc
    if bound == 0:
        door.discard()
        raise GpubenchError(f"cannot listen behind the door ({door.upstream} refused)")


def raise_open_files_limit(wanted: int) -> None:
    """Raise this process's soft limit of open files towards `wanted` (as far as the
    hard limit allows), so that the connection limits, not descriptors, decide."""
    try:
        import resource
    except ImportError:  # not a POSIX system
        return
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    if soft != resource.RLIM_INFINITY and soft < target:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
