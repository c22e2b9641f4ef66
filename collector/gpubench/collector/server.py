"""The collector's gRPC server: services, health, reflection, TLS, and the serve loop.

One process serves everything: gRPC's thread pool runs the calls, and a submission is
acknowledged once its DuckDB commit has returned (collector.store). Connections are
bounded by gRPC's own options (collector.transport): a handshake timeout, an idle
timeout, keepalive, a cap below the process's limit of open files; a public collector
sits behind a real proxy (docker/compose.yaml).
"""

from __future__ import annotations

import contextlib
import faulthandler
import signal
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent import futures
from pathlib import Path

import grpc

from gpubench.client import DEFAULT_PORT
from gpubench.collector import local_admin
from gpubench.collector.auth import (
    DEFAULT_AUTH_FAILURES_PER_MINUTE,
    AuthFailures,
    AuthInterceptor,
    Gate,
    RateLimiter,
    TokenBook,
    new_secret,
)
from gpubench.collector.durability import storage_error
from gpubench.collector.errors import StorageFull
from gpubench.collector.forwarded import TrustedProxies
from gpubench.collector.service import AdminService, CollectorService
from gpubench.collector.store import Store
from gpubench.collector.transport import (  # noqa: F401 - TlsFiles, is_loopback: public here too
    DEFAULT_MAX_MESSAGE_BYTES,
    DEFAULT_WORKERS,
    MAX_CONCURRENT_CALLS,
    STOP_GRACE_S,
    TlsFiles,
    add_health_and_reflection,
    bind_address,
    check_plaintext,
    check_port,
    is_loopback,
    listen,
    raise_open_files_limit,
    server_options,
    set_serving,
)
from gpubench.errors import GpubenchError
from gpubench.v1 import collector_pb2_grpc

SIGNAL_CHECK_S = 0.5  # how often the serving thread looks for a signal's stop
STOP_STUCK_S = 60.0  # a graceful stop still under way then is stuck: it says where

DEFAULT_RATE_LIMIT = 50.0  # submissions per second per token


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
    auth_failures_per_minute: float = DEFAULT_AUTH_FAILURES_PER_MINUTE,
    trusted_proxies: Sequence[str] = (),
    max_concurrent_calls: int = MAX_CONCURRENT_CALLS,
    max_connections: int | None = None,
) -> tuple[grpc.Server, int]:
    """A collector server listening on host:port (0: any free port), not yet started,
    and the port it listens on.

    Registers the Collector and Admin services behind the token interceptor, the
    standard health service (NOT_SERVING while runs cannot be stored durably) and
    server reflection. Plaintext is refused on any address but loopback unless
    `insecure`. Every call goes through the token check, the submission rate limit per
    token and the failed-authentication limit per address (0: no limit); submissions
    they refuse are counted in the store's counts (the Stats call). Calls from
    `trusted_proxies` are counted by the client address they forward
    (collector.forwarded). `max_concurrent_calls` bounds the calls in flight, and
    `max_connections` the connections open at once (None: the process's limit of open
    files less a reserve; collector.transport).
    """
    check_plaintext(host, tls, insecure)
    tokens = tokens or TokenBook(store)
    gate = Gate(
        tokens, public_read=public_read,
        limiter=RateLimiter(rate_limit) if rate_limit > 0 else None,
        failures=AuthFailures(auth_failures_per_minute) if auth_failures_per_minute > 0 else None,
        counts=store.submissions, proxies=TrustedProxies(trusted_proxies),
    )
    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="rpc"),
        interceptors=[AuthInterceptor(gate)],
        options=server_options(max_message_bytes, max_connections),
        maximum_concurrent_rpcs=max_concurrent_calls,
    )
    collector_pb2_grpc.add_CollectorServicer_to_server(CollectorService(store), server)
    collector_pb2_grpc.add_AdminServicer_to_server(AdminService(tokens, store), server)
    health = add_health_and_reflection(server)
    bound = listen(server, host, port, tls)
    # NOT_SERVING while runs cannot be stored durably (a full disk), SERVING again after.
    store.durability.listen(lambda trouble: set_serving(health, trouble is None))
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
    metrics: tuple[str, int] | None = None,
    on_metrics: Callable[[int], None] | None = None,
    trusted_proxies: Sequence[str] = (),
) -> None:
    """Run a collector until SIGTERM/SIGINT (or `stop` is set), then stop gracefully.

    While it runs, its gRPC server also listens on a Unix socket in a folder beside
    the database that only its owner can enter, with a fresh admin secret there
    (collector.local_admin), so `gpubench-collector token ...`, `backup` and `import`
    administer the live collector; the folder is removed on stop.

    `trusted_proxies`: the proxies whose x-forwarded-for names the client
    (collector.forwarded).

    `metrics` (host, port): also serve /metrics (Prometheus) there, from this process,
    which holds the database (collector.metrics); `on_metrics` is told its port.
    """
    stop = stop or threading.Event()
    check_plaintext(host, tls, insecure)
    check_port(host, port)
    if tls is not None:
        tls.credentials()  # unreadable files fail here, before anything starts
    # Each connection holds a descriptor: as many as the system lets this process have
    # (the connections are capped below it: collector.transport.connection_cap).
    raise_open_files_limit()
    with _starting(db_path, "opening the database"):
        store = Store(db_path)
    exporter = None
    try:
        if metrics is not None:
            from gpubench.collector.metrics import serve_store_metrics

            exporter = serve_store_metrics(store, *metrics)
            if on_metrics:
                on_metrics(exporter.port)
        secret = new_secret()
        tokens = TokenBook(store, local_admin_secret=secret)
        server, bound = create_server(
            store, host=host, port=port, tokens=tokens, public_read=public_read, tls=tls,
            insecure=insecure, rate_limit=rate_limit, max_message_bytes=max_message_bytes,
            trusted_proxies=trusted_proxies,
        )
        with _starting(db_path, f"making {local_admin.admin_folder(db_path)}"):
            admin_socket = local_admin.open_folder(db_path, secret)
        if not server.add_insecure_port(admin_socket):
            raise GpubenchError(f"{admin_socket}: cannot listen there")
        server.start()
        _on_signals(stop)
        if on_ready:
            on_ready(bind_address(host, bound))
        # Woken now and then, not only by the event: a signal that another thread took
        # runs its handler (which sets `stop`) only once this thread runs Python again.
        while not stop.wait(SIGNAL_CHECK_S):
            pass
        # A stop that takes past STOP_STUCK_S says where it is: every thread's stack on
        # stderr, for whoever must kill it.
        faulthandler.dump_traceback_later(STOP_STUCK_S, exit=False)
        # Stop accepting, let in-flight calls finish, then checkpoint and close the file.
        server.stop(STOP_GRACE_S).wait()
        tokens.flush()
    finally:
        if exporter is not None:
            exporter.stop()
        local_admin.remove(db_path)
        store.close()
        if threading.current_thread() is not threading.main_thread():  # else armed to exit
            faulthandler.cancel_dump_traceback_later()  # embedded: the caller's process goes on


@contextlib.contextmanager
def _starting(db_path: Path, doing: str) -> Iterator[None]:
    """A failure of the storage while the collector starts (a full disk) as one line
    that says what to do, rather than a traceback at every restart."""
    try:
        yield
    except Exception as exc:  # the storage's (collector.durability tells), or raised again
        trouble = storage_error(exc, doing)
        if trouble is None:
            raise
        reason = "no space left on device" if isinstance(trouble, StorageFull) \
            else str(exc).splitlines()[0]
        raise GpubenchError(
            f"{db_path}: cannot start the collector: {reason} ({doing}); free space on "
            "its disk (or repair it), then start it again: every acknowledged run is kept"
        ) from None


def _on_signals(stop: threading.Event) -> None:
    if threading.current_thread() is not threading.main_thread():
        return  # embedded (tests, the demo): the caller sets `stop`
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
