"""The collector's gRPC server: services, health, reflection, TLS, and the serve loop.

`serve` runs either one process that does everything, or (frontends > 1) the
process that owns the database plus front-end processes sharing the port
(collector.owner, collector.frontend).
"""

from __future__ import annotations

import contextlib
import os
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
from gpubench.collector.door import Door
from gpubench.collector.durability import storage_error
from gpubench.collector.errors import StorageFull
from gpubench.collector.forwarded import TrustedProxies
from gpubench.collector.service import AdminService, CollectorService
from gpubench.collector.stats import SubmissionCounts
from gpubench.collector.store import Store
from gpubench.collector.transport import (  # noqa: F401 - TlsFiles, is_loopback: public here too
    DEFAULT_MAX_MESSAGE_BYTES,
    DEFAULT_WORKERS,
    MAX_CONCURRENT_CALLS,
    MAX_CONCURRENT_STREAMS,
    MAX_CONNECTIONS,
    STOP_GRACE_S,
    Serving,
    TlsFiles,
    add_health_and_reflection,
    bind_address,
    check_plaintext,
    check_port,
    door_limits,
    is_loopback,
    listen_behind,
    open_door,
    server_options,
    set_serving,
)
from gpubench.errors import GpubenchError
from gpubench.v1 import collector_pb2_grpc

DEFAULT_RATE_LIMIT = 50.0  # submissions per second per token
# How often the owner of a multi-process collector checks on its front-ends (s).
WATCH_INTERVAL_S = 0.25
# --frontends auto never starts more than this many: the owner's one writer is the
# next limit, and more processes than that only cost memory.
MAX_AUTO_FRONTENDS = 4


def make_gate(
    tokens: TokenBook, *, public_read: bool, rate_limit: float,
    auth_failures_per_minute: float = DEFAULT_AUTH_FAILURES_PER_MINUTE,
    counts: SubmissionCounts | None = None, trusted_proxies: Sequence[str] = (),
) -> Gate:
    """The token check, the rate limit and the failed-authentication limit every call of
    one collector goes through (0: no limit); submissions they refuse are counted in
    `counts` (the store's, for the Stats call). Calls from `trusted_proxies` are counted
    by the client address they forward (collector.forwarded)."""
    limiter = RateLimiter(rate_limit) if rate_limit > 0 else None
    failures = AuthFailures(auth_failures_per_minute) if auth_failures_per_minute > 0 else None
    return Gate(tokens, public_read=public_read, limiter=limiter, failures=failures,
                counts=counts, proxies=TrustedProxies(trusted_proxies))


class CollectorServer:
    """A single-process collector's gRPC server and the door in front of it
    (collector.door): started, stopped and given more ports together."""

    def __init__(self, server: grpc.Server, door: Door) -> None:
        self.grpc = server
        self.door = door

    def start(self) -> None:
        """Serve: gRPC, then the door lets connections in."""
        self.grpc.start()
        self.door.start_thread()

    def add_insecure_port(self, address: str) -> int:
        """A plaintext port straight to gRPC, past the door (the loopback admin port)."""
        return self.grpc.add_insecure_port(address)

    def stop(self, grace: float | None) -> threading.Event:
        """Stop taking connections at once, let calls in flight finish for `grace`
        seconds (None: cancel them), then close the rest; the event is set when done."""
        self.door.stop_thread_accepting()
        stopped = self.grpc.stop(grace)
        done = threading.Event()

        def finish() -> None:
            stopped.wait()
            self.door.close_thread()
            done.set()

        threading.Thread(target=finish, name="collector-stop", daemon=True).start()
        return done


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
    gate: Gate | None = None,
    auth_failures_per_minute: float = DEFAULT_AUTH_FAILURES_PER_MINUTE,
    trusted_proxies: Sequence[str] = (),
    max_concurrent_streams: int = MAX_CONCURRENT_STREAMS,
    max_connections: int = MAX_CONNECTIONS,
    max_concurrent_calls: int = MAX_CONCURRENT_CALLS,
) -> tuple[CollectorServer, int]:
    """A collector server listening on host:port (0: any free port), not yet started.

    Registers the Collector and Admin services behind the token interceptor, the
    standard health service and server reflection, behind the door that admits
    connections (collector.door). Plaintext is refused on any address but loopback
    unless `insecure`. `gate` (default: one made of `tokens`, `public_read`,
    `rate_limit` and `auth_failures_per_minute`) lets other callers share its limits.
    The max_ arguments limit what one process takes at once (collector.transport).
    """
    check_plaintext(host, tls, insecure)
    tokens = tokens or TokenBook(store)
    gate = gate or make_gate(tokens, public_read=public_read, rate_limit=rate_limit,
                             auth_failures_per_minute=auth_failures_per_minute,
                             counts=store.submissions, trusted_proxies=trusted_proxies)
    door = open_door(host, port, tls=tls is not None, limits=door_limits(max_connections))
    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="rpc"),
        interceptors=[AuthInterceptor(gate, peer_of=door.peer_of)],
        options=server_options(max_message_bytes, max_concurrent_streams=max_concurrent_streams,
                               max_connections=max_connections),
        maximum_concurrent_rpcs=max_concurrent_calls,
    )
    collector_pb2_grpc.add_CollectorServicer_to_server(CollectorService(store), server)
    collector_pb2_grpc.add_AdminServicer_to_server(AdminService(tokens, store), server)
    health = add_health_and_reflection(server)
    serving = Serving(lambda now: set_serving(health, now))
    door.on_refusing = lambda refusing: serving.room(not refusing)
    listen_behind(server, door, tls)
    # NOT_SERVING while runs cannot be stored durably (a full disk), SERVING again after.
    store.durability.listen(lambda trouble: serving.durable(trouble is None))
    return CollectorServer(server, door), door.port


def default_frontends() -> int:
    """--frontends auto: one front-end process per usable core, at most MAX_AUTO_FRONTENDS;
    a single process where only one core is usable."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    cores = cores or 1
    return 1 if cores < 2 else min(cores, MAX_AUTO_FRONTENDS)


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
    frontends: int = 1,
    on_ready: Callable[[str], None] | None = None,
    stop: threading.Event | None = None,
    metrics: tuple[str, int] | None = None,
    on_metrics: Callable[[int], None] | None = None,
    trusted_proxies: Sequence[str] = (),
) -> None:
    """Run a collector until SIGTERM/SIGINT (or `stop` is set), then stop gracefully.

    With `frontends` > 1 this process owns the database and starts that many
    front-end processes listening on host:port (see collector.owner); otherwise it
    serves everything itself.

    While it runs, a local admin credential (a fresh secret and a loopback address)
    sits next to the database, readable only by its owner, so `gpubench-collector
    token ...` can administer the live collector; it is removed on stop.

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
    with _starting(db_path, "opening the database"):
        store = Store(db_path)
    credential = local_admin.credential_path(db_path)
    exporter = None
    try:
        if metrics is not None:
            from gpubench.collector.metrics import serve_store_metrics

            exporter = serve_store_metrics(store, *metrics)
            if on_metrics:
                on_metrics(exporter.port)
        secret = new_secret()
        tokens = TokenBook(store, local_admin_secret=secret)
        gate = make_gate(tokens, public_read=public_read, rate_limit=rate_limit,
                         counts=store.submissions, trusted_proxies=trusted_proxies)
        if frontends > 1:
            _serve_with_frontends(
                store, gate, credential, secret, host=host, port=port, tls=tls,
                max_message_bytes=max_message_bytes, frontends=frontends, on_ready=on_ready,
                stop=stop,
            )
            return
        server, bound = create_server(
            store, host=host, port=port, tokens=tokens, tls=tls, insecure=insecure,
            max_message_bytes=max_message_bytes, gate=gate,
        )
        if tls is None and is_loopback(host):
            admin_address = bind_address(host if host != "localhost" else "127.0.0.1", bound)
        else:  # token commands reach a TLS or public listener through a plaintext loopback port
            admin_port = server.add_insecure_port("127.0.0.1:0")
            admin_address = f"127.0.0.1:{admin_port}"
        server.start()
        with _starting(db_path, f"writing {credential}"):
            local_admin.write(credential, address=admin_address, secret=secret)
        _on_signals(stop)
        if on_ready:
            on_ready(bind_address(host, bound))
        stop.wait()
        # Stop accepting, let in-flight calls finish, then checkpoint and close the file.
        server.stop(STOP_GRACE_S).wait()
        tokens.flush()
    finally:
        if exporter is not None:
            exporter.stop()
        local_admin.remove(credential)
        store.close()


def _serve_with_frontends(
    store: Store, gate: Gate, credential: Path, secret: str, *, host: str, port: int,
    tls: TlsFiles | None, max_message_bytes: int, frontends: int,
    on_ready: Callable[[str], None] | None, stop: threading.Event,
) -> None:
    """The owner's part of `serve`: front-ends on host:port, local admin on loopback."""
    from gpubench.collector.owner import Dispatcher, Frontends

    # Token commands and imports come straight to this process, on a loopback port of
    # its own; the front-ends forward everything else here too.
    admin_server, admin_port = create_server(
        store, host="127.0.0.1", port=0, tokens=gate.tokens, max_message_bytes=max_message_bytes,
        gate=gate, max_workers=8,
    )
    admin_server.start()
    _on_signals(stop)
    pool: Frontends | None = None
    try:
        pool = Frontends(
            Dispatcher(store, gate), count=frontends, host=host, port=port, tls=tls,
            max_message_bytes=max_message_bytes,
        )
        bound = pool.start()
        with _starting(store.path, f"writing {credential}"):
            local_admin.write(credential, address=f"127.0.0.1:{admin_port}", secret=secret)
        if on_ready:
            on_ready(bind_address(host, bound))
        while not stop.wait(WATCH_INTERVAL_S):
            pool.watch()  # restarts a front-end that died; raises when starts keep failing
    finally:
        # Front-ends first (they finish their in-flight calls through us), then the rest.
        if pool is not None:
            pool.stop()
        admin_server.stop(STOP_GRACE_S).wait()
        gate.tokens.flush()


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
