"""A front-end process of a multi-process collector, and its client of the owner.

Started by the owner (collector.owner) as `python -m gpubench.collector.frontend`,
its settings as JSON on stdin. It serves every Collector and Admin method, health
and reflection on the shared host:port. SubmitRun is parsed, validated and turned
into its runs-table row here (the CPU-heavy, stateless part), once the owner has
accepted its token; the owner checks the token again, stores the row and answers
after the commit. Every other method is forwarded as its request bytes and
answered by the owner, which checks the token before it parses them.

It is one asyncio loop (grpc.aio): a call waiting for the owner holds no thread,
and no call or reply is handed from one thread to another, which costs a
synchronous gRPC server's handler threads context switches on every call.

It speaks to the owner in collector.ipc's protocol: length-prefixed protobuf
messages (protos/gpubench/v1/collector_ipc.proto) over the owner's Unix socket, each
connection opened with the proof of the secret the owner passed on stdin.

It stops gracefully on SIGTERM/SIGINT (in-flight calls finish), and at once when
the owner's connection closes (the owner is gone: nothing could be stored).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import shutil
import signal
import socket
import sys
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import grpc

from gpubench.collector import ipc, validation
from gpubench.collector.door import Door
from gpubench.collector.rows import run_row
from gpubench.collector.statuses import answer_of
from gpubench.collector.transport import (
    DEFAULT_WORKERS,
    MAX_CONCURRENT_CALLS,
    STOP_GRACE_S,
    Refusal,
    Serving,
    TlsFiles,
    add_health_and_reflection_aio,
    door_limits,
    held_for,
    listen_behind,
    open_door,
    parse_request,
    server_options,
    set_serving_aio,
)
from gpubench.errors import GpubenchError
from gpubench.v1 import collector_ipc_pb2, collector_pb2

log = logging.getLogger(__name__)

OWNER_GONE = "collector shutting down (its database process is gone)"
# Connections to the owner at most (each one a file descriptor on both sides); more
# concurrent calls wait for one. As many as a single-process collector has handler threads.
MAX_LINKS = DEFAULT_WORKERS
# How long a token the owner accepted lets this front-end parse submissions before it
# asks again (s), and how many such tokens it remembers.
ACCEPTED_TTL_S = 10.0
ACCEPTED_MOST = 4096
# Once the owner is gone (s): no new connection is taken, and calls are answered
# UNAVAILABLE until none has come for OWNER_GONE_QUIET_S, at most OWNER_GONE_DRAIN_S;
# then every connection is closed.
OWNER_GONE_QUIET_S = 0.25
OWNER_GONE_DRAIN_S = 3.0


class OwnerClient:
    """Requests to the owner: a pool of connections, each with one request at a time.

    A connection is opened with the handshake (collector.ipc: the proof of the
    owner's secret), then read and written by the loop; a call takes an idle one or
    opens another, up to MAX_LINKS.
    A control connection carries Started/Ready/Failed, and the owner's health news; its
    end means the owner is gone.
    """

    def __init__(self, address: str, secret: bytes, limit: int) -> None:
        self._address = address
        self._secret = secret
        self._limit = limit
        self._idle: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []
        self._links = asyncio.Semaphore(MAX_LINKS)
        self._control = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._control.connect(address)
        nonce = ipc.nonce_of(ipc.receive(self._control, collector_ipc_pb2.OwnerMessage,
                                         ipc.HANDSHAKE_LIMIT))
        ipc.send(self._control, ipc.proof(secret, nonce), ipc.HANDSHAKE_LIMIT)
        self.gone = False  # set once the owner's control connection closed

    def tell(self, message: collector_ipc_pb2.FrontendMessage) -> None:
        """Send a control message (Started, Ready, Failed)."""
        ipc.send(self._control, message, self._limit)

    def watch(
        self, loop: asyncio.AbstractEventLoop, gone: asyncio.Event,
        on_health: Callable[[bool], None],
    ) -> None:
        """Set `gone` (in `loop`) when the owner's control connection closes; call
        `on_health(serving)` (in this watching thread) for each Health message."""

        def wait() -> None:
            with contextlib.suppress(OSError):  # closed, or broken (FrameError)
                while True:
                    message = ipc.receive(self._control, collector_ipc_pb2.OwnerMessage,
                                          self._limit)
                    if message.WhichOneof("kind") == "health":
                        on_health(message.health.serving)
            loop.call_soon_threadsafe(gone.set)

        threading.Thread(target=wait, name="owner-watch", daemon=True).start()

    async def ask(self, request: collector_ipc_pb2.FrontendMessage) -> Any:
        """Send a request and wait for its reply: see `ipc.outcome`; raises Refusal with
        the owner's status."""
        if self.gone:
            raise Refusal(grpc.StatusCode.UNAVAILABLE, OWNER_GONE)
        frame = ipc.framed(request, self._limit)
        async with self._links:
            return ipc.outcome(await self._exchange(frame))

    async def _exchange(self, frame: bytes) -> collector_ipc_pb2.Reply:
        try:
            link = self._idle.pop() if self._idle else await self._connect()
        except (OSError, asyncio.IncompleteReadError):  # refused, or closed in the handshake
            raise Refusal(grpc.StatusCode.UNAVAILABLE, OWNER_GONE) from None
        reader, writer = link
        try:
            writer.write(frame)
            message = await ipc.read(reader, collector_ipc_pb2.OwnerMessage, self._limit)
            if message.WhichOneof("kind") != "reply":
                raise ipc.FrameError(f"a {message.WhichOneof('kind')} where a reply belongs")
        except (asyncio.IncompleteReadError, OSError) as exc:
            writer.close()
            if isinstance(exc, ipc.FrameError):
                log.warning("closed a connection to the owner: %s", exc)
            raise Refusal(grpc.StatusCode.UNAVAILABLE, OWNER_GONE) from None
        except BaseException:  # cancelled mid-call: its late reply would answer the next one
            writer.close()
            raise
        self._idle.append(link)
        return message.reply

    async def _connect(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        reader, writer = await asyncio.open_unix_connection(self._address)
        try:
            nonce = ipc.nonce_of(await ipc.read(reader, collector_ipc_pb2.OwnerMessage,
                                                ipc.HANDSHAKE_LIMIT))
            writer.write(ipc.framed(ipc.proof(self._secret, nonce), ipc.HANDSHAKE_LIMIT))
        except BaseException:
            writer.close()
            raise
        return reader, writer


def _authorization(context: grpc.aio.ServicerContext) -> str | None:
    """The call's first authorization entry, checked by the owner as a single process would."""
    for key, value in context.invocation_metadata() or ():
        if key == "authorization":
            return str(value)
    return None


class AcceptedTokens:
    """The authorization entries the owner accepted lately, so that a front-end asks
    the owner before parsing a submission only once in a while per token.

    Only a filter against parsing garbage from strangers: the owner checks the token
    of every submission again (a token revoked meanwhile is refused there), so this
    needs no news of revocations.
    """

    def __init__(self, ttl_s: float = ACCEPTED_TTL_S, most: int = ACCEPTED_MOST) -> None:
        self._ttl_s = ttl_s
        self._most = most
        self._until: dict[str, float] = {}

    def __contains__(self, authorization: str | None) -> bool:
        until = self._until.get(authorization) if authorization is not None else None
        return until is not None and time.monotonic() < until

    def add(self, authorization: str) -> None:
        """Remember that the owner accepted `authorization` just now."""
        if len(self._until) >= self._most:  # many tokens at once: start over, asking again
            self._until.clear()
        self._until[authorization] = time.monotonic() + self._ttl_s


class Handlers:
    """The gRPC handlers of a front-end: SubmitRun prepared here, the rest forwarded.

    Every handler takes the request as bytes: a submission is parsed only after the
    owner has accepted its token, a forwarded call is parsed by the owner after the
    token check.
    """

    def __init__(self, owner: OwnerClient,
                 peer_of: Callable[[str | None], str | None] = lambda p: p) -> None:
        self._owner = owner
        self._accepted = AcceptedTokens()
        self._peer_of = peer_of  # a call's peer -> the door's client (collector.door)
        self.last_call = time.monotonic()  # when the latest call came in

    async def submit_run(
        self, data: bytes, context: grpc.aio.ServicerContext
    ) -> collector_pb2.SubmitRunResponse:
        """Check the token, then parse, validate and make the row; the owner checks the
        token (and the rate limit) again and stores it."""
        self.last_call = time.monotonic()
        authorization, peer = _authorization(context), self._peer_of(context.peer())
        try:
            if authorization not in self._accepted:
                await self._owner.ask(ipc.auth_request(authorization, peer))
                self._accepted.add(authorization)
            request = parse_request(collector_pb2.SubmitRunRequest, data)
            # Whether the caller may load a published run, only the owner knows (its token).
            problems = validation.problems(request.run, may_publish=True)
            row = None if problems else run_row(request.run, "")
            ack = await self._owner.ask(ipc.submit_request(authorization, peer, row, problems))
        except Exception as exc:  # a refusal with its code; a bug INTERNAL, logged
            await asyncio.sleep(held_for(exc, context.time_remaining()))
            await context.abort(*answer_of(exc, "SubmitRun"))
        return ack

    def forwarder(
        self, method: str
    ) -> Callable[[bytes, grpc.aio.ServicerContext], Awaitable[bytes]]:
        """A handler passing `method`'s request bytes to the owner and its reply back."""

        # context.abort raises, which mypy cannot know (grpc is not followed).
        async def forward(  # type: ignore[return]
            request: bytes, context: grpc.aio.ServicerContext
        ) -> bytes:
            self.last_call = time.monotonic()
            try:
                return await self._owner.ask(ipc.call_request(
                    method, request, _authorization(context), self._peer_of(context.peer())))
            except Exception as exc:  # the owner's status; a bug INTERNAL, logged
                await asyncio.sleep(held_for(exc, context.time_remaining()))
                await context.abort(*answer_of(exc, method))

        return forward

    def generic_handlers(self) -> list[grpc.GenericRpcHandler]:
        """Every method of the Collector and Admin services."""
        found = []
        for name in ("Collector", "Admin"):
            service = collector_pb2.DESCRIPTOR.services_by_name[name]
            methods = {}
            for method in service.methods:
                full = f"/{service.full_name}/{method.name}"
                if full == "/gpubench.v1.Collector/SubmitRun":
                    methods[method.name] = grpc.unary_unary_rpc_method_handler(
                        self.submit_run,
                        response_serializer=collector_pb2.SubmitRunResponse.SerializeToString,
                    )
                else:  # bytes in, bytes out: the owner parses and serialises
                    methods[method.name] = grpc.unary_unary_rpc_method_handler(
                        self.forwarder(full)
                    )
            found.append(grpc.method_handlers_generic_handler(service.full_name, methods))
        return found


async def serve(config: dict[str, Any]) -> int:
    """Serve until SIGTERM/SIGINT or until the owner is gone; the exit code."""
    loop = asyncio.get_running_loop()
    stop, gone = asyncio.Event(), asyncio.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    owner = OwnerClient(config["owner_address"], bytes.fromhex(config["secret"]),
                        ipc.frame_limit(config["max_message_bytes"]))
    owner.tell(collector_ipc_pb2.FrontendMessage(
        started=collector_ipc_pb2.Started(index=config["index"], pid=os.getpid())))
    tls = None
    if config["tls_cert"]:
        tls = TlsFiles(Path(config["tls_cert"]), Path(config["tls_key"]))
    try:
        door = open_door(config["host"], config["port"], tls=tls is not None,
                         limits=door_limits(), share_port=True)
    except GpubenchError as exc:
        owner.tell(collector_ipc_pb2.FrontendMessage(
            failed=collector_ipc_pb2.Failed(message=str(exc))))
        return 1
    handlers = Handlers(owner, door.peer_of)
    server = grpc.aio.server(
        handlers=handlers.generic_handlers(),
        options=server_options(config["max_message_bytes"]),
        maximum_concurrent_rpcs=MAX_CONCURRENT_CALLS,
    )
    health = await add_health_and_reflection_aio(server)
    serving = Serving(_teller(health, loop))
    door.on_refusing = lambda refusing: serving.room(not refusing)
    try:
        listen_behind(server, door, tls)
    except GpubenchError as exc:
        owner.tell(collector_ipc_pb2.FrontendMessage(
            failed=collector_ipc_pb2.Failed(message=str(exc))))
        return 1
    await server.start()
    await door.start()
    owner.tell(collector_ipc_pb2.FrontendMessage(ready=collector_ipc_pb2.Ready(port=door.port)))
    owner.watch(loop, gone, serving.durable)
    # Wake on a signal or on the owner's connection closing, whichever comes first.
    waits = [asyncio.ensure_future(stop.wait()), asyncio.ensure_future(gone.wait())]
    await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    for waiting in waits:
        waiting.cancel()
    if gone.is_set():
        await _drain(door, owner, handlers, health)
        # The owner died without removing its socket's private folder; nothing else will.
        shutil.rmtree(os.path.dirname(config["owner_address"]), ignore_errors=True)
        return 1
    await door.stop_accepting()
    await server.stop(STOP_GRACE_S)
    await door.close()
    return 0


def _teller(health: Any, loop: asyncio.AbstractEventLoop) -> Callable[[bool], None]:
    """What `Serving` tells, from any thread: the health servicer's status, set in
    `loop` one change after the other."""
    lock = asyncio.Lock()

    async def tell(serving: bool) -> None:
        async with lock:
            await set_serving_aio(health, serving)

    return lambda serving: asyncio.run_coroutine_threadsafe(tell(serving), loop)


async def _drain(door: Door, owner: OwnerClient, handlers: Handlers, health: Any) -> None:
    """Stop serving once the owner is gone, every call answered UNAVAILABLE (retryable).

    Nothing can be stored any more. The door stops taking connections at once, so that
    a collector started again on the port can listen there. Calls are answered
    UNAVAILABLE until none has come for OWNER_GONE_QUIET_S (at most OWNER_GONE_DRAIN_S),
    then the door closes every connection, which a client sees as UNAVAILABLE too: a
    gRPC stop would cancel the calls it has taken in but not yet handed to a handler,
    and CANCELLED is not every client's to retry.
    """
    owner.gone = True
    await door.stop_accepting()
    await set_serving_aio(health, False)
    loop = asyncio.get_running_loop()
    began = loop.time()
    while (loop.time() - began < OWNER_GONE_DRAIN_S
           and time.monotonic() - handlers.last_call < OWNER_GONE_QUIET_S):
        await asyncio.sleep(0.02)
    await door.close()


def run(config: dict[str, Any]) -> int:
    """Serve (see `serve`) in a fresh event loop; the exit code."""
    return asyncio.run(serve(config))


def main() -> None:
    """Entry point of `python -m gpubench.collector.frontend` (settings on stdin)."""
    sys.exit(run(json.loads(sys.stdin.read())))


if __name__ == "__main__":
    main()
