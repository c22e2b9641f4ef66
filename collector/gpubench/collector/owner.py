"""The multi-process collector's owner: the process that holds the DuckDB file.

One Python process spends about 1.5 ms of CPU per submission, mostly holding the
interpreter lock, so it cannot use a second core. With `serve --frontends N` the
owner starts N front-end processes (collector.frontend) that listen on the same
host:port (SO_REUSEPORT: the kernel spreads connections over them). They do the
stateless, CPU-heavy part of a call (gRPC, protobuf, validation, the runs-table
row) and forward the rest here over a Unix socket, as protobuf messages.

The owner keeps all state and every guarantee: the token check (tokens live in
the database, so a revocation takes effect at once), the per-token rate limit,
idempotent resubmission, acknowledgement only after the commit, outlier rescoring.
A forwarded call other than SubmitRun is answered by the same servicer code a
single-process collector runs, through `Gate.guarded`, so its status codes and
messages are the same.

The wire (collector.ipc; the messages in protos/gpubench/v1/collector_ipc.proto):
each message is a 4-byte big-endian length, then one protobuf message. The socket
lives in a folder of mode 0700; on every connection the owner sends a Challenge and
the front-end must answer with the Proof of the secret the owner gave it on stdin
(HMAC-SHA256, compared with hmac.compare_digest), or the connection is closed. So is
one whose frame announces more than `ipc.frame_limit` bytes. A front-end opens a
control connection, then a pool of connections, each carrying one request at a time:
  control:            Started(index, pid), then Ready(port) or Failed(message);
                      owner -> front-end: Health(serving) whenever the store's
                      writes stop or start being durable (a full disk)
  front-end -> owner: AuthRequest(authorization, peer), before a front-end parses a
                      submission of a token it has not seen accepted lately,
                      SubmitRequest(authorization, peer, row | problems),
                      CallRequest(method, request bytes, authorization, peer)
                      (peer: the caller's address, for the failed-authentication limit)
  owner -> front-end: a Reply: accepted, the SubmitRunResponse, the response's bytes,
                      or refused (status code, details)
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import selectors
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, NoReturn, cast

import grpc
from google.protobuf import message_factory

from gpubench.collector import ipc, validation
from gpubench.collector.auth import Access, Gate, access_of, bearer_secret
from gpubench.collector.service import AdminService, CollectorService
from gpubench.collector.statuses import answer_of, status_of
from gpubench.collector.store import Store
from gpubench.collector.transport import STOP_GRACE_S, Refusal, TlsFiles, bind_address
from gpubench.errors import GpubenchError
from gpubench.v1 import collector_ipc_pb2, collector_pb2

log = logging.getLogger(__name__)

# How long a front-end may take to start and listen (s).
START_TIMEOUT_S = 60.0
# Front-ends that die are restarted, with one backoff for the collector as a whole: the
# first death at once, then after a delay that doubles with each front-end death in a
# row (whichever front-end it is), up to RESTART_BACKOFF_MAX_S. But never while no
# front-end serves: then one starts at once, whatever the backoff says (the owner and the
# data are fine, and nobody could reach them). A collector that has had no death for
# STABLE_S starts the count again. It stops only when front-ends cannot even start:
# GIVE_UP_AFTER starts in a row that never reached listening (a port taken, a TLS file
# gone), saying so; deaths of front-ends that served never stop it.
RESTART_BACKOFF_FIRST_S = 1.0
RESTART_BACKOFF_MAX_S = 30.0
STABLE_S = 60.0
GIVE_UP_AFTER = 10
# Threads answering forwarded calls other than SubmitRun (reads may take a while).
CALL_WORKERS = 8


class ForwardedContext:
    """What the collector's servicers use of a grpc.ServicerContext, for a forwarded call."""

    def __init__(self, authorization: str | None, peer: str | None) -> None:
        self._metadata = () if authorization is None else (("authorization", authorization),)
        self._peer = peer
        self._hold_s = 0.0

    def time_remaining(self) -> None:
        """Unknown here: the front-end holds an answer within its call's deadline."""
        return None

    def hold_answer(self, seconds: float) -> None:
        """Have the front-end hold the answer for `seconds` (a thread here must not)."""
        self._hold_s = seconds

    def peer(self) -> str | None:
        """The caller's address, as the front-end saw it."""
        return self._peer

    def invocation_metadata(self) -> tuple[tuple[str, str], ...]:
        """The call's authorization entry, as the front-end received it."""
        return self._metadata

    def abort(self, code: grpc.StatusCode, details: str) -> NoReturn:
        """End the call with a status: raised to the dispatcher, sent back as is."""
        raise Refusal(code, details, self._hold_s)


class Dispatcher:
    """Answers what front-ends forward, with the code a single-process collector runs."""

    def __init__(self, store: Store, gate: Gate) -> None:
        self.store = store
        self._store = store
        self._gate = gate
        # Full method name -> the servicer method behind the gate, taking request bytes.
        self._methods: dict[str, Callable[[bytes, Any], Any]] = {}
        services = {
            "Collector": CollectorService(store),
            "Admin": AdminService(gate.tokens, store),
        }
        for name, servicer in services.items():
            descriptor = collector_pb2.DESCRIPTOR.services_by_name[name]
            for method in descriptor.methods:
                full = f"/{descriptor.full_name}/{method.name}"
                self._methods[full] = self._gate.guarded(
                    getattr(servicer, method.name), access_of(full),
                    message_factory.GetMessageClass(method.input_type),
                )

    def authenticate(self, authorization: str | None, peer: str | None) -> None:
        """A front-end's check of a token before it parses a submission: raises Refusal
        unless the token may write (without using up a submission of the rate limit;
        `submit` checks the token again and takes one)."""
        secret = bearer_secret(() if authorization is None else (("authorization", authorization),))
        try:
            self._gate.check(Access.WRITE, secret, peer)
        except Refusal as refused:  # a submission refused: counted (collector.stats)
            self._store.submissions.refuse(refused)
            raise

    def submit(
        self, authorization: str | None, peer: str | None, row: dict[str, Any] | None,
        problems: list[tuple[str, str]],
    ) -> Future:
        """SubmitRun's owner half: token and rate limit, then the group commit.

        The front-end validated the run and made its row (`problems` when invalid).
        Raises Refusal at once; otherwise the store's future, resolved after the commit.
        """
        secret = bearer_secret(() if authorization is None else (("authorization", authorization),))
        caller = self._gate.check(Access.SUBMIT, secret, peer)
        assert caller is not None  # None only for a tokenless read, never for SUBMIT
        if row is not None and row["published"] and not caller.admin:
            problems = [("run.published", validation.PUBLISHED_BY_OPERATORS)]
        if problems or row is None:
            # status_of is None for none of gpubench's own errors (GpubenchError).
            status = status_of(validation.InvalidRun(problems))
            invalid = Refusal(*cast("tuple[grpc.StatusCode, str]", status))
            self._store.submissions.refuse(invalid)
            raise invalid
        row["submitter"] = caller.name
        try:
            return self._store.submit_row(row)
        except GpubenchError as exc:  # the store is closing
            raise Refusal(*cast("tuple[grpc.StatusCode, str]", status_of(exc))) from exc

    def call(
        self, method: str, request: bytes, authorization: str | None, peer: str | None
    ) -> bytes:
        """Any other method: the servicer's answer, serialised; raises Refusal."""
        behavior = self._methods.get(method)
        if behavior is None:  # front-ends only forward the methods they registered
            raise Refusal(grpc.StatusCode.UNIMPLEMENTED, f"method {method} not implemented")
        # The token is checked before the bytes are parsed (Gate.guarded).
        return behavior(request, ForwardedContext(authorization, peer)).SerializeToString()


class _Link:
    """The owner's end of one authenticated connection of a front-end."""

    __slots__ = ("sock", "frames", "limit")

    def __init__(self, sock: socket.socket, limit: int) -> None:
        self.sock = sock
        self.frames = ipc.Frames(limit)
        self.limit = limit

    def fileno(self) -> int:
        return self.sock.fileno()

    def send(self, frame: bytes) -> None:
        """Write a framed message (from any thread; one reply at a time per link)."""
        with contextlib.suppress(OSError):  # the front-end is gone: nobody to tell
            self.sock.sendall(frame)

    def refuse(self, exc: BaseException) -> None:
        """Answer the link's request with the status `exc` ends it with (a bug: INTERNAL,
        logged, as in one process)."""
        code, details = answer_of(exc, "a forwarded call")
        self.send(ipc.refused(code, details, self.limit, getattr(exc, "hold_s", 0.0)))


class _Hub:
    """The owner's end of every front-end connection, read by one thread.

    Each connection of a front-end carries at most one request at a time, so a
    reply needs no request id: the front-end's call waiting on that connection
    reads it. One epoll loop here reads them all; a submission is answered from
    the store's writer thread right after its commit.
    """

    def __init__(self, dispatcher: Dispatcher, limit: int) -> None:
        self._dispatcher = dispatcher
        self._limit = limit
        self._accepted = ipc.accepted(limit)
        self._calls = ThreadPoolExecutor(CALL_WORKERS, thread_name_prefix="forwarded")
        self._selector = selectors.DefaultSelector()
        self._waker_in, self._waker_out = socket.socketpair()
        self._selector.register(self._waker_in, selectors.EVENT_READ, None)
        self._joining: list[_Link] = []
        self._lock = threading.Lock()
        self._closing = False
        # Front-end index -> the port it listens on (or a GpubenchError), from its
        # control connection; and each control connection's future (a restarted
        # front-end's, not its predecessor's, whose connection may close late).
        self.started: dict[int, Future] = {}
        self._control: dict[_Link, Future] = {}
        # What the front-ends' health services say (the store's durability), and the
        # lock that keeps each control connection's messages whole and in order.
        self._serving = True
        self._telling = threading.Lock()
        self._thread = threading.Thread(target=self._loop, name="owner-hub", daemon=True)
        self._thread.start()

    def add(self, sock: socket.socket) -> None:
        """Start reading a new connection (one that passed the handshake)."""
        with self._lock:
            self._joining.append(_Link(sock, self._limit))
        self._waker_out.send(b"x")

    def expect(self, index: int) -> Future:
        """A fresh future for front-end `index`'s start (before it is spawned)."""
        with self._lock:
            future = self.started[index] = Future()
        return future

    def set_serving(self, serving: bool) -> None:
        """Tell every front-end what its health service says: Health(serving)."""
        frame = ipc.framed(ipc.health(serving), self._limit)
        with self._telling:
            self._serving = serving
            with self._lock:
                controls = list(self._control)
            for control in controls:
                control.send(frame)

    def close(self) -> None:
        """Stop reading; close every connection."""
        self._closing = True
        self._waker_out.send(b"x")
        self._thread.join()
        self._calls.shutdown(wait=True)

    def _loop(self) -> None:
        while not self._closing:
            for key, _ in self._selector.select():
                if key.data is None:
                    self._waker_in.recv(4096)
                    with self._lock:
                        joining, self._joining = self._joining, []
                    for link in joining:
                        self._selector.register(link, selectors.EVENT_READ, link)
                    continue
                self._read(key.data)
        for key in list(self._selector.get_map().values()):
            if key.data is not None:
                key.data.sock.close()
        self._selector.close()

    def _read(self, link: _Link) -> None:
        """Read what a readable connection has; handle each message it completes."""
        try:
            data = link.sock.recv(ipc.READ_BYTES)
            if not data:
                raise ConnectionError("closed")
            for frame in link.frames.feed(data):
                self._handle(link, ipc.parse(collector_ipc_pb2.FrontendMessage, frame))
        except ipc.FrameError as exc:  # a broken front-end: not one to keep talking to
            log.warning("closed a front-end's connection to the owner: %s", exc)
            self._drop(link)
        except OSError:
            self._drop(link)
        except Exception:  # a bug: this thread must go on reading the other connections
            log.exception("closed a front-end's connection to the owner after an error")
            self._drop(link)

    def _drop(self, link: _Link) -> None:
        self._selector.unregister(link)
        link.sock.close()
        started = self._control.pop(link, None)
        if started is not None and not started.done():
            started.set_exception(GpubenchError("it exited before listening"))

    def _handle(self, link: _Link, message: collector_ipc_pb2.FrontendMessage) -> None:
        kind = message.WhichOneof("kind")
        if kind == "submit":
            try:
                authorization, peer = ipc.caller_of(message.submit)
                row, problems = ipc.submission_of(message.submit)
                future = self._dispatcher.submit(authorization, peer, row, problems)
            except Exception as exc:  # refused at once (the token, the run)
                link.refuse(exc)
                return
            future.add_done_callback(lambda done: self._acknowledge(link, done))
        elif kind == "auth":  # before a front-end parses a run
            try:
                self._dispatcher.authenticate(*ipc.caller_of(message.auth))
            except Exception as exc:
                link.refuse(exc)
                return
            link.send(self._accepted)
        elif kind == "call":
            self._calls.submit(self._answer_call, link, message.call)
        elif kind == "started":  # a front-end's control connection
            with self._lock:
                started = self.started.get(message.started.index)
                if started is None:
                    raise ipc.FrameError(f"no front-end {message.started.index} was started")
                self._control[link] = started
            with self._telling:  # a front-end starts SERVING: tell it if that is wrong
                if not self._serving:
                    link.send(ipc.framed(ipc.health(False), self._limit))
        elif kind in ("ready", "failed"):
            started = self._control.get(link)
            if started is not None and not started.done():
                if kind == "ready":
                    started.set_result(message.ready.port)
                else:
                    started.set_exception(GpubenchError(message.failed.message))
        else:  # a proof after the handshake
            raise ipc.FrameError(f"a {kind} message out of place")

    @staticmethod
    def _acknowledge(link: _Link, done: Future) -> None:
        """Reply to a submission once the store has it (or refused it)."""
        try:
            frame = ipc.acknowledged(done.result(), link.limit)
        except Exception as exc:  # a conflict, a closing store, a full disk
            link.refuse(exc)
            return
        link.send(frame)

    def _answer_call(self, link: _Link, call: collector_ipc_pb2.CallRequest) -> None:
        try:
            response = self._dispatcher.call(call.method, call.request, *ipc.caller_of(call))
            frame = ipc.response(response, link.limit)
        except Exception as exc:
            link.refuse(exc)
            return
        link.send(frame)


def reserve_port(host: str, port: int) -> tuple[socket.socket, int]:
    """A socket holding host:port (0: a free port) for the front-ends, and the port.

    First bound without SO_REUSEPORT, so that a port anything else listens on is
    refused as in single-process mode (even another group of front-ends); then
    held with SO_REUSEPORT and never listened on, so the front-ends can share it
    and the port stays reserved while one of them restarts.
    """
    address = bind_address(host, port)
    try:
        family, kind, proto, _, sockaddr = socket.getaddrinfo(
            host.strip("[]"), port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
        with socket.socket(family, kind, proto) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind(sockaddr)
            sockaddr = (sockaddr[0], probe.getsockname()[1], *sockaddr[2:])
        held = socket.socket(family, kind, proto)
        held.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        held.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        held.bind(sockaddr)
    except OSError as exc:
        raise GpubenchError(f"--host/--port {address}: cannot listen ({exc.strerror})") from exc
    return held, held.getsockname()[1]


@dataclass
class _Frontend:
    index: int
    process: subprocess.Popen
    state: str = "starting"  # starting (spawned, not yet listening), serving, waiting
    started_at: float = field(default_factory=time.monotonic)
    restart_at: float = 0.0  # while waiting: when it starts again
    last_exit: str = ""


class Frontends:
    """The owner's front-end processes: started, watched, restarted, stopped.

    A restart never blocks the thread that calls `watch` (the serve loop's): `watch`
    looks in on each front-end, and one that is starting is seen listening at a later
    look.
    """

    # How a front-end process is started (its settings come on stdin).
    command = (sys.executable, "-m", "gpubench.collector.frontend")

    def __init__(
        self, dispatcher: Dispatcher, *, count: int, host: str, port: int,
        tls: TlsFiles | None, max_message_bytes: int,
        restart_backoff_s: tuple[float, float] = (RESTART_BACKOFF_FIRST_S,
                                                  RESTART_BACKOFF_MAX_S),
        stable_s: float = STABLE_S, give_up_after: int = GIVE_UP_AFTER,
    ) -> None:
        self._count = count
        self._backoff_first_s, self._backoff_max_s = restart_backoff_s
        self._stable_s = stable_s
        self._give_up_after = give_up_after
        self._deaths = 0  # front-end deaths in a row, of any front-end (the one backoff)
        self._last_death = 0.0
        self._failed_starts = 0  # starts in a row that never reached listening
        self._host = host
        self._port = port
        self._tls = tls
        self._max_message_bytes = max_message_bytes
        self._folder = tempfile.mkdtemp(prefix="gpubench-collector-")  # mode 0700
        self._address = os.path.join(self._folder, "owner.sock")
        self._secret = ipc.new_secret()
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._listener.bind(self._address)
        self._listener.listen(socket.SOMAXCONN)  # front-ends open their links in bursts
        self._hub = _Hub(dispatcher, ipc.frame_limit(max_message_bytes))
        # The front-ends' health follows the store's durability (NOT_SERVING: disk full).
        self._unlisten = dispatcher.store.durability.listen(
            lambda trouble: self._hub.set_serving(trouble is None)
        )
        self._frontends: list[_Frontend] = []
        self._held: socket.socket | None = None
        self._stopping = False
        threading.Thread(target=self._accept, name="owner-accept", daemon=True).start()

    @property
    def socket_path(self) -> str:
        """The Unix socket the front-ends connect to, in a folder of mode 0700."""
        return self._address

    @property
    def pids(self) -> list[int]:
        """The front-ends' process ids."""
        return [f.process.pid for f in self._frontends]

    @property
    def serving_pids(self) -> list[int]:
        """The process ids of the front-ends that listen now (as last seen by `watch`)."""
        return [f.process.pid for f in self._frontends if f.state == "serving"]

    def start(self) -> int:
        """Start every front-end and wait until each listens; the port they share."""
        self._held, self._port = reserve_port(self._host, self._port)
        self._frontends = [_Frontend(i, self._spawn(i)) for i in range(self._count)]
        for frontend in self._frontends:
            self._await_ready(frontend)
            frontend.state = "serving"
        return self._port

    def watch(self) -> None:
        """Look in on every front-end: one that died is restarted (see
        RESTART_BACKOFF_FIRST_S), one that started is serving; raise GpubenchError after
        `give_up_after` starts in a row that failed. Called every WATCH_INTERVAL_S."""
        now = time.monotonic()
        if self._deaths and now - self._last_death >= self._stable_s:
            self._deaths = 0  # no death for a good while: a new run of them
        for frontend in self._frontends:
            if self._stopping:
                return
            if frontend.state == "starting":
                self._look_at_start(frontend)
            elif frontend.state == "serving":
                code = frontend.process.poll()
                if code is not None:
                    self._died(frontend, _exit_text(code))
        waiting = sorted((f for f in self._frontends if f.state == "waiting"),
                         key=lambda f: f.restart_at)
        if waiting and not any(f.state in ("serving", "starting") for f in self._frontends):
            waiting[0].restart_at = now  # nothing serves: one starts now, whatever the backoff
        for frontend in waiting:
            if not self._stopping and time.monotonic() >= frontend.restart_at:
                self._restart(frontend)

    def _died(self, frontend: _Frontend, how: str) -> None:
        """Count a serving front-end's death and schedule its restart."""
        now = time.monotonic()
        self._deaths += 1
        self._last_death = now
        frontend.last_exit = how
        others = sum(f.state == "serving" for f in self._frontends if f is not frontend)
        delay = 0.0 if self._deaths == 1 or not others else min(
            self._backoff_max_s, self._backoff_first_s * 2 ** (self._deaths - 2))
        meanwhile = (f"{others} other front-end(s) serve meanwhile" if others else
                     "no other front-end serves: restarting one now")
        log.warning("front-end %d (pid %d) exited with %s; restarting it in %.3g s (%d "
                    "front-end exit(s) in a row); %s", frontend.index, frontend.process.pid,
                    how, delay, self._deaths, meanwhile)
        frontend.state, frontend.restart_at = "waiting", now + delay

    def _restart(self, frontend: _Frontend) -> None:
        """Start a front-end again (without waiting for it to listen)."""
        frontend.state = "starting"
        frontend.started_at = time.monotonic()
        frontend.process = self._spawn(frontend.index)

    def _look_at_start(self, frontend: _Frontend) -> None:
        """A starting front-end that listens now is serving; one that exited or is past
        START_TIMEOUT_S is a failed start."""
        started = self._hub.started[frontend.index]
        failure = None
        if started.done():
            try:
                started.result()
            except GpubenchError as exc:
                failure = str(exc)
            else:
                frontend.state = "serving"
                self._failed_starts = 0
                log.warning("front-end %d (pid %d) serves again, %.1f s after its start",
                            frontend.index, frontend.process.pid,
                            time.monotonic() - frontend.started_at)
                return
        elif frontend.process.poll() is not None:
            failure = f"it exited before listening ({_exit_text(frontend.process.poll())})"
        elif time.monotonic() - frontend.started_at > START_TIMEOUT_S:
            failure = f"it did not listen within {START_TIMEOUT_S:g} s"
        if failure is None:
            return
        if frontend.process.poll() is None:
            frontend.process.kill()
            frontend.process.wait()
        self._failed_starts += 1
        if self._failed_starts >= self._give_up_after:
            raise GpubenchError(
                f"front-ends failed to start {self._failed_starts} times in a row (last: "
                f"front-end {frontend.index}: {failure}); giving up: stopping the collector")
        now = time.monotonic()
        others = any(f.state == "serving" for f in self._frontends if f is not frontend)
        delay = min(self._backoff_max_s, self._backoff_first_s * 2 ** (self._failed_starts - 1))
        log.warning("front-end %d failed to start: %s; trying again in %.3g s (%d failed "
                    "start(s) in a row; the collector stops after %d)%s", frontend.index,
                    failure, delay, self._failed_starts, self._give_up_after,
                    "" if others else "; no front-end serves meanwhile")
        frontend.state, frontend.restart_at = "waiting", now + delay

    def stop(self) -> None:
        """Stop the front-ends gracefully (they finish in-flight calls), then the links."""
        self._stopping = True
        self._unlisten()
        for frontend in self._frontends:
            with contextlib.suppress(ProcessLookupError):
                frontend.process.send_signal(signal.SIGTERM)
        for frontend in self._frontends:
            try:
                frontend.process.wait(STOP_GRACE_S + 5.0)
            except subprocess.TimeoutExpired:
                frontend.process.kill()
                frontend.process.wait()
        with contextlib.suppress(OSError):  # wakes the accepting thread
            self._listener.shutdown(socket.SHUT_RDWR)
        self._listener.close()
        self._hub.close()
        if self._held is not None:
            self._held.close()
        shutil.rmtree(self._folder, ignore_errors=True)

    def _spawn(self, index: int) -> subprocess.Popen:
        config = {
            "index": index, "host": self._host, "port": self._port,
            "tls_cert": str(self._tls.cert) if self._tls else None,
            "tls_key": str(self._tls.key) if self._tls else None,
            "max_message_bytes": self._max_message_bytes,
            "owner_address": self._address, "secret": self._secret.hex(),
        }
        self._hub.expect(index)
        process = subprocess.Popen(
            list(self.command), stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True,
        )
        assert process.stdin is not None  # stdin=PIPE
        process.stdin.write(json.dumps(config))  # the secret never shows in argv
        process.stdin.close()
        return process

    def _await_ready(self, frontend: _Frontend) -> None:
        started = self._hub.started[frontend.index]
        deadline = time.monotonic() + START_TIMEOUT_S
        while not started.done():
            if frontend.process.poll() is not None or time.monotonic() > deadline:
                raise GpubenchError(
                    f"front-end {frontend.index} did not start "
                    f"({_exit_text(frontend.process.poll())})"
                )
            with contextlib.suppress(TimeoutError):
                started.result(0.1)
        try:
            started.result()
        except GpubenchError as exc:
            raise GpubenchError(f"front-end {frontend.index}: {exc}") from exc

    def _accept(self) -> None:
        while True:
            try:
                sock, _ = self._listener.accept()
            except OSError:  # closed: the collector is stopping
                return
            try:
                admitted = self._handshake(sock)
            except Exception:  # a bug: this thread must go on accepting front-ends
                log.exception("the handshake of a connection to the owner failed")
                admitted = False
            if admitted:
                self._hub.add(sock)
            else:
                sock.close()

    def _handshake(self, sock: socket.socket) -> bool:
        """Whether the peer proves the front-ends' secret (see collector.ipc)."""
        sock.settimeout(ipc.HANDSHAKE_TIMEOUT_S)
        try:
            nonce, challenge = ipc.challenge()
            sock.sendall(challenge)
            answer = ipc.receive(sock, collector_ipc_pb2.FrontendMessage, ipc.HANDSHAKE_LIMIT)
        except OSError as exc:  # gone, silent, or over the handshake's frame limit
            log.warning("closed a connection to the owner's socket that did not complete "
                        "the handshake (%s)", exc or type(exc).__name__)
            return False
        if not ipc.proves(answer, self._secret, nonce):
            log.warning("closed a connection to the owner's socket that did not prove the "
                        "front-ends' secret")
            return False
        sock.settimeout(None)
        return True


def _exit_text(code: int | None) -> str:
    if code is None:
        return "no exit yet"
    if code < 0:
        with contextlib.suppress(ValueError):
            return f"signal {signal.Signals(-code).name}"
    return f"exit code {code}"
