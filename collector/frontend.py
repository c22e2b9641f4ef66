"""A front-end process of a multi-process collector, and its client of the owner.

Started by the owner (collector.owner) as `python -m gpubench.collector.frontend`,
its settings as JSON on stdin. It serves every Collector and Admin method, health
and reflection on the shared host:port. SubmitRun is validated and turned into
its runs-table row here (the CPU-heavy, stateless part); the owner checks the
token, stores the row and answers after the commit. Every other method is
forwarded as its request bytes and answered by the owner.

It stops gracefully on SIGTERM/SIGINT (in-flight calls finish), and at once when
the owner's connection closes (the owner is gone: nothing could be stored).
"""

from __future__ import annotations

import contextlib
import json
import os
import pickle
import shutil
import signal
import sys
import threading
from collections.abc import Callable
from concurrent import futures
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
    add_health_and_reflection,
    listen,
    server_options,
)

from gpubench.errors import GpubenchError
from gpubench.v1 import collector_pb2

PICKLE = pickle.HIGHEST_PROTOCOL
OWNER_GONE = "collector shutting down (its database process is gone)"


class OwnerClient:
    """Requests to the owner: a connection per handler thread, one request at a time.

    A thread sends its request and blocks on the reply (releasing the interpreter
    lock), so no other thread has to hand the reply over. A control connection
    carries hello/ready/failed; its end means the owner is gone.
    """

    def __init__(self, address: str, authkey: bytes) -> None:
        self._address = address
        self._authkey = authkey
        self._local = threading.local()
        self._control = Client(address, "AF_UNIX", authkey=authkey)
        self.gone = threading.Event()  # set when the owner's control connection closes
        threading.Thread(target=self._watch, name="owner-watch", daemon=True).start()

    def tell(self, *message: Any) -> None:
        """Send a control message (hello, ready, failed)."""
        self._control.send_bytes(pickle.dumps(message, PICKLE))

    def ask(self, *request: Any) -> Any:
        """Send a request and wait for its reply; raises Refusal with the owner's status."""
        connection = getattr(self._local, "connection", None)
        try:
            if connection is None:
                connection = self._local.connection = Client(
                    self._address, "AF_UNIX", authkey=self._authkey
                )
            connection.send_bytes(pickle.dumps(request, PICKLE))
            ok, payload = pickle.loads(connection.recv_bytes())
        except (EOFError, OSError):
            self._local.connection = None
            raise Refusal(grpc.StatusCode.UNAVAILABLE, OWNER_GONE) from None
        if not ok:
            raise Refusal(*payload)
        return payload

    def _watch(self) -> None:
        with contextlib.suppress(EOFError, OSError):
            while True:
                self._control.recv_bytes()  # the owner sends nothing here: this is its end
        self.gone.set()


def _authorization(context: grpc.ServicerContext) -> str | None:
    """The call's first authorization entry, checked by the owner as a single process would."""
    for key, value in context.invocation_metadata() or ():
        if key == "authorization":
            return str(value)
    return None


class Handlers:
    """The gRPC handlers of a front-end: SubmitRun prepared here, the rest forwarded."""

    def __init__(self, owner: OwnerClient) -> None:
        self._owner = owner

    def submit_run(
        self, request: collector_pb2.SubmitRunRequest, context: grpc.ServicerContext
    ) -> collector_pb2.SubmitRunResponse:
        """Validate, make the row, let the owner check the token and store it."""
        problems = validation.problems(request.run)
        row = None if problems else run_row(request.run, "")
        try:
            ack: Ack = self._owner.ask("submit", _authorization(context), row, problems)
        except Refusal as refused:
            context.abort(refused.code, refused.details)
        return ack_message(ack)

    def forwarder(self, method: str) -> Callable[[bytes, grpc.ServicerContext], bytes]:
        """A handler passing `method`'s request bytes to the owner and its reply back."""

        def forward(request: bytes, context: grpc.ServicerContext) -> bytes:
            try:
                return self._owner.ask("call", method, request, _authorization(context))
            except Refusal as refused:
                context.abort(refused.code, refused.details)

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


def run(config: dict[str, Any]) -> int:
    """Serve until SIGTERM/SIGINT or until the owner is gone; the exit code."""
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    owner = OwnerClient(config["owner_address"], bytes.fromhex(config["authkey"]))
    owner.tell("hello", config["index"], os.getpid())
    tls = None
    if config["tls_cert"]:
        tls = TlsFiles(Path(config["tls_cert"]), Path(config["tls_key"]))
    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=DEFAULT_WORKERS, thread_name_prefix="rpc"),
        handlers=Handlers(owner).generic_handlers(),
        options=server_options(config["max_message_bytes"], share_port=True),
    )
    add_health_and_reflection(server)
    try:
        port = listen(server, config["host"], config["port"], tls)
    except GpubenchError as exc:
        owner.tell("failed", str(exc))
        return 1
    server.start()
    owner.tell("ready", port)
    # Wake on a signal or on the owner's connection closing, whichever comes first.
    threading.Thread(target=lambda: (owner.gone.wait(), stop.set()), daemon=True).start()
    stop.wait()
    if owner.gone.is_set():
        server.stop(None)  # nothing can be stored any more: refuse at once
        # The owner died without removing its socket's private folder; nothing else will.
        shutil.rmtree(os.path.dirname(config["owner_address"]), ignore_errors=True)
        return 1
    server.stop(STOP_GRACE_S).wait()
    return 0


def main() -> None:
    """Entry point of `python -m gpubench.collector.frontend` (settings on stdin)."""
    sys.exit(run(json.loads(sys.stdin.read())))


if __name__ == "__main__":
    main()
