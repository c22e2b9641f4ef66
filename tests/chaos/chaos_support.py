"""What the fault campaign's parts (tests/chaos/test_campaign.py) run with: real
collector processes on loopback, submitters that retry until acknowledged, the tally of
one part, what a database holds afterwards, and the table."""

from __future__ import annotations

import os
import re
import select
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import grpc
from factories import make_run  # the test suite's realistic run records (tests/)

from gpubench.collector.auth import TokenBook
from gpubench.collector.queries import RunFilter
from gpubench.collector.store import Store
from gpubench.v1 import collector_pb2 as pb
from gpubench.v1 import collector_pb2_grpc

CLI = [sys.executable, "-m", "gpubench.collector.cli"]
GPUS = ("Tesla T4", "NVIDIA H200", "NVIDIA A100-SXM4-80GB", "NVIDIA L4")
# Codes a submitter retries (the collector stopping or killed, a full disk, a deadline).
RETRIED = {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.RESOURCE_EXHAUSTED,
           grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.CANCELLED,
           grpc.StatusCode.ABORTED, grpc.StatusCode.UNKNOWN}
SHORT_CODES = {"INVALID_ARGUMENT": "INVALID", "RESOURCE_EXHAUSTED": "EXHAUSTED",
               "UNAUTHENTICATED": "UNAUTH", "PERMISSION_DENIED": "DENIED",
               "UNAVAILABLE": "UNAVAIL", "ALREADY_EXISTS": "EXISTS",
               "DEADLINE_EXCEEDED": "DEADLINE", "FAILED_PRECONDITION": "PRECOND"}


@dataclass
class Tally:
    """What one part tried and what became of it."""

    part: str
    tried: int = 0
    lost: int = 0  # acknowledged, then not in the database
    duplicated: int = 0  # a run stored twice, or a run stored that was never submitted
    wrong: int = 0  # an answer the part did not allow (a valid run refused, a bad token let in)
    codes: Counter = field(default_factory=Counter)
    recover_s: float | None = None  # the longest from a fault to the next acknowledgement
    note: str = ""
    details: str = ""  # what the part shows below the campaign's table (its cases)
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def code(self, name: str) -> None:
        with self.lock:
            self.codes[name] += 1

    def recovered(self, seconds: float) -> None:
        with self.lock:
            self.recover_s = max(self.recover_s or 0.0, seconds)

    @property
    def failed(self) -> bool:
        return bool(self.lost or self.duplicated or self.wrong)


@dataclass
class Campaign:
    """The campaign of one pytest session: its size, its seed, and each part's tally with
    its seconds, in the order the parts ran (tests/chaos/conftest.py shows them)."""

    short: bool
    seed: int
    tallies: list[tuple[Tally, float]] = field(default_factory=list)

    def add(self, tally: Tally, seconds: float) -> None:
        self.tallies.append((tally, seconds))

    def report(self) -> list[str]:
        """The lines of the report: each part's seconds, the table, what the parts showed
        below it, and the verdict."""
        lines = [f"{'short' if self.short else 'full'} size, seed {self.seed} "
                 f"(--chaos-seed {self.seed} repeats it)"]
        lines += [f"  {tally.part}: {seconds:.0f} s" for tally, seconds in self.tallies]
        tallies = [tally for tally, _ in self.tallies]
        lines += ["", table(tallies)]
        lines += [line for t in tallies if t.details for line in ("", t.details)]
        failed = [t.part for t in tallies if t.failed]
        total = sum(seconds for _, seconds in self.tallies)
        lines += ["", f"{len(tallies)} part(s) in {total:.0f} s; "
                  + (f"FAILED: {', '.join(failed)}" if failed
                     else "nothing lost, duplicated or wrong")]
        return lines


def free_port() -> int:
    """A port free on loopback now (the collector restarts on the same one)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Collector:
    """`gpubench-collector serve` on 127.0.0.1:PORT over DB; started again after a kill."""

    def __init__(self, db: Path, *, port: int | None = None,
                 extra: tuple[str, ...] = ()) -> None:
        self.db = db
        self.extra = extra  # more options of serve
        self.port = port or free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.process: subprocess.Popen[str] | None = None
        # Its log (stderr), of every start; beside the database, whose folder may fill.
        self.log = db.parent.parent / f"{db.parent.name}-{db.name}.log"

    def token(self, name: str, *, admin: bool = False) -> str:
        """A new token, made in the database before the collector starts."""
        store = Store(self.db)
        try:
            return TokenBook(store).create(name, admin=admin)[1]
        finally:
            store.close()

    def start(self, timeout: float = 60.0) -> None:
        self.process = subprocess.Popen(
            [*CLI, "serve", "--db", str(self.db), "--port", str(self.port), "--rate-limit", "0",
             *self.extra],
            stdout=subprocess.PIPE, stderr=self.log.open("a"), text=True,
        )
        deadline, seen = time.monotonic() + timeout, ""
        while time.monotonic() < deadline and self.process.poll() is None:
            if select.select([self.process.stdout], [], [], 0.2)[0]:
                line = self.process.stdout.readline()
                seen += line
                if re.search(r" on 127\.0\.0\.1:\d+ ", line):
                    return
        raise RuntimeError(f"the collector on {self.db} did not start: {seen!r}")

    def kill(self) -> None:
        """kill -9 the collector."""
        os.kill(self.process.pid, signal.SIGKILL)
        self.process.wait(30)

    def stop(self) -> None:
        """SIGTERM, and wait (kill -9 after 60 s)."""
        if self.process is None or self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(60)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(10)


def bearer(token: str) -> tuple[tuple[str, str], ...]:
    """Call metadata carrying `token`."""
    return (("authorization", f"Bearer {token}"),)


# A new client beside a flood must be answered within this (s).
ANSWER_WITHIN_S = 2.0


def new_client_call(channel: grpc.Channel, token: str, tally: Tally,
                    latencies: list[float]) -> None:
    """One CheckAccess of a new client on `channel` (closed after): its answer counted in
    `tally`, its latency in `latencies`; wrong if refused or slower than
    ANSWER_WITHIN_S."""
    began = time.monotonic()
    tally.tried += 1
    try:
        collector_pb2_grpc.CollectorStub(channel).CheckAccess(
            pb.CheckAccessRequest(), metadata=bearer(token), timeout=10)
        took = time.monotonic() - began
        latencies.append(took)
        tally.code("OK")
        if took > ANSWER_WITHIN_S:
            tally.wrong += 1
    except grpc.RpcError as exc:
        tally.code(exc.code().name)
        tally.wrong += 1
    finally:
        channel.close()


def raw_submit(channel: grpc.Channel) -> Callable:
    """SubmitRun taking the request as bytes (to send what no client would)."""
    return channel.unary_unary("/gpubench.v1.Collector/SubmitRun",
                               request_serializer=lambda b: b,
                               response_deserializer=pb.SubmitRunResponse.FromString)


def code_name(code: grpc.StatusCode) -> str:
    return code.name


def answer_code(call: Callable, *args, **kwargs) -> str:
    """The name of the status code `call(*args, **kwargs)` ends with ("OK" when it
    returns)."""
    try:
        call(*args, **kwargs)
    except grpc.RpcError as exc:
        return exc.code().name
    return "OK"


class Submitters:
    """Threads submitting fresh runs, each retried (the same run_id) until acknowledged,
    until `target` runs are acknowledged in all or `deadline_s` passes."""

    def __init__(self, address: str, token: str, tally: Tally, *, threads: int = 8,
                 target: int = 3000, deadline_s: float = 300.0) -> None:
        self.address, self.token, self.tally = address, token, tally
        self.threads, self.target, self.deadline_s = threads, target, deadline_s
        self.acknowledged: dict[str, str] = {}  # run_id -> content_sha256
        self.submitted: set[str] = set()
        self.last_fault = 0.0  # when the part last caused a fault (monotonic)
        self._waiting_since_fault = False
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._workers = [threading.Thread(target=self._work, daemon=True)
                         for _ in range(threads)]

    def start(self) -> None:
        self.started = time.monotonic()
        for worker in self._workers:
            worker.start()

    def fault(self) -> None:
        """Note a fault now: the next acknowledgement measures the recovery."""
        with self._lock:
            self.last_fault = time.monotonic()
            self._waiting_since_fault = True

    def done(self) -> bool:
        return len(self.acknowledged) >= self.target or self._stop.is_set()

    def wait(self) -> None:
        for worker in self._workers:
            worker.join()

    def stop(self) -> None:
        self._stop.set()
        self.wait()

    def _work(self) -> None:
        metadata = (("authorization", f"Bearer {self.token}"),)
        channel = grpc.insecure_channel(self.address)
        stub = collector_pb2_grpc.CollectorStub(channel)
        deadline = self.started + self.deadline_s
        while len(self.acknowledged) < self.target and not self._stop.is_set():
            if time.monotonic() > deadline:
                self._stop.set()
                self.tally.note = f"stopped at the {self.deadline_s:.0f} s bound"
                break
            run = make_run(gpu_name=GPUS[len(self.submitted) % len(GPUS)])
            with self._lock:
                self.submitted.add(run.run_id)
            while not self._stop.is_set():
                if time.monotonic() > deadline:  # a collector that never comes back
                    self._stop.set()
                    self.tally.note = (f"stopped at the {self.deadline_s:.0f} s bound, "
                                       "the collector not answering")
                    with self.tally.lock:
                        self.tally.wrong += 1
                    break
                self.tally.code("tries")
                try:
                    ack = stub.SubmitRun(pb.SubmitRunRequest(run=run), metadata=metadata,
                                         timeout=10)
                except grpc.RpcError as exc:
                    self.tally.code(code_name(exc.code()))
                    if exc.code() not in RETRIED:
                        with self.tally.lock:
                            self.tally.wrong += 1  # a valid run refused for good
                        break
                    # A fresh connection: a failed channel waits before reconnecting.
                    channel.close()
                    time.sleep(0.05)
                    channel = grpc.insecure_channel(self.address)
                    stub = collector_pb2_grpc.CollectorStub(channel)
                    continue
                self.tally.code("OK")
                now = time.monotonic()
                with self._lock:
                    self.acknowledged[ack.run_id] = ack.content_sha256
                    if self._waiting_since_fault:
                        self._waiting_since_fault = False
                        self.tally.recovered(now - self.last_fault)
                break
        channel.close()


def stored(db: Path) -> tuple[Counter, dict[str, str]]:
    """What the database `db` holds (opened here: no collector may serve it): how often
    each run_id is stored, and each stored run's content hash."""
    store = Store(db)
    try:
        counts: Counter = Counter()
        hashes: dict[str, str] = {}
        token = ""
        while True:
            page, token = store.runs.list(RunFilter(), page_size=1000, page_token=token)
            for run in page:
                counts[run.run.run_id] += 1
                hashes[run.run.run_id] = run.content_sha256
            if not token:
                break
        return counts, hashes
    finally:
        store.close()


def check_database(tally: Tally, db: Path, acknowledged: dict[str, str],
                   submitted: set[str]) -> None:
    """Count in `tally` the acknowledged runs `db` lacks, and the runs it holds twice or
    never submitted; a stored run whose content differs from its acknowledgement is
    wrong."""
    counts, hashes = stored(db)
    for run_id, sha in acknowledged.items():
        if run_id not in counts:
            tally.lost += 1
        elif hashes[run_id] != sha:
            tally.wrong += 1
    tally.duplicated += sum(n - 1 for n in counts.values() if n > 1)
    tally.duplicated += sum(1 for run_id in counts if run_id not in submitted)


def table(tallies: list[Tally]) -> str:
    """The campaign's table, 80 columns: the codes column wraps."""
    head = (f"{'part':<18}{'tried':>7}{'lost':>5}{'dup':>4}{'wrong':>6}  "
            f"{'codes seen':<29}{'recover':>9}")
    lines = [head, "-" * 80]
    for t in tallies:
        items = [f"{SHORT_CODES.get(name, name)} {n}" for name, n in
                 sorted(t.codes.items(), key=lambda kv: -kv[1]) if name != "tries"]
        wrapped = _pack(items, 29)
        recover = f"{t.recover_s:.2f} s" if t.recover_s is not None else "-"
        lines.append(f"{t.part:<18}{t.tried:>7}{t.lost:>5}{t.duplicated:>4}{t.wrong:>6}  "
                     f"{wrapped[0]:<29}{recover:>9}")
        lines += [f"{'':<42}{more}" for more in wrapped[1:]]
        if t.note:
            lines += [f"{'':<4}{more}" for more in textwrap.wrap(t.note, 76)]
    return "\n".join(lines)


def _pack(items: list[str], width: int) -> list[str]:
    """`items` joined with ", " into lines of at most `width` (an item is never split;
    a line that another follows ends with the comma, which counts)."""
    lines: list[str] = []
    for item in items:
        if lines and len(lines[-1]) + 2 + len(item) + 1 <= width:
            lines[-1] += ", " + item
        else:
            if lines:
                lines[-1] += ","
            lines.append(item)
    return lines or ["-"]
