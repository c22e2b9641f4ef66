"""The edge's parts of the fault campaign: HAProxy with docker/edge/haproxy.cfg (Debian's,
unpacked by `make haproxy` into .tools/) in front of a real collector process and the
results site, all on loopback.

    make chaos CHAOS_ARGS="-k edge"                       # both parts, full size
    .venv/bin/python -m pytest tests/chaos -k edge        # both parts, short

Parts:
  edge-flood     10,000 silent connections from 20 loopback addresses (127.0.0.1-20),
                 each address held past the edge's limit and reopened as the edge closes
                 them every second (refused past the limit, or silent for 5 s);
                 meanwhile a new client (127.0.0.50, a fresh TLS connection each time)
                 calls the collector through the edge every 0.25 s and must be answered
                 within 2 s (60 s at most; short: 3,000 connections, 30 s)
  edge-visitors  100 visitors of the site at once through the edge, from one address,
                 none refused (5 rounds; short 2)

Bounded in count and time; loopback only.
"""

from __future__ import annotations

import http.client
import re
import select
import selectors
import socket
import subprocess
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc
from chaos_support import CLI, Collector, Tally, new_client_call
from edge import HOSTNAME, MISSING, Edge, haproxy_binary, start_edge
from source_address import Relay

PER_ADDRESS = 200  # the edge's connections per address (its configuration's default)
FLOOD_ADDRESSES = [f"127.0.0.{i}" for i in range(1, 21)]
CLIENT_ADDRESS = "127.0.0.50"
SETTINGS = {"EDGE_CONNECTIONS_PER_ADDRESS": str(PER_ADDRESS),
            "EDGE_IDLE_TIMEOUT": "5s",  # silent connections cycle within the part
            "EDGE_REQUEST_TIMEOUT": "5s"}


class Site:
    """`gpubench-collector web` on 127.0.0.1, any free port."""

    def __init__(self, collector: str, token: str) -> None:
        import os

        self.process = subprocess.Popen(
            [*CLI, "web", "--collector", collector, "--port", "0"],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
            env={**os.environ, "GPUBENCH_TOKEN": token})
        deadline, seen = time.monotonic() + 60, ""
        while time.monotonic() < deadline and self.process.poll() is None:
            if select.select([self.process.stdout], [], [], 0.2)[0]:
                line = self.process.stdout.readline()
                seen += line
                found = re.search(r"http://127\.0\.0\.1:(\d+)", line)
                if found:
                    self.port = int(found.group(1))
                    return
        self.stop()
        raise RuntimeError(f"the site did not start: {seen!r}")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)


class Stack:
    """A collector trusting 127.0.0.1 (the edge), the site, and the edge in front."""

    def __init__(self, folder: Path, binary: Path) -> None:
        folder.mkdir(parents=True)
        self.collector = Collector(folder / "edge.duckdb", extra=("--trusted-proxy", "127.0.0.1"))
        self.token = self.collector.token("lab")
        site_token = self.collector.token("site")
        self.collector.start()
        self.site: Site | None = None
        try:
            self.site = Site(self.collector.address, site_token)
            self.edge: Edge = start_edge(binary, folder / "edge", collector=self.collector.address,
                                         site=f"127.0.0.1:{self.site.port}", settings=SETTINGS)
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        if getattr(self, "edge", None) is not None:
            self.edge.stop()
        if self.site is not None:
            self.site.stop()
        self.collector.stop()


class Flood:
    """Silent connections from each address, held PER_ADDRESS + 25 at a time, those the
    edge closes reopened every second, until `most` have been opened in all."""

    def __init__(self, port: int, most: int) -> None:
        self.port = port
        self.most = most
        self.opened = 0
        self.refused_at_once = 0  # closed by the edge within 1 s of opening
        self.closed_later = 0  # closed by the edge after that (silent too long)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._hold, args=(a,), daemon=True)
                         for a in FLOOD_ADDRESSES]

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(60)

    def _take(self) -> bool:
        with self._lock:
            if self.opened >= self.most:
                return False
            self.opened += 1
            return True

    def _hold(self, address: str) -> None:
        held: dict[socket.socket, float] = {}  # socket -> when opened
        watch = selectors.DefaultSelector()  # epoll: thousands of descriptors
        try:
            while not self._stop.is_set():
                while len(held) < PER_ADDRESS + 25 and self._take():
                    try:
                        sock = socket.create_connection(("127.0.0.1", self.port), timeout=5,
                                                        source_address=(address, 0))
                    except OSError:
                        with self._lock:
                            self.refused_at_once += 1
                        continue
                    held[sock] = time.monotonic()
                    watch.register(sock, selectors.EVENT_READ)
                ready = watch.select(0.1) if held else []
                for key, _ in ready:
                    sock = key.fileobj
                    try:
                        ended = sock.recv(4096) == b""
                    except OSError:
                        ended = True
                    if ended:
                        opened = held.pop(sock)
                        watch.unregister(sock)
                        sock.close()
                        with self._lock:
                            if time.monotonic() - opened < 1.0:
                                self.refused_at_once += 1
                            else:
                                self.closed_later += 1
                self._stop.wait(1.0)  # then reopen what the edge closed
        finally:
            watch.close()
            for sock in held:
                sock.close()


def flood_part(folder: Path, binary: Path, *, connections: int, seconds: float) -> Tally:
    """edge-flood (see the module's docstring)."""
    tally = Tally("edge-flood")
    stack = Stack(folder / "flood", binary)
    flood = Flood(stack.edge.grpc_port, connections)
    latencies: list[float] = []
    credentials = grpc.ssl_channel_credentials(stack.edge.ca.read_bytes())
    try:
        with Relay(("127.0.0.1", stack.edge.grpc_port), CLIENT_ADDRESS) as relay:
            flood.start()
            deadline = time.monotonic() + seconds
            # A new client every quarter second for the whole `seconds`, while the flood
            # opens its connections and holds them.
            while time.monotonic() < deadline:
                channel = grpc.secure_channel(
                    relay.address, credentials,
                    options=[("grpc.ssl_target_name_override", HOSTNAME),
                             ("grpc.use_local_subchannel_pool", 1)])
                new_client_call(channel, stack.token, tally, latencies)
                time.sleep(0.25)
            flood.stop()
    finally:
        flood.stop()
        stack.stop()
    if latencies:
        tally.recovered(max(latencies))
    latencies.sort()
    median = latencies[len(latencies) // 2] if latencies else 0.0
    tally.note = (f"{flood.opened:,} silent connections from {len(FLOOD_ADDRESSES)} addresses "
                  f"(limit {PER_ADDRESS} each): {flood.refused_at_once:,} refused at once, "
                  f"{flood.closed_later:,} closed as silent; a new client through TLS: "
                  f"{len(latencies)} of {tally.tried} calls answered, median {median:.3f} s, "
                  f"slowest {max(latencies, default=0):.2f} s")
    return tally


def visitors_part(folder: Path, binary: Path, *, rounds: int, visitors: int = 100) -> Tally:
    """edge-visitors (see the module's docstring)."""
    tally = Tally("edge-visitors")
    stack = Stack(folder / "visitors", binary)
    slowest = 0.0
    try:
        for _ in range(rounds):
            gate = threading.Barrier(visitors)

            def visit(_: int, gate: threading.Barrier = gate) -> tuple[str, float]:
                gate.wait(timeout=120)
                began = time.monotonic()
                connection = http.client.HTTPSConnection(
                    HOSTNAME, stack.edge.site_port, context=stack.edge.tls_context(),
                    timeout=60)
                try:
                    connection.request("GET", "/")
                    answer = connection.getresponse()
                    answer.read()
                    return str(answer.status), time.monotonic() - began
                except OSError as exc:
                    return type(exc).__name__, time.monotonic() - began
                finally:
                    connection.close()

            with ThreadPoolExecutor(visitors) as pool:
                for status, took in pool.map(visit, range(visitors)):
                    tally.tried += 1
                    tally.code("OK" if status == "200" else status)
                    slowest = max(slowest, took)
                    if status != "200":
                        tally.wrong += 1
    finally:
        stack.stop()
    tally.recovered(slowest)
    tally.note = (f"{rounds} round(s) of {visitors} visitors at once from 127.0.0.1 through "
                  f"the edge: {tally.codes.get('OK', 0)} of {tally.tried} pages answered 200, "
                  f"the slowest in {slowest:.1f} s")
    return tally


def edge_parts(folder: Path, *, short: bool) -> dict[str, Callable[[], Tally]]:
    """The parts by name, for tests/chaos/test_campaign.py: each a callable returning its
    Tally (a Tally saying why, where HAProxy is missing)."""
    binary = haproxy_binary()

    def missing(name: str) -> Tally:
        return Tally(name, note=f"skipped: {MISSING}")

    if binary is None:
        return {"edge-flood": lambda: missing("edge-flood"),
                "edge-visitors": lambda: missing("edge-visitors")}
    return {
        "edge-flood": lambda: flood_part(folder, binary,
                                         connections=3_000 if short else 10_000,
                                         seconds=30 if short else 60),
        "edge-visitors": lambda: visitors_part(folder, binary, rounds=2 if short else 5),
    }
