"""How the collector listens for gRPC: TLS, addresses, gRPC's connection options,
health and reflection, refusals before a servicer runs.

gRPC core bounds connections itself: server_handshake_timeout_ms closes one that
never finishes its handshake (TLS, and the client's HTTP/2 preface and SETTINGS),
max_connection_idle_ms one without a call (one that sent its preface and SETTINGS
and then nothing too), keepalive one whose peer stops answering, and
max_allowed_incoming_connections closes at once any past a cap. The collector raises
its own limit of open files as far as the system lets it (`raise_open_files_limit`)
and caps its connections below that limit (`connection_cap`), so that connections
never take the descriptors its database and new clients need. A public collector
sits behind a real proxy (docker/compose.yaml), which limits connections per address.
"""

from __future__ import annotations

import contextlib
import errno
import ipaddress
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
from google.protobuf.message import DecodeError
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from gpubench.collector import reflection
from gpubench.errors import GpubenchError
from gpubench.v1 import collector_pb2

DEFAULT_MAX_MESSAGE_BYTES = 1 << 20
DEFAULT_WORKERS = 64  # enough that submitters wait for the write lock while reads go on
STOP_GRACE_S = 10.0  # how long in-flight calls get to finish on a graceful stop
# Calls at once on one connection (HTTP/2 streams: more wait in the client), and in all
# (more: RESOURCE_EXHAUSTED, retryable; each may hold its request in memory).
MAX_CONCURRENT_STREAMS = 100
MAX_CONCURRENT_CALLS = 1000
# Open files the collector wants: a connection holds one (1M: what Linux allows a process
# by default, fs.nr_open); those kept from connections for the database, its log, the
# metrics, the admin socket, gRPC's own and the process's.
WANTED_OPEN_FILES = 1 << 20
RESERVED_DESCRIPTORS = 512
# How long a new connection has to finish its handshake (TLS if any, the client's HTTP/2
# preface and SETTINGS), and a connection may go without a call (then GOAWAY) (s).
HANDSHAKE_TIMEOUT_S = 10.0
IDLE_CONNECTION_S = 60.0
# The collector pings a connection after this long without a frame and closes it when
# no answer comes within KEEPALIVE_TIMEOUT_S: dead peers do not hold places (s).
KEEPALIVE_S = 60.0
KEEPALIVE_TIMEOUT_S = 20.0
# Clients may ping no more often than this while no call is under way (gpubench's client
# pings every 5 minutes, and only during calls); a client that pings more often is
# warned twice (HTTP/2 strikes), then its connection closed (s).
CLIENT_PING_MIN_S = 300.0
CLIENT_PING_STRIKES = 2
SERVICE_NAMES = (
    collector_pb2.DESCRIPTOR.services_by_name["Collector"].full_name,
    collector_pb2.DESCRIPTOR.services_by_name["Admin"].full_name,
)


class Refusal(Exception):
    """A call refused with a gRPC status code and message.

    Raised by the token check before a servicer runs (collector.auth); the check
    turns it into `context.abort(code, details)`.
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


def server_options(max_message_bytes: int,
                   max_connections: int | None = None) -> list[tuple[str, Any]]:
    """Channel options of a collector's gRPC server (see the module's doc);
    `max_connections` (None: `connection_cap()`) open at once at most."""
    cap = connection_cap() if max_connections is None else max_connections
    return [
        ("grpc.max_allowed_incoming_connections", cap),
        ("grpc.max_receive_message_length", max_message_bytes),
        ("grpc.max_send_message_length", 64 << 20),
        ("grpc.max_concurrent_streams", MAX_CONCURRENT_STREAMS),
        ("grpc.server_handshake_timeout_ms", int(HANDSHAKE_TIMEOUT_S * 1000)),
        ("grpc.max_connection_idle_ms", int(IDLE_CONNECTION_S * 1000)),
        ("grpc.keepalive_time_ms", int(KEEPALIVE_S * 1000)),
        ("grpc.keepalive_timeout_ms", int(KEEPALIVE_TIMEOUT_S * 1000)),
        ("grpc.keepalive_permit_without_calls", 0),
        ("grpc.http2.min_recv_ping_interval_without_data_ms", int(CLIENT_PING_MIN_S * 1000)),
        ("grpc.http2.max_ping_strikes", CLIENT_PING_STRIKES),
        # One port, one collector: a second one started on it fails instead of sharing.
        ("grpc.so_reuseport", 0),
    ]


def _status(serving: bool) -> Any:
    return (health_pb2.HealthCheckResponse.SERVING if serving
            else health_pb2.HealthCheckResponse.NOT_SERVING)


def set_serving(health_servicer: health.HealthServicer, serving: bool) -> None:
    """Every service of the collector (and the server as a whole, "") SERVING, or
    NOT_SERVING while runs cannot be stored durably (a full disk)."""
    for name in ("", *SERVICE_NAMES):
        health_servicer.set(name, _status(serving))


def add_health_and_reflection(server: grpc.Server) -> health.HealthServicer:
    """The standard health service (every service SERVING) and server reflection; the
    health servicer, for `set_serving`."""
    health_servicer = health.HealthServicer()
    set_serving(health_servicer, True)
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    _add_reflection(server)
    return health_servicer


def _add_reflection(server: grpc.Server) -> None:
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
    """Make `server` listen on host:port (0: any free port), TLS when `tls`; the port,
    or a GpubenchError when it cannot listen."""
    address = bind_address(host, port)
    try:
        if tls is not None:
            bound = server.add_secure_port(address, tls.credentials())
        else:
            bound = server.add_insecure_port(address)
    except RuntimeError as exc:
        raise GpubenchError(f"--host/--port {address}: cannot listen ({exc})") from exc
    if bound == 0:
        raise GpubenchError(f"--host/--port {address}: cannot listen")
    return bound


def raise_open_files_limit() -> int:
    """Raise this process's limit of open files towards WANTED_OPEN_FILES (the hard
    limit too, where the process may: root, or CAP_SYS_RESOURCE; else the soft limit to
    the hard one), and return the limit it has now: each connection holds a
    descriptor, and connections, not descriptors, should decide."""
    try:
        import resource
    except ImportError:  # not a POSIX system
        return WANTED_OPEN_FILES
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = WANTED_OPEN_FILES
    with contextlib.suppress(OSError, ValueError):  # the system's most for a process
        wanted = min(wanted, int(Path("/proc/sys/fs/nr_open").read_text()))
    for limit in (max(wanted, hard) if hard != resource.RLIM_INFINITY else hard, hard):
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (limit, limit))
            break
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    return WANTED_OPEN_FILES if soft == resource.RLIM_INFINITY else soft


def connection_cap(open_files: int | None = None) -> int:
    """The most connections the collector holds at once: its limit of open files
    (None: this process's now) less RESERVED_DESCRIPTORS; past it gRPC closes new ones
    at once, before they take a descriptor the database needs."""
    if open_files is None:
        try:
            import resource
        except ImportError:
            open_files = WANTED_OPEN_FILES
        else:
            soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
            open_files = WANTED_OPEN_FILES if soft == resource.RLIM_INFINITY else soft
    return max(open_files - RESERVED_DESCRIPTORS, 16)


def address_key(host: str) -> str:
    """What failed authentications are counted by (collector.auth): the IP address,
    an IPv6 one by its /64 (which one host usually holds whole), an IPv4-mapped IPv6
    address as the IPv4 address."""
    host = host.strip("[]").split("%")[0]
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return host
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return str(address.ipv4_mapped)
        if not address.is_loopback:
            return str(ipaddress.IPv6Network((address, 64), strict=False))
    return str(address)
