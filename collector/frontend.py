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

It stops gracefully on SIGTERM/SIGINT (in-flight calls finish), and at once when
the owner's connection closes (the owner is gone: nothing could be stored).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import pickle
import shutil
import signal
import socket
import struct
import sys
import threading
import time
from collections.abc import Awaitable, Callable
from multiprocessing.connection import Client
from pathlib import Path
from typing import Any

import grpc
from gpubench.collector import validation
from gpubench.collector.rows import Ack, ack_message, run_row
from gpubench.collector.statuses import answer_of
from gpubench.collector.transport import (
    DEFAULT_WORKERS,
    MAX_CONCURRENT_CALLS,
    STOP_GRACE_S,
    Refusal,
    TlsFiles,
    add_health_and_reflection_aio,
    listen,
    parse_request,
    server_options,
    set_serving_aio,
)

from gpubench.errors import GpubenchError
from gpubench.v1 import collector_pb2

PICKLE = pickle.HIGHEST_PROTOCOL
OWNER_GONE = "collector shutting down (its database process is gone)"
# multiprocessing.connection's framing, which the owner reads and writes: a signed
# 32-bit big-endian length, or -1 and an unsigned 64-bit one from 2 GiB on.
_SHORT, _LONG = struct.Struct("!i"), struct.Struct("!Q")
# Connections to the owner at most (each one a file descriptor on both sides); more
# concurrent calls wait for one. As many as a single-process collector has handler threads.
MAX_LINKS = DEFAULT_WORKERS
# How long a token the owner accepted lets this front-end parse submissions before it
# asks again (s), and how many such tokens it remembers.
ACCEPTED_TTL_S = 10.0
ACCEPTED_MOST = 4096
# Once the owner is gone (s): calls are answered UNAVAILABLE until none has come for
# OWNER_GONE_QUIET_S, at most OWNER_GONE_DRAIN_S; then the calls still in flight get
# OWNER_GONE_GRACE_S to end (each does as soon as its link to the owner reads the end).
OWNER_GONE_QUIET_S = 0.25
OWNER_GONE_DRAIN_S = 3.0
OWNER_GONE_GRACE_S = 5.0


def _frame(data: bytes) -> bytes:
    if len(data) > 0x7FFFFFFF:
        return _SHORT.pack(-1) + _LONG.pack(len(data)) + data
    return _SHORT.pack(len(data)) + data


class OwnerClient:
    """Requests to the owner: a pool of connections, each with one request at a time.

    A connection is opened with multiprocessing's handshake (the owner's authkey),
    then read and written by the loop; a call takes an idle one or opens another,
    up to MAX_LINKS.
    A control connection carries hello/ready/failed, and the owner's health news; its
end means the owner is gone.
    """

    def __init__(self, address: str, authkey: bytes) -> None:
        self._address = address
        self._authkey = authkey
        self._idle: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []
        self._links = asyncio.Semaphore(MAX_LINKS)
        self._control = Client(address, "AF_UNIX", authkey=authkey)
        self.gone = False  # set once the owner's control connection closed

    def tell(self, *message: Any) -> None:
        """Send a control message (hello, ready, failed)."""
        self._control.send_bytes(pickle.dumps(message, PICKLE))

    def watch(
        self, loop: asyncio.AbstractEventLoop, gone: asyncio.Event,
        on_health: Callable[[bool], None],
    ) -> None:
        """Set `gone` (in `loop`) when the owner's control connection closes; call
        `on_health(serving)` (in this watching thread) for each ("health", serving)."""

        def wait() -> None:
            with contextlib.suppress(EOFError, OSError):
                while True:
                    message = pickle.loads(self._control.recv_bytes())
                    if message[0] == "health":
                        on_health(message[1])
            loop.call_soon_threadsafe(gone.set)

        threading.Thread(target=wait, name="owner-watch", daemon=True).start()

    async def ask(self, *request: Any) -> Any:
        """Send a request and wait for its reply; raises Refusal with the owner's status."""
        if self.gone:
            raise Refusal(grpc.StatusCode.UNAVAILABLE, OWNER_GONE)
        async with self._links:
            return await self._exchange(request)

    async def _exchange(self, request: tuple) -> Any:
        try:
            link = self._idle.pop() if self._idle else await self._connect()
        except (OSError, EOFError):  # refused, or the owner died during the handshake
            raise Refusal(grpc.StatusCode.UNAVAILABLE, OWNER_GONE) from None
        reader, writer = link
        try:
            writer.write(_frame(pickle.dumps(request, PICKLE)))
            (size,) = _SHORT.unpack(await reader.readexactly(_SHORT.size))
            if size == -1:
                (size,) = _LONG.unpack(await reader.readexactly(_LONG.size))
            ok, payload = pickle.loads(await reader.readexactly(size))
        except (asyncio.IncompleteReadError, OSError):
            writer.close()
            raise Refusal(grpc.StatusCode.UNAVAILABLE, OWNER_GONE) from None
        except BaseException:  # cancelled mid-call: its late reply would answer the next one
            writer.close()
            raise
        self._idle.append(link)
        if not ok:
            raise Refusal(*payload)
        return payload

    async def _connect(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        # The handshake blocks (a few round trips to the owner's accept thread): off the loop.
        connection = await asyncio.get_running_loop().run_in_executor(
            None, lambda: Client(self._address, "AF_UNIX", authkey=self._authkey)
        )
        try:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM,
                                 fileno=os.dup(connection.fileno()))
        finally:
            connection.close()
        return await asyncio.open_unix_connection(sock=sock)


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

    def __init__(self, owner: OwnerClient) -> None:
        self._owner = owner
        self._accepted = AcceptedTokens()
        self.last_call = time.monotonic()  # when the latest call came in

    async def submit_run(
        self, data: bytes, context: grpc.aio.ServicerContext
    ) -> collector_pb2.SubmitRunResponse:
        """Check the token, then parse, validate and make the row; the owner checks the
        token (and the rate limit) again and stores it."""
        self.last_call = time.monotonic()
        authorization = _authorization(context)
        try:
            if authorization not in self._accepted:
                await self._owner.ask("auth", authorization, context.peer())
                self._accepted.add(authorization)
            request = parse_request(collector_pb2.SubmitRunRequest, data)
            # Whether the caller may load a published run, only the owner knows (its token).
            problems = validation.problems(request.run, may_publish=True)
            row = None if problems else run_row(request.run, "")
            ack: Ack = await self._owner.ask("submit", authorization, context.peer(), row,
                                             problems)
        except Exception as exc:  # a refusal with its code; a bug INTERNAL, logged
            await context.abort(*answer_of(exc, "SubmitRun"))
        return ack_message(ack)

    def forwarder(
        self, method: str
    ) -> Callable[[bytes, grpc.aio.ServicerContext], Awaitable[bytes]]:
        """A handler passing `method`'s request bytes to the owner and its reply back."""

        async def forward(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
            self.last_call = time.monotonic()
            try:
                return await self._owner.ask("call", method, request, _authorization(context),
                                             context.peer())
            except Exception as exc:  # the owner's status; a bug INTERNAL, logged
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
    owner = OwnerClient(config["owner_address"], bytes.fromhex(config["authkey"]))
    owner.tell("hello", config["index"], os.getpid())
    tls = None
    if config["tls_cert"]:
        tls = TlsFiles(Path(config["tls_cert"]), Path(config["tls_key"]))
    handlers = Handlers(owner)
    server = grpc.aio.server(
        handlers=handlers.generic_handlers(),
        options=server_options(config["max_message_bytes"], share_port=True),
        maximum_concurrent_rpcs=MAX_CONCURRENT_CALLS,
    )
    health = await add_health_and_reflection_aio(server)
    try:
        port = listen(server, config["host"], config["port"], tls)
    except GpubenchError as exc:
        owner.tell("failed", str(exc))
        return 1
    await server.start()
    owner.tell("ready", port)
    owner.watch(loop, gone, lambda serving: asyncio.run_coroutine_threadsafe(
        set_serving_aio(health, serving), loop))
    # Wake on a signal or on the owner's connection closing, whichever comes first.
    waits = [asyncio.ensure_future(stop.wait()), asyncio.ensure_future(gone.wait())]
    await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    for waiting in waits:
        waiting.cancel()
    if gone.is_set():
        await _drain(server, owner, handlers, health)
        # The owner died without removing its socket's private folder; nothing else will.
        shutil.rmtree(os.path.dirname(config["owner_address"]), ignore_errors=True)
        return 1
    await server.stop(STOP_GRACE_S)
    return 0


async def _drain(
    server: grpc.aio.Server, owner: OwnerClient, handlers: Handlers,
    health: Any,
) -> None:
    """Stop serving once the owner is gone, every call answered UNAVAILABLE (retryable).

    Nothing can be stored any more. A stop cancels the calls gRPC has taken in but not
    yet handed to a handler, and CANCELLED is not retried: so first every call is
    answered UNAVAILABLE at once, until none has come for OWNER_GONE_QUIET_S (at most
    OWNER_GONE_DRAIN_S), and then the calls still in flight get a grace period to end.
    """
    owner.gone = True
    await set_serving_aio(health, False)
    loop = asyncio.get_running_loop()
    began = loop.time()
    while (loop.time() - began < OWNER_GONE_DRAIN_S
           and time.monotonic() - handlers.last_call < OWNER_GONE_QUIET_S):
        await asyncio.sleep(0.02)
    await server.stop(OWNER_GONE_GRACE_S)


def run(config: dict[str, Any]) -> int:
    """Serve (see `serve`) in a fresh event loop; the exit code."""
    return asyncio.run(serve(config))


def main() -> None:
    """Entry point of `python -m gpubench.collector.frontend` (settings on stdin)."""
    sys.exit(run(json.loads(sys.stdin.read())))


if __name__ == "__main__":
    main()
