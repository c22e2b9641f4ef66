"""The collector's gRPC server: services, health, reflection, TLS, and the serve loop."""

from __future__ import annotations

import ipaddress
import signal
import threading
from collections.abc import Callable
from concurrent import futures
from dataclasses import dataclass
from pathlib import Path

import grpc
from gpubench.collector import local_admin
from gpubench.collector.auth import AuthInterceptor, RateLimiter, TokenBook, new_secret
from gpubench.collector.service import AdminService, CollectorService
from gpubench.collector.store import Store
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from gpubench.errors import GpubenchError
from gpubench.v1 import collector_pb2, collector_pb2_grpc

DEFAULT_PORT = 50051
DEFAULT_MAX_MESSAGE_BYTES = 1 << 20
DEFAULT_RATE_LIMIT = 50.0  # submissions per second per token
# Enough threads that every concurrent submitter can wait for its group commit.
DEFAULT_WORKERS = 64
# How long in-flight calls get to finish on a graceful stop.
STOP_GRACE_S = 10.0
SERVICE_NAMES = (
    collector_pb2.DESCRIPTOR.services_by_name["Collector"].full_name,
    collector_pb2.DESCRIPTOR.services_by_name["Admin"].full_name,
)


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


def create_server(
    store: Store,
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    tokens: TokenBook | None = None,
    public_read: bool = False,
    tls: TlsFiles | None = None,
    insecure: bool = False,
    rate_limit: float = DEFAULT_RATE_LIMIT,
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
    max_workers: int = DEFAULT_WORKERS,
) -> tuple[grpc.Server, int]:
    """A collector server bound to host:port (0: any free port), not yet started.

    Registers the Collector and Admin services behind the token interceptor, the
    standard health service and server reflection. Plaintext is refused on any
    address but loopback unless `insecure`.
    """
    if tls is None and not insecure and not is_loopback(host):
        raise GpubenchError(
            f"--host {host}: plaintext is only allowed on a loopback address; "
            "give --tls-cert and --tls-key, or --insecure to accept plaintext"
        )
    tokens = tokens or TokenBook(store)
    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="rpc"),
        interceptors=[
            AuthInterceptor(
                tokens,
                public_read=public_read,
                limiter=RateLimiter(rate_limit) if rate_limit > 0 else None,
            )
        ],
        options=[
            ("grpc.max_receive_message_length", max_message_bytes),
            ("grpc.max_send_message_length", 64 << 20),
            ("grpc.so_reuseport", 0),
        ],
    )
    collector_pb2_grpc.add_CollectorServicer_to_server(CollectorService(store), server)
    collector_pb2_grpc.add_AdminServicer_to_server(AdminService(tokens), server)
    health_servicer = health.HealthServicer()
    for name in ("", *SERVICE_NAMES):
        health_servicer.set(name, health_pb2.HealthCheckResponse.SERVING)
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    reflection.enable_server_reflection(
        (*SERVICE_NAMES, health.SERVICE_NAME, reflection.SERVICE_NAME), server
    )
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
    return server, bound


def serve(
    db_path: Path,
    *,
    host: str = "127.0.0.1",
    port: int = DEFAULT_PORT,
    public_read: bool = False,
    tls: TlsFiles | None = None,
    insecure: bool = False,
    rate_limit: float = DEFAULT_RATE_LIMIT,
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
    on_ready: Callable[[str], None] | None = None,
    stop: threading.Event | None = None,
) -> None:
    """Run a collector until SIGTERM/SIGINT (or `stop` is set), then stop gracefully.

    While it runs, a local admin credential (a fresh secret and a loopback address)
    sits next to the database, readable only by its owner, so `gpubench-collector
    token ...` can administer the live collector; it is removed on stop.
    """
    stop = stop or threading.Event()
    store = Store(db_path)
    credential = local_admin.credential_path(db_path)
    try:
        secret = new_secret()
        tokens = TokenBook(store, local_admin_secret=secret)
        server, bound = create_server(
            store, host=host, port=port, tokens=tokens, public_read=public_read, tls=tls,
            insecure=insecure, rate_limit=rate_limit, max_message_bytes=max_message_bytes,
        )
        if tls is None and is_loopback(host):
            admin_address = bind_address(host if host != "localhost" else "127.0.0.1", bound)
        else:  # token commands reach a TLS or public listener through a plaintext loopback port
            admin_port = server.add_insecure_port("127.0.0.1:0")
            admin_address = f"127.0.0.1:{admin_port}"
        server.start()
        local_admin.write(credential, address=admin_address, secret=secret)
        _on_signals(stop)
        if on_ready:
            on_ready(bind_address(host, bound))
        stop.wait()
        # Stop accepting, let in-flight calls finish, then checkpoint and close the file.
        server.stop(STOP_GRACE_S).wait()
        tokens.flush()
    finally:
        local_admin.remove(credential)
        store.close()


def _on_signals(stop: threading.Event) -> None:
    if threading.current_thread() is not threading.main_thread():
        return  # embedded (tests, the demo): the caller sets `stop`
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
