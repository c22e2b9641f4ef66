"""A front-end process of a multi-process collector, and its client of the owner.

Started by the owner (collector.owner) as `python -m gpubench.collector.frontend`,
its settings as JSON on stdin. It serves every Collector and Admin method, health
and reflection on the shared host:port. SubmitRun is validated and turned into
its runs-table row here (the CPU-heavy, stateless part); the owner checks the
token, stores the row and answers after the commit. Every other method is
forwarded as its request bytes and answered by the owner.

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
from collections.abc import Awaitable, Callable
from multiprocessing.connection import Client
from pathlib import Path
from typing import Any

import grpc
from gpubench.collector import validation
from gpubench.collector.rows import Ack, ack_message, run_row
from gpubench.collector.transport import (
    DEFAULT_WORKERS,
    STOP_GRACE_S,
    Refusal,
    TlsFiles,
    add_health_and_reflection_aio,
    listen,
    server_options,
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


def _frame(data: bytes) -> bytes:
    if len(data) > 0x7FFFFFFF:
        return _SHORT.pack(-1) + _LONG.pack(len(data)) + data
    return _SHORT.pack(len(data)) + data


class OwnerClient:
    """Requests to the owner: a pool of connections, each with one request at a time.

    A connection is opened with multiprocessing's handshake (the owner's authkey),
    then read and written by the loop; a call takes an idle one or opens another,
    up to MAX_LINKS.
    A control connection carries hello/ready/failed; its end means the owner is gone.
    """

    def __init__(self, address: str, authkey: bytes) -> None:
        self._address = address
        self._authkey = authkey
        self._idle: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []
        self._links = asyncio.Semaphore(MAX_LINKS)
        self._control = Client(address, "AF_UNIX", authkey=authkey)

    def tell(self, *message: Any) -> None:
        """Send a control message (hello, ready, failed)."""
        self._control.send_bytes(pickle.dumps(message, PICKLE))

    def watch(self, loop: asyncio.AbstractEventLoop, gone: asyncio.Event) -> None:
        """Set `gone` (in `loop`) when the owner's control connection closes."""

        def wait() -> None:
            with contextlib.suppress(EOFError, OSError):
                while True:
                    self._control.recv_bytes()  # the owner sends nothing: this is its end
            loop.call_soon_threadsafe(gone.set)

        threading.Thread(target=wait, name="owner-watch", daemon=True).start()

    async def ask(self, *request: Any) -> Any:
        """Send a request and wait for its reply; raises Refusal with the owner's status."""
        async with self._links:
            return await self._exchange(request)

    async def _exchange(self, request: tuple) -> Any:
        try:
            link = self._idle.pop() if self._idle else await self._connect()
        except OSError:
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


class Handlers:
    """The gRPC handlers of a front-end: SubmitRun prepared here, the rest forwarded."""

    def __init__(self, owner: OwnerClient) -> None:
        self._owner = owner

    async def submit_run(
        self, request: collector_pb2.SubmitRunRequest, context: grpc.aio.ServicerContext
    ) -> collector_pb2.SubmitRunResponse:
        """Validate, make the row, let the owner check the token and store it."""
        # Whether the caller may load a published run, only the owner knows (its token).
        problems = validation.problems(request.run, may_publish=True)
        row = None if problems else run_row(request.run, "")
        try:
            ack: Ack = await self._owner.ask("submit", _authorization(context), row, problems)
        except Refusal as refused:
            await context.abort(refused.code, refused.details)
        return ack_message(ack)

    def forwarder(
        self, method: str
    ) -> Callable[[bytes, grpc.aio.ServicerContext], Awaitable[bytes]]:
        """A handler passing `method`'s request bytes to the owner and its reply back."""

        async def forward(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
            try:
                return await self._owner.ask("call", method, request, _authorization(context))
            except Refusal as refused:
                await context.abort(refused.code, refused.details)

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
                        request_deserializer=collector_pb2.SubmitRunRequest.FromString,
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
    server = grpc.aio.server(
        handlers=Handlers(owner).generic_handlers(),
        options=server_options(config["max_message_bytes"], share_port=True),
    )
    await add_health_and_reflection_aio(server)
    try:
        port = listen(server, config["host"], config["port"], tls)
    except GpubenchError as exc:
        owner.tell("failed", str(exc))
        return 1
    await server.start()
    owner.tell("ready", port)
    owner.watch(loop, gone)
    # Wake on a signal or on the owner's connection closing, whichever comes first.
    waits = [asyncio.ensure_future(stop.wait()), asyncio.ensure_future(gone.wait())]
    await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    for waiting in waits:
        waiting.cancel()
    if gone.is_set():
        await server.stop(None)  # nothing can be stored any more: refuse at once
        # The owner died without removing its socket's private folder; nothing else will.
        shutil.rmtree(os.path.dirname(config["owner_address"]), ignore_errors=True)
        return 1
    await server.stop(STOP_GRACE_S)
    return 0


def run(config: dict[str, Any]) -> int:
    """Serve (see `serve`) in a fresh event loop; the exit code."""
    return asyncio.run(serve(config))


def main() -> None:
    """Entry point of `python -m gpubench.collector.frontend` (settings on stdin)."""
    sys.exit(run(json.loads(sys.stdin.read())))


if __name__ == "__main__":
    main()
