"""Fault campaign parts that attack the collector, each telling what a legitimate client
saw meanwhile: floods of idle connections (silent, or HTTP/2 clients gone quiet), a
token guesser beside valid callers of its address, tampered backups.

Every attack goes to 127.0.0.1 only, is bounded in count and in time, and stops by
itself.
"""

from __future__ import annotations

import random
import selectors
import shutil
import socket
import statistics
import subprocess
import threading
import time
from pathlib import Path

import grpc
from chaos_support import (
    CLI,
    Collector,
    Submitters,
    Tally,
    answer_code,
    bearer,
    check_database,
    make_run,
    new_client_call,
)
from tampering import TAMPERED

from gpubench.v1 import collector_pb2 as pb
from gpubench.v1 import collector_pb2_grpc

# What the collector promises a legitimate client, and what these parts count as wrong
# past it (s): an answer beside a flood.
# What an HTTP/2 client sends first: the connection preface and an empty SETTINGS frame.
HTTP2_GREETING = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"


# -- a flood of idle connections -------------------------------------------------------------

class Flood:
    """`count` TCP connections to 127.0.0.1:`port` from `sources` (in turn) that send
    `greeting` and then nothing; those the collector closed are opened again every
    `reopen_s`, until `stop` (or `most` openings in all)."""

    def __init__(self, port: int, count: int, *, most: int, sources: tuple[str, ...],
                 greeting: bytes = b"", reopen_s: float = 1.0) -> None:
        self.port, self.count, self.most, self.reopen_s = port, count, most, reopen_s
        self.sources, self.greeting = sources, greeting
        self.opened = 0
        self.closed_by_collector = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        self._thread.start()
        deadline = time.monotonic() + 30
        while self.opened < self.count and time.monotonic() < deadline:
            time.sleep(0.05)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)

    def _open(self, selector: selectors.BaseSelector) -> None:
        sock = socket.socket()
        sock.settimeout(5)
        try:
            sock.bind((self.sources[self.opened % len(self.sources)], 0))
            sock.connect(("127.0.0.1", self.port))
            if self.greeting:
                sock.sendall(self.greeting)
        except OSError:
            sock.close()
            return
        sock.setblocking(False)
        selector.register(sock, selectors.EVENT_READ)
        self.opened += 1

    def _run(self) -> None:
        selector = selectors.DefaultSelector()
        reopen_at = 0.0
        try:
            while not self._stop.is_set():
                if time.monotonic() >= reopen_at:
                    reopen_at = time.monotonic() + self.reopen_s
                    while (len(selector.get_map()) < self.count and self.opened < self.most
                           and not self._stop.is_set()):
                        self._open(selector)
                for key, _ in selector.select(timeout=0.05):
                    try:
                        data = key.fileobj.recv(65536)  # type: ignore[union-attr]
                    except OSError:
                        data = b""
                    if not data:  # closed by the collector: open another (its SETTINGS,
                        # answering a greeting, are data: read and kept open)
                        selector.unregister(key.fileobj)
                        key.fileobj.close()  # type: ignore[union-attr]
                        self.closed_by_collector += 1
        finally:
            for key in list(selector.get_map().values()):
                key.fileobj.close()  # type: ignore[union-attr]
            selector.close()


def flood_part(name: str, folder: Path, *, connections: int, seconds: float,
               sources: tuple[str, ...] = ("127.0.0.1",), greeting: bytes = b"") -> Tally:
    """`connections` idle connections from `sources` that send `greeting` and then
    nothing, those closed reopened every second, for `seconds`, against a bare `serve`;
    meanwhile a new client from 127.0.0.1 (a fresh connection each time) calls
    CheckAccess every quarter second and must be answered within chaos_support.ANSWER_WITHIN_S."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)  # a descriptor per connection
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    tally = Tally(name)
    collector = Collector(folder / f"{name}.duckdb")
    token = collector.token("lab")
    collector.start()
    flood = Flood(collector.port, connections, most=connections * 200, sources=sources,
                  greeting=greeting)
    latencies: list[float] = []
    try:
        flood.start()
        until = time.monotonic() + seconds
        while time.monotonic() < until:
            channel = grpc.insecure_channel(collector.address,
                                            options=[("grpc.use_local_subchannel_pool", 1)])
            new_client_call(channel, token, tally, latencies)
            time.sleep(0.25)
    finally:
        flood.stop()
        collector.stop()
    if latencies:
        tally.recovered(max(latencies))
    kind = "HTTP/2 clients gone quiet" if greeting else "silent connections"
    tally.note = (f"a new client beside {connections:,} {kind} from {len(sources)} "
                  f"address(es), reopened every second ({flood.opened:,} opened, "
                  f"{flood.closed_by_collector:,} closed by the collector): "
                  f"{len(latencies)} of {tally.tried} calls answered, median "
                  f"{_median(latencies):.3f} s, slowest {max(latencies, default=0):.2f} s")
    return tally


# -- a guesser beside valid callers of its address -------------------------------------------

def lockout_part(folder: Path, *, seconds: float) -> Tally:
    """A wrong token every 2 s for `seconds`, and four threads guessing flat out in the
    middle third, all from 127.0.0.1; meanwhile valid callers of the same address
    submit, read with an admin token and read without one (--public-read): each of their
    calls must be answered, each guess UNAUTHENTICATED (or, past the address's failures
    a minute, RESOURCE_EXHAUSTED)."""
    tally = Tally("lock-out")
    collector = Collector(folder / "lockout.duckdb", extra=("--public-read",))
    user = collector.token("lab")
    admin = collector.token("root", admin=True)
    collector.start()
    stop = threading.Event()
    began = time.monotonic()
    valid: list[float] = []
    guesses: list[float] = []
    lock = threading.Lock()

    def call(kind: str, pause: float, make, until: threading.Event = stop) -> None:
        channel = grpc.insecure_channel(collector.address)
        stub = collector_pb2_grpc.CollectorStub(channel)
        while not until.is_set():
            method, request, metadata, expected = make(stub)
            started = time.monotonic()
            code = answer_code(method, request, metadata=metadata, timeout=30)
            took = time.monotonic() - started
            tally.code(code)
            with lock:
                tally.tried += 1
                (valid if kind == "valid" else guesses).append(took)
                if code not in expected:
                    tally.wrong += 1
                    tally.note = f"a {kind} call answered {code}"
            until.wait(pause)
        channel.close()

    def guess(stub):
        return (stub.CheckAccess, pb.CheckAccessRequest(),
                bearer(f"gpb_guess-{random.getrandbits(64):x}"),
                ("UNAUTHENTICATED", "RESOURCE_EXHAUSTED"))

    def burst() -> None:
        over = threading.Event()
        if stop.wait(seconds / 3):
            return
        workers = [threading.Thread(target=call, args=("guess", 0.0, guess, over), daemon=True)
                   for _ in range(4)]
        for worker in workers:
            worker.start()
        stop.wait(seconds / 3)
        over.set()
        for worker in workers:
            worker.join(60)

    callers = [
        ("guess", 2.0, guess),
        ("valid", 0.1, lambda s: (s.SubmitRun, pb.SubmitRunRequest(run=make_run()),
                                  bearer(user), ("OK",))),
        ("valid", 0.2, lambda s: (s.ListRuns, pb.ListRunsRequest(), bearer(admin), ("OK",))),
        ("valid", 0.2, lambda s: (s.ListRuns, pb.ListRunsRequest(), None, ("OK",))),
    ]
    threads = [threading.Thread(target=call, args=c, daemon=True) for c in callers]
    threads.append(threading.Thread(target=burst, daemon=True))
    try:
        for thread in threads:
            thread.start()
        stop.wait(seconds)
    finally:
        stop.set()
        for thread in threads:
            thread.join(60)
        collector.stop()
    tally.recovered(max(valid, default=0.0))
    if not tally.note:
        tally.note = (f"valid calls from the guesser's address (submissions, admin and "
                      f"tokenless reads): {len(valid)} of {len(valid)} answered, slowest "
                      f"{max(valid, default=0):.2f} s; {len(guesses)} guesses over "
                      f"{time.monotonic() - began:.0f} s, each UNAUTHENTICATED or "
                      f"RESOURCE_EXHAUSTED ({tally.codes.get('RESOURCE_EXHAUSTED', 0)}), "
                      f"the slowest "
                      f"answered after {max(guesses, default=0):.1f} s")
    return tally


# -- tampered backups ------------------------------------------------------------------------

def tampered_part(folder: Path, *, runs: int) -> Tally:
    """A live backup of a collector holding `runs` runs, tampered with in every way of
    tests/tampering.py, each copy restored with the right key: each must be refused
    (exit 6) with its reason and leave no database; the backup as taken must restore
    every acknowledged run."""
    tally = Tally("tampered backups")
    collector = Collector(folder / "backed-up.duckdb")
    token = collector.token("lab")
    collector.token("root", admin=True)
    collector.start()
    submitters = Submitters(collector.address, token, tally, target=runs)
    taken = folder / "backup"
    try:
        submitters.start()
        submitters.wait()
        done = subprocess.run([*CLI, "backup", str(taken), "--db", str(collector.db)],
                              capture_output=True, text=True, timeout=300)
        if done.returncode != 0:
            raise RuntimeError(f"the backup failed: {done.stderr.strip()}")
    finally:
        submitters.stop()
        collector.stop()
    key = collector.db.with_name(collector.db.name + ".backup-key")
    refused = 0
    for number, (case, (tamper, reason)) in enumerate(TAMPERED.items()):
        copy = folder / f"tampered-{number}"
        shutil.copytree(taken, copy, symlinks=True)
        tamper(copy, key.read_bytes().strip())
        target = folder / f"restored-{number}.duckdb"
        tally.tried += 1
        done = subprocess.run([*CLI, "restore", str(copy), "--db", str(target), "--key",
                               str(key)], capture_output=True, text=True, timeout=300)
        left = [p.name for p in folder.iterdir() if p.name.startswith(target.name)
                and not p.name.endswith(".backup-key")]
        said = " ".join(done.stderr.split())  # the message as one line, its wrapping folded
        if done.returncode == 6 and reason in said and not left:
            tally.code("refused")
            refused += 1
        else:
            tally.code("restored" if done.returncode == 0 else f"exit {done.returncode}")
            tally.wrong += 1
            tally.note = f"{case}: exit {done.returncode}, left {left}: {done.stderr[-200:]}"
    whole = folder / "restored.duckdb"
    tally.tried += 1
    began = time.monotonic()
    done = subprocess.run([*CLI, "restore", str(taken), "--db", str(whole), "--key", str(key)],
                          capture_output=True, text=True, timeout=600)
    tally.recovered(time.monotonic() - began)
    if done.returncode != 0:
        tally.wrong += 1
        tally.note = f"the untouched backup was refused: {done.stderr.strip()[-200:]}"
        return tally
    tally.code("OK")
    check_database(tally, whole, submitters.acknowledged, submitters.submitted)
    if not tally.note:
        tally.note = (f"{refused} tampered copies refused, each naming why, none leaving a "
                      f"database; the backup as taken restored all "
                      f"{len(submitters.acknowledged)} acknowledged runs")
    return tally


# -- a storm of front-end kills --------------------------------------------------------------

def _median(values: list[float]) -> float:
    return statistics.median(values) if values else 0.0
