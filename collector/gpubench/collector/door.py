"""The collector's door: every gRPC connection comes through it before gRPC sees it.

gRPC's own limit of incoming connections (`grpc.max_allowed_incoming_connections`)
is one count for the whole server, taken when a connection is accepted, before its
peer has sent a byte, and held until gRPC's handshake deadline: so 1,000 idle TCP
connections from anyone used to shut every new client out. gRPC has no hook to
count connections by peer, and Python's gRPC cannot be handed an accepted socket. So
the door holds the collector's public socket, and gRPC listens on a Unix socket in a
folder of mode 0700 that only the door connects to:

- each peer (an IP address; an IPv6 address by its /64: `address_key`) gets at most
  `peer_connections` of the process's `max_connections`;
- a connection is *waiting* until it has sent the start of what a gRPC client sends
  first (the HTTP/2 client preface in plaintext, a TLS handshake record with TLS),
  *proven* after. A waiting connection is closed at its deadline (`preface_timeout_s`),
  and one that sends anything else at once. A new connection that finds its peer's
  share, or the total, taken closes the oldest waiting connection that has sent
  nothing (of that peer, or of anyone) to make room: silent connections only ever
  displace each other, and a client's own connection, whose first bytes are on their
  way, is never one of them;
- only when every place is held by proven connections is a new one refused. The door
  then says so (`on_refusing`), so that health reports NOT_SERVING, until no
  connection has been refused for REFUSING_S;
- a proven connection is joined to gRPC by a Unix connection of its own, whose local
  name (`peer_of`) tells the token check and its limits which peer it carries.

What happens once a connection is joined is gRPC's: its handshake deadline (the TLS
handshake and the HTTP/2 settings), keepalive enforcement, idle connections closed
(collector.transport.server_options).

The door runs in an asyncio loop: the front-end processes' own loop, or a thread of
its own in a single-process collector (`start_thread`).
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import ipaddress
import itertools
import logging
import os
import secrets
import shutil
import socket
import struct
import sys
import tempfile
import termios
import threading
from collections import OrderedDict
from collections.abc import Callable, Coroutine, Iterable
from dataclasses import dataclass
from typing import Any

log = logging.getLogger(__name__)

# What a gRPC client sends first: the HTTP/2 client preface (RFC 9113, 3.4), or with TLS
# a handshake record (content type 22, protocol version 3.x).
HTTP2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
TLS_HANDSHAKE_START = b"\x16\x03"
# After the last refusal of a connection for want of room, how long health still says
# NOT_SERVING (s).
REFUSING_S = 5.0
# The listening sockets' backlog of connections not yet accepted.
BACKLOG = 4096
# How many of the oldest waiting connections are looked at for one that sent nothing.
SILENT_LOOKS = 128
# Abstract Unix names (Linux) need no file; elsewhere each link's name is a file.
ABSTRACT_NAMES = sys.platform.startswith("linux")


@dataclass(frozen=True)
class DoorLimits:
    """How many connections a serving process holds, and for how long it waits for one
    to show it is a gRPC client."""

    max_connections: int
    peer_connections: int
    preface_timeout_s: float


def address_key(host: str) -> str:
    """What connections and failed authentications are counted by: the IP address, an
    IPv6 one by its /64 (which one host usually holds whole), an IPv4-mapped IPv6
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


def grpc_peer(sockaddr: tuple) -> str:
    """A socket address as gRPC writes a peer: "ipv4:1.2.3.4:5", "ipv6:[::1]:5"."""
    host, port = sockaddr[0], sockaddr[1]
    if ":" in host:
        return f"ipv6:[{host}]:{port}"
    return f"ipv4:{host}:{port}"


def listening_sockets(host: str, port: int, *, share_port: bool) -> list[socket.socket]:
    """Sockets listening on every address `host` resolves to, on `port` (0: one free
    port for all of them). `share_port` (SO_REUSEPORT) lets several front-end
    processes listen on one port. Raises OSError."""
    infos = socket.getaddrinfo(host.strip("[]") or None, port, type=socket.SOCK_STREAM,
                               flags=socket.AI_PASSIVE)
    unique = list(dict.fromkeys((family, sockaddr) for family, _, _, _, sockaddr in infos))
    families = {family for family, _ in unique}
    sockets: list[socket.socket] = []
    try:
        for family, sockaddr in unique:
            sock = socket.socket(family, socket.SOCK_STREAM)
            sockets.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if share_port:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            if family == socket.AF_INET6 and len(families) > 1:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            if port == 0 and len(sockets) > 1:
                sockaddr = (sockaddr[0], sockets[0].getsockname()[1], *sockaddr[2:])
            sock.bind(sockaddr)
            sock.listen(BACKLOG)
            sock.setblocking(False)
    except BaseException:
        for sock in sockets:
            sock.close()
        raise
    return sockets


class Door:
    """The public side of one serving process's gRPC server (see the module's text)."""

    def __init__(self, sockets: list[socket.socket], limits: DoorLimits, *, tls: bool) -> None:
        self._sockets = sockets
        self.limits = limits
        self._first_bytes = TLS_HANDSHAKE_START if tls else HTTP2_PREFACE
        # Told True when a connection is refused for want of room, False REFUSING_S
        # after the last one (in the door's loop).
        self.on_refusing: Callable[[bool], None] | None = None
        self._folder = tempfile.mkdtemp(prefix="gpubench-door-")  # mode 0700
        self.upstream_path = os.path.join(self._folder, "grpc.sock")
        self._name = f"gpubench-door-{os.getpid()}-{secrets.token_hex(4)}"
        self._serial = itertools.count()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._servers: list[asyncio.AbstractServer] = []
        self._thread: threading.Thread | None = None
        # Every open connection; the waiting ones oldest first, in all and per peer.
        self._open: set[_Connection] = set()
        self._per_peer: dict[str, int] = {}
        self._waiting: OrderedDict[_Connection, None] = OrderedDict()
        self._waiting_of: dict[str, OrderedDict[_Connection, None]] = {}
        # gRPC's peer of a link -> the client's peer (read from gRPC's threads).
        self._peers: dict[str, str] = {}
        self._refusing: asyncio.TimerHandle | None = None
        self._joins: set[asyncio.Task] = set()
        self.refused = 0  # connections refused for want of room (no waiting one to close)
        self.refused_peer = 0  # connections refused past their peer's share
        self.closed_waiting = 0  # waiting connections closed: silent, not gRPC, displaced

    @property
    def port(self) -> int:
        """The port the door listens on."""
        return self._sockets[0].getsockname()[1]

    @property
    def upstream(self) -> str:
        """The address gRPC listens on, as gRPC takes it."""
        return "unix:" + self.upstream_path

    def peer_of(self, grpc_peer_text: str | None) -> str | None:
        """The client's peer ("ipv4:1.2.3.4:5") of a call gRPC says came from
        `grpc_peer_text`; that text itself for a call that did not come through the door
        (the loopback admin port)."""
        if grpc_peer_text is None:
            return None
        return self._peers.get(grpc_peer_text, grpc_peer_text)

    def connections(self) -> tuple[int, int]:
        """How many connections are open, and how many of them are still waiting."""
        return len(self._open), len(self._waiting)

    # -- running ---------------------------------------------------------------------

    async def start(self) -> None:
        """Start accepting, in the running loop."""
        self._loop = asyncio.get_running_loop()
        for sock in self._sockets:
            self._servers.append(await self._loop.create_server(
                lambda: _Client(self), sock=sock, backlog=BACKLOG))

    def start_thread(self) -> None:
        """Start accepting in a loop on a thread of its own (a single-process collector,
        whose gRPC server is not asyncio)."""
        started = threading.Event()
        failed: list[BaseException] = []

        def run() -> None:
            loop = asyncio.new_event_loop()
            try:
                loop.run_until_complete(self.start())
            except BaseException as exc:  # noqa: BLE001 - handed to the starting thread
                failed.append(exc)
                started.set()
                loop.close()
                return
            started.set()
            loop.run_forever()
            loop.close()

        self._thread = threading.Thread(target=run, name="collector-door", daemon=True)
        self._thread.start()
        started.wait()
        if failed:
            raise failed[0]

    async def stop_accepting(self) -> None:
        """Close the listening sockets: no new connections (those open go on)."""
        for server in self._servers:
            server.close()
        for sock in self._sockets:
            sock.close()

    async def close(self) -> None:
        """Close every connection and the private folder (after gRPC has stopped)."""
        await self.stop_accepting()
        for connection in list(self._open):
            connection.close()
        if self._refusing is not None:
            self._refusing.cancel()
        shutil.rmtree(self._folder, ignore_errors=True)

    def discard(self) -> None:
        """Close a door that never started."""
        for sock in self._sockets:
            sock.close()
        shutil.rmtree(self._folder, ignore_errors=True)

    def stop_thread_accepting(self) -> None:
        """`stop_accepting` from another thread, for a door started by `start_thread`."""
        self._call_in_loop(self.stop_accepting)

    def close_thread(self) -> None:
        """`close` from another thread, then end the door's thread."""
        self._call_in_loop(self.close)
        if self._loop is not None and self._thread is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)
        shutil.rmtree(self._folder, ignore_errors=True)

    def _call_in_loop(self, coroutine: Callable[[], Coroutine[Any, Any, None]]) -> None:
        if self._loop is None or self._loop.is_closed() or not self._loop.is_running():
            for sock in self._sockets:
                sock.close()
            return
        with contextlib.suppress(RuntimeError):  # the loop stopped meanwhile
            asyncio.run_coroutine_threadsafe(coroutine(), self._loop).result(10)

    # -- admission ---------------------------------------------------------------------

    def _admit(self, connection: _Connection) -> bool:
        """Whether a new connection may stay: room made by closing the oldest waiting
        connection where its peer's share or the total is taken."""
        key = connection.key
        if self._per_peer.get(key, 0) >= self.limits.peer_connections:
            silent = _first_silent(self._waiting_of.get(key, ()))
            if silent is None:
                if len(self._open) >= self.limits.max_connections:
                    self.refused += 1  # no room for anyone
                    self._refused_now()
                else:
                    self.refused_peer += 1
                return False
            self._displace(silent)
        if len(self._open) >= self.limits.max_connections:
            silent = _first_silent(self._waiting)
            if silent is None:
                self.refused += 1
                self._refused_now()
                return False
            self._displace(silent)
        self._open.add(connection)
        self._per_peer[key] = self._per_peer.get(key, 0) + 1
        self._waiting[connection] = None
        self._waiting_of.setdefault(key, OrderedDict())[connection] = None
        return True

    def _displace(self, connection: _Connection) -> None:
        self.closed_waiting += 1
        connection.close()

    def _not_waiting(self, connection: _Connection) -> None:
        self._waiting.pop(connection, None)
        waiting = self._waiting_of.get(connection.key)
        if waiting is not None:
            waiting.pop(connection, None)
            if not waiting:
                del self._waiting_of[connection.key]

    def _gone(self, connection: _Connection) -> None:
        if connection not in self._open:
            return
        self._open.discard(connection)
        self._not_waiting(connection)
        left = self._per_peer[connection.key] - 1
        if left:
            self._per_peer[connection.key] = left
        else:
            del self._per_peer[connection.key]
        if connection.link_name is not None:
            self._peers.pop(connection.link_name, None)

    def _refused_now(self) -> None:
        if self._refusing is None:
            log.warning("refusing new connections: all %d places are held by connected "
                        "clients (no more than %d of them by one address)",
                        self.limits.max_connections, self.limits.peer_connections)
            if self.on_refusing is not None:
                self.on_refusing(True)
        else:
            self._refusing.cancel()
        assert self._loop is not None  # set by start, before the first connection
        self._refusing = self._loop.call_later(REFUSING_S, self._refusing_over)

    def _refusing_over(self) -> None:
        self._refusing = None
        log.warning("accepting new connections again (%d refused so far)", self.refused)
        if self.on_refusing is not None:
            self.on_refusing(False)

    # -- the link to gRPC --------------------------------------------------------------

    def _link_socket(self) -> tuple[socket.socket, str]:
        """A Unix socket bound to a name of its own, and gRPC's text for that peer."""
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        serial = next(self._serial)
        try:
            if ABSTRACT_NAMES:
                name = f"{self._name}-{serial}"
                sock.bind("\0" + name)
                text = f"unix-abstract:{name}"
            else:
                path = os.path.join(self._folder, f"c{serial}")
                sock.bind(path)
                os.unlink(path)  # the name stays the socket's; no file is left
                text = f"unix:{path}"
            sock.setblocking(False)
        except BaseException:
            sock.close()
            raise
        return sock, text

    def _joining_soon(self, connection: _Connection) -> None:
        task = asyncio.ensure_future(self._join(connection))
        self._joins.add(task)  # the loop keeps only a weak reference to a task
        task.add_done_callback(self._joins.discard)

    async def _join(self, connection: _Connection) -> None:
        """Join a proven connection to gRPC."""
        assert self._loop is not None  # set by start, before the first connection
        try:
            sock, text = self._link_socket()
            try:
                await self._loop.sock_connect(sock, self.upstream_path)
            except BaseException:
                sock.close()
                raise
            if connection.closed:
                sock.close()
                return
            self._peers[text] = connection.peer
            connection.link_name = text
            await self._loop.create_unix_connection(lambda: _Server(connection), sock=sock)
        except OSError as exc:  # gRPC is not listening (stopping)
            log.debug("could not join a connection to gRPC: %s", exc)
            connection.close()


def _first_silent(waiting: Iterable[_Connection]) -> _Connection | None:
    """The oldest of `waiting` that has sent nothing yet, not even bytes still unread in
    its socket (a client whose preface is on its way while the loop accepts a flood is
    not displaced); None when each of the first SILENT_LOOKS has sent something."""
    for connection in itertools.islice(waiting, SILENT_LOOKS):
        if not connection.received and not _unread(connection.client):
            return connection
    return None


def _unread(transport: asyncio.Transport) -> int:
    """How many bytes wait unread in a transport's socket (0 when it cannot tell)."""
    try:
        fd = transport.get_extra_info("socket").fileno()
        return struct.unpack("i", fcntl.ioctl(fd, termios.FIONREAD, b"\0" * 4))[0]
    except (OSError, AttributeError, ValueError):
        return 0


class _Connection:
    """One client's connection, and once proven its link to gRPC."""

    __slots__ = ("door", "client", "server", "key", "peer", "received", "timer",
                 "closed", "link_name")

    def __init__(self, door: Door, client: asyncio.Transport, peername: tuple) -> None:
        self.door = door
        self.client = client
        self.server: asyncio.Transport | None = None
        self.key = address_key(peername[0])
        self.peer = grpc_peer(peername)
        self.received = b""  # until proven: what it sent so far
        self.timer: asyncio.TimerHandle | None = None
        self.closed = False
        self.link_name: str | None = None

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        if self.timer is not None:
            self.timer.cancel()
        self.client.close()
        if self.server is not None:
            self.server.close()
        self.door._gone(self)  # noqa: SLF001 - the door's own bookkeeping


class _Client(asyncio.Protocol):
    """The client's side of a connection."""

    def __init__(self, door: Door) -> None:
        self._door = door
        self._connection: _Connection | None = None

    # A stream server's transports are Transports (asyncio types the argument as any
    # BaseTransport).
    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        peername = transport.get_extra_info("peername")
        if not peername:
            transport.abort()
            return
        connection = _Connection(self._door, transport, peername)
        with contextlib.suppress(OSError):
            transport.get_extra_info("socket").setsockopt(
                socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if not self._door._admit(connection):  # noqa: SLF001
            connection.closed = True
            transport.abort()
            return
        self._connection = connection
        assert self._door._loop is not None  # noqa: SLF001 - set by start, before any connection
        connection.timer = self._door._loop.call_later(  # noqa: SLF001
            self._door.limits.preface_timeout_s, self._expire)

    def _expire(self) -> None:
        connection = self._connection
        if connection is not None and not connection.closed:
            self._door._displace(connection)  # noqa: SLF001 - silent past its deadline

    def data_received(self, data: bytes) -> None:
        connection = self._connection
        if connection is None or connection.closed:
            return
        if connection.server is not None:
            connection.server.write(data)
            return
        connection.received += data
        expected = self._door._first_bytes  # noqa: SLF001
        seen = connection.received[:len(expected)]
        if not expected.startswith(seen):  # not a gRPC client
            self._door._displace(connection)  # noqa: SLF001
            return
        if len(seen) < len(expected) or connection.timer is None:
            return  # more to come; or already joining
        connection.timer.cancel()
        connection.timer = None
        self._door._not_waiting(connection)  # noqa: SLF001 - proven
        # Reading waits for the link, which gets what came so far first.
        connection.client.pause_reading()
        self._door._joining_soon(connection)  # noqa: SLF001

    def eof_received(self) -> bool:
        if self._connection is not None and self._connection.server is not None \
                and self._connection.server.can_write_eof():
            self._connection.server.write_eof()
            return True  # half-closed: gRPC may still answer
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        if self._connection is not None:
            self._connection.close()

    def pause_writing(self) -> None:  # the client reads slower than gRPC writes
        if self._connection is not None and self._connection.server is not None:
            self._connection.server.pause_reading()

    def resume_writing(self) -> None:
        if self._connection is not None and self._connection.server is not None:
            self._connection.server.resume_reading()


class _Server(asyncio.Protocol):
    """gRPC's side of a proven connection."""

    def __init__(self, connection: _Connection) -> None:
        self._connection = connection

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        connection = self._connection
        if connection.closed:
            transport.close()
            return
        connection.server = transport  # type: ignore[assignment]
        transport.write(connection.received)  # type: ignore[attr-defined]
        connection.received = b""
        connection.client.resume_reading()

    def data_received(self, data: bytes) -> None:
        self._connection.client.write(data)

    def eof_received(self) -> bool:
        return False  # gRPC is done with the connection: close both sides

    def connection_lost(self, exc: Exception | None) -> None:
        self._connection.close()

    def pause_writing(self) -> None:  # gRPC reads slower than the client writes
        self._connection.client.pause_reading()

    def resume_writing(self) -> None:
        self._connection.client.resume_reading()
