"""Connections from another loopback address, for clients that cannot choose their own.

A gRPC channel (or any client) connects to `Relay.address`; the relay opens each of its
connections to the target from `source` (e.g. 127.0.0.2) and copies bytes both ways, so
the server sees that source address. Every loopback address is this host's, so no
setup is needed; traffic never leaves the machine.
"""

from __future__ import annotations

import socket
import threading
from types import TracebackType


class Relay:
    """A TCP relay on 127.0.0.1:0 that reaches `target` (host, port) from `source`."""

    def __init__(self, target: tuple[str, int], source: str) -> None:
        self._target = target
        self._source = source
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        self._closed = False
        self.port = self._listener.getsockname()[1]
        threading.Thread(target=self._accept, name="relay-accept", daemon=True).start()

    @property
    def address(self) -> str:
        """Where clients connect: "127.0.0.1:PORT"."""
        return f"127.0.0.1:{self.port}"

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return  # closed
            try:
                upstream = socket.create_connection(self._target, timeout=10,
                                                    source_address=(self._source, 0))
                upstream.settimeout(None)
            except OSError:
                client.close()
                continue
            with self._lock:
                if self._closed:
                    client.close()
                    upstream.close()
                    return
                self._sockets += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=_copy, args=(a, b), daemon=True).start()

    def close(self) -> None:
        """Stop accepting and close every relayed connection."""
        with self._lock:
            self._closed = True
            sockets, self._sockets = self._sockets, []
        self._listener.close()
        for sock in sockets:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            sock.close()

    def __enter__(self) -> Relay:
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.close()


def _copy(source: socket.socket, destination: socket.socket) -> None:
    try:
        while data := source.recv(65536):
            destination.sendall(data)
    except OSError:
        pass
    finally:
        try:
            destination.shutdown(socket.SHUT_WR)
        except OSError:
            pass
