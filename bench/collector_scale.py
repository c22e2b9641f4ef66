"""The collector at community scale, an older revision beside this tree in one run.

    .venv/bin/python bench/collector_scale.py --runs 100000
    .venv/bin/python bench/collector_scale.py --runs 100000 1000000 --base 8a0f634

For each --runs N, a database is prefilled with N plausible runs: BIG_SHARE of them in
one comparison group (1x NVIDIA H200, B0, the default run, as a popular card's would
be), the rest spread over cards, models, counts, backends and precisions
(collector_bench.synthetic_runs), from SUBMITTERS submitters. Each side (the base
revision, exported with `git archive` and installed into a folder; this tree) fills
its own copy with its own code (an older side scores its outliers as it stores them).

Then, in rounds that alternate which side goes first, a fresh copy of the side's
database is served by `gpubench-collector serve` and --clients connections (4 client
processes) submit --submissions runs, every call timed: once into the big group and
once into a group that has no runs yet. Printed per measurement: acknowledgements a
second, p50, p99 and the slowest answer, and the collector's CPU per acknowledgement.
After the submissions, each read is timed over gRPC on the same collector: READS calls
each right after a new run was stored in the big group (so nothing computed before it
is of use; median and slowest), then READS calls with nothing stored in between, then
READS calls each right after a run stored in another group (medians). Last, each
side's medians and the ratio new/old.
On a shared machine the absolute figures move with the load; the ratios of one
interleaved run are what compare.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT / "tests"))

import collector_ab  # noqa: E402
from collector_ab import CLIENT_PROCESSES, env_for, install_base, start_collector  # noqa: E402

# The share of the runs in the one big group, and how many tokens submitted them.
BIG_SHARE = 0.8
SUBMITTERS = 300
# What each target's submissions are: into the big group, or a group with no runs
# (the prefill leaves every run of this card and model out).
TARGETS = {
    "big group": {"gpu_name": "NVIDIA H200", "model": "B0"},
    "new group": {"gpu_name": "NVIDIA RTX 6000 Ada Generation", "model": "B3"},
}
# How many times each read is timed (after one call that warms it).
READS = 10
# Rows generated and written at a time.
CHUNK = 100_000


# -- the prefilled runs -----------------------------------------------------------------


def write_runs(path: Path, n: int) -> None:
    """`n` plausible runs as a Parquet file of this tree's runs columns."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq
    from collector_bench import synthetic_runs
    from factories import make_run

    from gpubench.collector.columns import RUN_COLUMNS
    from gpubench.collector.rows import run_row

    big_run = make_run(**TARGETS["big group"])
    big = run_row(big_run, "")
    big["record"] = big_run.SerializeToString()
    new = TARGETS["new group"]
    with pq.ParquetWriter(path, RUN_COLUMNS) as out:
        for offset in range(0, n, CHUNK):
            size = min(CHUNK, n - offset)
            table = synthetic_runs(size, seed=offset + 1)
            rng = np.random.default_rng(offset + 2)
            in_big = rng.random(size) < BIG_SHARE
            noise = rng.lognormal(0.0, 0.04, size)
            noise[rng.random(size) < 0.01] *= rng.uniform(1.5, 3.0)  # a busy machine's
            columns = {}
            for name in RUN_COLUMNS.names:
                values = table.column(name).to_pylist()
                if name in big and name not in ("run_id", "received_at", "created_at",
                                                 "content_sha256", "submitter"):
                    values = [big[name] if b else v for b, v in zip(in_big, values,
                                                                     strict=True)]
                columns[name] = values
            columns["epoch2_seconds"] = [
                big["epoch2_seconds"] * x if b else v
                for b, x, v in zip(in_big, noise, columns["epoch2_seconds"], strict=True)]
            columns["submitter"] = [f"lab-{i}" for i in rng.integers(0, SUBMITTERS, size)]
            keep = [not (g == new["gpu_name"] and m == new["model"])
                    for g, m in zip(columns["gpu_name"], columns["model"], strict=True)]
            arrays = [pa.array([v for v, k in zip(columns[name], keep, strict=True) if k],
                               RUN_COLUMNS.field(name).type) for name in RUN_COLUMNS.names]
            out.write_table(pa.Table.from_arrays(arrays, schema=RUN_COLUMNS))


def prefill(parquet: str, db: str) -> None:
    """Fill a new database at `db` with the runs of `parquet`, with this process's
    collector code (a side's): the columns its runs table has, and the outlier scores
    or the table of groups where it keeps them."""
    from gpubench.collector import outliers
    from gpubench.collector.store import Store

    store = Store(db)
    try:
        with store.database.write_lock:
            con = store.database.cursor()
            have = [c for (c,) in con.execute(
                "SELECT column_name FROM information_schema.columns "
                "WHERE table_name = 'runs'").fetchall()]
            wanted = [c for c in have
                      if c in {n for (n,) in con.execute(
                          f"SELECT name FROM parquet_schema('{parquet}')").fetchall()}]
            con.execute(f"INSERT INTO runs ({', '.join(wanted)}) SELECT {', '.join(wanted)} "
                        f"FROM read_parquet('{parquet}')")
            if hasattr(outliers, "rescore"):  # a side that stores its scores
                outliers.rescore(con, None)
            if hasattr(outliers, "index_groups"):  # a side that keeps its groups' versions
                outliers.index_groups(con)
    finally:
        store.close()


# -- one side's collector, submissions and reads ------------------------------------------


def client(address: str, token: str, threads: int, each: int, target: str) -> None:
    """One client process: `threads` channels submitting `each` runs apiece into
    `target`; prints every call's latency (s) as one JSON line."""
    collector_ab.client(address, token, threads, each, TARGETS[target])


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def submissions(address: str, token: str, pid: int, args: argparse.Namespace,
                target: str) -> dict:
    """Time --submissions SubmitRun calls into `target` from --clients connections."""
    threads = args.clients // CLIENT_PROCESSES
    each = args.submissions // args.clients
    clients = [subprocess.Popen(
        [sys.executable, __file__, "--client", address, token, str(threads), str(each), target],
        env=env_for(None), stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        for _ in range(CLIENT_PROCESSES)]
    for c in clients:
        assert c.stdout.readline().strip() == "ready"
    cpu = _cpu_seconds(pid)
    began = time.perf_counter()
    for c in clients:
        c.stdin.write("go\n")
        c.stdin.flush()
    latencies = sorted(x for c in clients for x in json.loads(c.stdout.readline()))
    elapsed = time.perf_counter() - began
    cpu = _cpu_seconds(pid) - cpu
    for c in clients:
        c.wait(30)
    return {"per_second": len(latencies) / elapsed,
            "p50_ms": latencies[len(latencies) // 2] * 1000,
            "p99_ms": latencies[int(len(latencies) * 0.99)] * 1000,
            "max_ms": latencies[-1] * 1000,
            "cpu_ms": cpu / len(latencies) * 1000}


# The results site's pages timed beside the gRPC reads (the site reads through the API).
SITE_PAGES = {
    "site: overview /": "/",
    "site: runs /runs": "/runs",
    "site: a card's page /gpu/NVIDIA H200": "/gpu/NVIDIA%20H200",
    "site: leaderboard /leaderboard/B0": "/leaderboard/B0",
    "site: compare /compare/B0": "/compare/B0",
}


def start_site(site: Path | None, address: str, token: str, workdir: Path
               ) -> tuple[subprocess.Popen, str]:
    """`gpubench-collector web` of a side in front of its collector at `address`, and the
    site's base URL once it listens."""
    token_file = Path(tempfile.mkdtemp(prefix="site-", dir=workdir)) / "token"
    token_file.write_text(token + "\n")
    token_file.chmod(0o600)
    web = subprocess.Popen(
        [sys.executable, "-m", "gpubench.collector.cli", "web", "--collector", address,
         "--token-file", str(token_file), "--port", "0", "--timeout", "60"],
        env=env_for(site), cwd=workdir, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True)
    deadline, line = time.monotonic() + 120, ""
    while time.monotonic() < deadline:
        line = web.stdout.readline() if web.stdout else ""
        found = re.search(r"(http://127\.0\.0\.1:\d+)", line)
        if found:  # what it says from now on is read and dropped: a full pipe would stop it
            threading.Thread(target=web.stdout.read, daemon=True).start()
            return web, found.group(1)
        if not line and web.poll() is not None:
            break
    web.kill()
    raise SystemExit(f"the site did not start: {line!r}")


def reads(address: str, token: str, count: int = READS, site_url: str | None = None
          ) -> dict[str, tuple[float, float, float]]:
    """Each read's time (ms): the median over `count` calls each right after a new run
    was stored in the big group (nothing kept from before it), the slowest of those, the
    median over `count` calls with nothing stored in between, and the median over `count`
    calls each right after a run stored in another group (the big group's scores kept)."""
    import grpc
    from factories import make_run

    from gpubench.v1 import collector_pb2 as pb
    from gpubench.v1 import collector_pb2_grpc

    channel = grpc.insecure_channel(address)
    stub = collector_pb2_grpc.CollectorStub(channel)
    metadata = (("authorization", f"Bearer {token}"),)
    first = stub.ListRuns(pb.ListRunsRequest(page_size=50), metadata=metadata, timeout=60)
    calls = {
        "Compare, the big group's": lambda: stub.Compare(pb.CompareRequest(
            model="B0", backend="tensorflow", precision="float32", image_size=224,
            benchmark_version="1"), metadata=metadata, timeout=60),
        "Compare, 3 cards, a baseline": lambda: stub.Compare(pb.CompareRequest(
            model="B0", backend="tensorflow", precision="float32", image_size=224,
            benchmark_version="1", baseline_gpu="Tesla T4",
            gpu_names=["Tesla T4", "NVIDIA H200", "NVIDIA L4"]), metadata=metadata, timeout=60),
        "Leaderboard B0": lambda: stub.Leaderboard(pb.LeaderboardRequest(model="B0"),
                                                   metadata=metadata, timeout=60),
        "ListRuns, first 50": lambda: stub.ListRuns(pb.ListRunsRequest(page_size=50),
                                                    metadata=metadata, timeout=60),
        "ListRuns, next 50": lambda: stub.ListRuns(pb.ListRunsRequest(
            page_size=50, page_token=first.next_page_token), metadata=metadata, timeout=60),
        "ListRuns, 50 on H200": lambda: stub.ListRuns(pb.ListRunsRequest(
            page_size=50, gpu_name="NVIDIA H200"), metadata=metadata, timeout=60),
        # (by its short id: a prefilled run's record is its template's, of another id)
        "GetRun": lambda: stub.GetRun(pb.GetRunRequest(run_id=first.runs[0].short_id),
                                      metadata=metadata, timeout=60),
        "Stats": lambda: stub.Stats(pb.StatsRequest(), metadata=metadata, timeout=60),
    }
    for name, path in SITE_PAGES.items() if site_url else ():
        calls[name] = lambda url=site_url + path: _get(url)
    def timed(call) -> float:
        began = time.perf_counter()
        call()
        return (time.perf_counter() - began) * 1000

    found = {}
    for name, call in calls.items():
        call()
        fresh = []
        for _ in range(count):
            stub.SubmitRun(pb.SubmitRunRequest(run=make_run(**TARGETS["big group"])),
                           metadata=metadata, timeout=60)
            fresh.append(timed(call))
        again = [timed(call) for _ in range(count)]
        elsewhere = []
        for _ in range(count):
            stub.SubmitRun(pb.SubmitRunRequest(run=make_run(**TARGETS["new group"])),
                           metadata=metadata, timeout=60)
            elsewhere.append(timed(call))
        found[name] = (statistics.median(fresh), max(fresh), statistics.median(again),
                       statistics.median(elsewhere))
    channel.close()
    return found


def _get(url: str) -> None:
    """GET a site page; its status must be 200."""
    with urllib.request.urlopen(url, timeout=120) as answer:
        answer.read()
        if answer.status != 200:
            raise SystemExit(f"{url}: HTTP {answer.status}")


@contextlib.contextmanager
def served_copy(site: Path | None, db: Path, workdir: Path
                ) -> Iterator[tuple[subprocess.Popen, str]]:
    """A side's collector serving a fresh copy of its database `db` (its process and
    address); stopped and the copy removed at the end."""
    copy = Path(tempfile.mkdtemp(prefix="copy-", dir=workdir)) / "c.duckdb"
    shutil.copy(db, copy)
    server, address = start_collector(site, copy, workdir)
    try:
        yield server, address
    finally:
        server.terminate()
        server.wait(120)
        shutil.rmtree(copy.parent)


def measure(site: Path | None, db: Path, token: str, args: argparse.Namespace,
            workdir: Path, *, with_reads: bool) -> dict:
    """One side on a fresh copy of its prefilled database: each target's submissions
    (a copy each), and then the reads."""
    found: dict = {}
    for target in TARGETS:
        with served_copy(site, db, workdir) as (server, address):
            found.update(_measure_target(server, address, site, token, args, workdir,
                                         target, with_reads=with_reads))
    return found


def _measure_target(server: subprocess.Popen, address: str, site: Path | None, token: str,
                    args: argparse.Namespace, workdir: Path, target: str, *,
                    with_reads: bool) -> dict:
    """One target's submissions on a served copy (profiled with --py-spy into the big
    group), then, after the big group's, the reads."""
    found: dict = {}
    spy = None
    if args.py_spy and target == "big group":
        spy = subprocess.Popen([str(Path(sys.executable).with_name("py-spy")), "record",
                                "--gil", "-r", "200", "-f", "raw", "--nonblocking",
                                "-o", args.py_spy, "-p", str(server.pid)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(1)  # attached
    found[target] = submissions(address, token, server.pid, args, target)
    if spy is not None:
        spy.send_signal(signal.SIGINT)
        spy.wait(60)
        print(profile_shares(Path(args.py_spy)), flush=True)
    if with_reads and target == "big group":
        web, url = start_site(site, address, token, workdir) if args.site else (None, None)
        try:
            found["reads"] = reads(address, token, args.reads, url)
        finally:
            if web is not None:
                web.terminate()
                web.wait(60)
    return found


def profile_shares(path: Path, top: int = 25) -> str:
    """The functions of a py-spy raw profile (folded stacks) by the share of samples
    they are in, most first."""
    within: dict[str, int] = {}
    total = 0
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        total += int(count)
        for frame in {f.split(" (")[0] + " " + f.split("(")[-1].split(":")[0].rsplit("/")[-1]
                      for f in stack.split(";")}:
            within[frame] = within.get(frame, 0) + int(count)
    ranked = sorted(within.items(), key=lambda kv: -kv[1])[:top]
    return f"  py-spy, {total} samples holding the GIL:\n" + "\n".join(
        f"    {n / total:6.1%} {frame}" for frame, n in ranked)


# What an HTTP/2 client sends first: the connection preface and an empty SETTINGS frame.
HTTP2_GREETING = (b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
                  b"\x00\x00\x00\x04\x00\x00\x00\x00\x00")
# Idle connections one holding process opens at most, and the new clients timed.
HELD_PER_PROCESS = 8000
NEW_CLIENTS = 6


def hold(port: int, count: int, sources: int = 0, greet: bool = True) -> None:
    """A holding process: `count` connections to 127.0.0.1:`port` that send the HTTP/2
    greeting (or, not `greet`, nothing at all) and then nothing (no token), from
    127.0.0.1 or, with `sources`, spread over that many addresses 127.0.1.1, 127.0.1.2,
    ...; says how many it holds, keeps them until its input closes."""
    import resource
    import socket

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    held = []
    for i in range(count):
        source = (f"127.0.{1 + (i % sources) // 250}.{1 + (i % sources) % 250}", 0) \
            if sources else None
        try:
            sock = socket.create_connection(("127.0.0.1", port), timeout=10,
                                            source_address=source)
            if greet:
                sock.sendall(HTTP2_GREETING)
        except OSError:
            continue
        held.append(sock)
    print(len(held), flush=True)
    sys.stdin.read()


def _holders(port: int, count: int, sources: int, greet: bool
             ) -> tuple[list[subprocess.Popen], int]:
    """Holding processes (hold) of `count` connections to 127.0.0.1:`port`, and how many
    they opened; the connections last until each holder's input is closed."""
    holders = [subprocess.Popen(
        [sys.executable, __file__, "--hold", str(port),
         str(min(HELD_PER_PROCESS, count - offset)), str(sources), str(int(greet))],
        env=env_for(None), stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        for offset in range(0, count, HELD_PER_PROCESS)]
    return holders, sum(int(h.stdout.readline()) for h in holders if h.stdout)


def _release(holders: list[subprocess.Popen]) -> None:
    for h in holders:
        if h.stdin:
            h.stdin.close()
        h.wait(60)


def _new_clients(channel: Callable[[], Any], token: str) -> list[float | None]:
    """NEW_CLIENTS new clients' CheckAccess, each on a channel of its own made by
    `channel`, timed (s; None: no answer within 45 s)."""
    import grpc

    from gpubench.v1 import collector_pb2 as pb
    from gpubench.v1 import collector_pb2_grpc

    times: list[float | None] = []
    for _ in range(NEW_CLIENTS):
        opened = channel()
        began = time.perf_counter()
        try:
            collector_pb2_grpc.CollectorStub(opened).CheckAccess(
                pb.CheckAccessRequest(), timeout=45,
                metadata=(("authorization", f"Bearer {token}"),))
            times.append(time.perf_counter() - began)
        except grpc.RpcError:
            times.append(None)
        finally:
            opened.close()
    return times


# Each new client's channel its own connection (not one shared by the process).
_OWN_CONNECTION = [("grpc.use_local_subchannel_pool", 1)]


def idle_at_the_edge(db: Path, token: str, workdir: Path, count: int,
                     sources: int) -> tuple[int, list[float | None]]:
    """`count` silent connections (TCP only: never a TLS handshake) to the edge
    (docker/edge/haproxy.cfg, Debian's HAProxy from `make haproxy`) in front of this
    tree's collector, from `sources` addresses; then NEW_CLIENTS new clients from
    127.0.0.1 over TLS through the edge (_new_clients). Returns the descriptors the edge's
    process holds and the new clients' times."""
    import grpc
    from edge import MISSING, haproxy_binary, start_edge

    binary = haproxy_binary()
    if binary is None:
        raise SystemExit(f"--idle-edge: {MISSING}")
    holders: list[subprocess.Popen] = []
    # The site is not asked for here: an address nothing listens on.
    with served_copy(None, db, workdir) as (_, address), \
            start_edge(binary, workdir / f"edge-{os.getpid()}-{time.monotonic_ns()}",
                       collector=address, site="127.0.0.1:9") as edge:
        try:
            holders, opened = _holders(edge.grpc_port, count, sources, greet=False)
            time.sleep(2)
            held = len(os.listdir(f"/proc/{edge.process.pid}/fd"))
            credentials = grpc.ssl_channel_credentials(edge.ca.read_bytes())
            times = _new_clients(lambda: grpc.secure_channel(
                edge.grpc_address, credentials, options=_OWN_CONNECTION), token)
            print(f"  the edge: {opened:,} silent connections opened from {sources} "
                  f"addresses, HAProxy holding {held:,} descriptors", flush=True)
            return held, times
        finally:
            _release(holders)


def idle_connections(site: Path | None, db: Path, token: str, workdir: Path,
                     count: int) -> tuple[int, list[float | None]]:
    """How many of `count` idle connections a side's collector kept open, and each of
    NEW_CLIENTS new clients' CheckAccess time (_new_clients)."""
    import grpc

    holders: list[subprocess.Popen] = []
    with served_copy(site, db, workdir) as (server, address):
        try:
            holders, opened = _holders(int(address.rsplit(":", 1)[1]), count, 0, greet=True)
            time.sleep(2)  # past the cap gRPC closes them at once: let it
            open_now = len(os.listdir(f"/proc/{server.pid}/fd"))
            times = _new_clients(
                lambda: grpc.insecure_channel(address, options=_OWN_CONNECTION), token)
            print(f"  {opened:,} connections opened, the collector holding {open_now:,} "
                  "descriptors", flush=True)
            return open_now, times
        finally:
            _release(holders)


def side_database(site: Path | None, parquet: Path, folder: Path) -> tuple[Path, str]:
    """A side's prefilled database and an admin token of it."""
    folder.mkdir()
    db = folder / "c.duckdb"
    env = env_for(site)
    subprocess.run([sys.executable, __file__, "--prefill", str(parquet), str(db)], env=env,
                   check=True, cwd=folder, timeout=3600)
    token = subprocess.run([sys.executable, "-m", "gpubench.collector.cli", "token", "create",
                            "bench", "--admin", "--db", str(db)], env=env, cwd=folder,
                           capture_output=True, text=True, check=True,
                           timeout=600).stdout.strip()
    return db, token


def _line(label: str, f: dict) -> str:
    return (f"{label}: {f['per_second']:6.0f} acks/s, p50 {f['p50_ms']:.0f} ms, p99 "
            f"{f['p99_ms']:.0f} ms, slowest {f['max_ms']:.0f} ms, CPU {f['cpu_ms']:.2f} ms/ack")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, nargs="+", default=[100_000],
                        help="stored runs to measure at (default 100000)")
    parser.add_argument("--base", default="8a0f634", help="the old code's revision")
    parser.add_argument("--rounds", type=int, default=2, help="old/new pairs (default 2)")
    parser.add_argument("--submissions", type=int, default=2000,
                        help="runs submitted per measurement (default 2000)")
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--new-only", action="store_true", help="measure this tree alone")
    parser.add_argument("--reads", type=int, default=READS,
                        help=f"calls timed per read and way (default {READS})")
    parser.add_argument("--site", action="store_true",
                        help="also: time the results site's pages, served by each side's "
                             "`gpubench-collector web` in front of its collector")
    parser.add_argument("--idle", type=int, default=0,
                        help="also: this many idle connections, then new clients")
    parser.add_argument("--idle-edge", type=int, nargs=2, metavar=("N", "ADDRESSES"),
                        help="also: N silent connections to the edge (HAProxy, `make "
                             "haproxy`) in front of the new side's collector, from ADDRESSES "
                             "addresses, then new clients through it")
    parser.add_argument("--py-spy", metavar="FILE",
                        help="also: profile the collector during the submissions into the "
                             "big group with py-spy (installed beside this Python) into FILE "
                             "and print where its time goes")
    parser.add_argument("--client", nargs=5, help=argparse.SUPPRESS)
    parser.add_argument("--prefill", nargs=2, help=argparse.SUPPRESS)
    parser.add_argument("--hold", nargs=4, type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.client:
        address, token, threads, each, target = args.client
        client(address, token, int(threads), int(each), target)
        return
    if args.prefill:
        prefill(*args.prefill)
        return
    if args.hold:
        port, count, sources, greet = args.hold
        hold(port, count, sources, bool(greet))
        return
    folder = Path(tempfile.mkdtemp(prefix="collector-scale-"))
    try:
        run(args, folder)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def run(args: argparse.Namespace, folder: Path) -> None:
    """Every measurement, printed as it comes, then the medians and ratios."""
    def git(*words: str) -> str:
        return subprocess.run(["git", "-C", str(ROOT), *words], check=True,
                              capture_output=True, text=True).stdout.strip()

    base, head = git("rev-parse", "--short", args.base), git("describe", "--always", "--dirty")
    print(f"{os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}; {args.clients} clients, "
          f"{args.submissions} submissions a measurement, {args.rounds} rounds; "
          f"old {base}, new this tree ({head})", flush=True)
    sides = {"new": None} if args.new_only else {"old": install_base(base, folder), "new": None}
    for n in args.runs:
        parquet = folder / f"runs-{n}.parquet"
        began = time.perf_counter()
        write_runs(parquet, n)
        prefilled = {}
        for label, site in sides.items():
            prefilled[label] = side_database(site, parquet, folder / f"{label}-{n}")
        print(f"{n:,} runs stored ({BIG_SHARE:.0%} in the big group, {SUBMITTERS} "
              f"submitters), prefilled in {time.perf_counter() - began:.0f} s", flush=True)
        figures: dict[str, list[dict]] = {label: [] for label in sides}
        for round_ in range(args.rounds):
            order = list(sides) if round_ % 2 == 0 else list(reversed(sides))
            for label in order:
                db, token = prefilled[label]
                found = measure(sides[label], db, token, args, folder,
                                with_reads=True)
                figures[label].append(found)
                for target in TARGETS:
                    print("  " + _line(f"round {round_ + 1} {label}, {target}", found[target]),
                          flush=True)
        report(n, figures)
        if args.idle:
            for label, site in sides.items():
                db, token = prefilled[label]
                _, times = idle_connections(site, db, token, folder, args.idle)
                print(f"  {label}, {args.idle:,} idle connections: new clients "
                      + _times(times), flush=True)
        if args.idle_edge:
            db, token = prefilled["new"]
            count, sources = args.idle_edge
            _, times = idle_at_the_edge(db, token, folder, count, sources)
            print(f"  new, {count:,} silent connections to the edge from {sources} "
                  f"addresses: new clients {_times(times)}", flush=True)


def _times(times: list[float | None]) -> str:
    """New clients' answer times in words."""
    return ", ".join("no answer in 45 s" if t is None else f"{t * 1000:.0f} ms" for t in times)


def report(n: int, figures: dict[str, list[dict]]) -> None:
    """Each side's medians over the rounds, and new/old."""
    medians: dict[str, dict] = {}
    for label, rounds in figures.items():
        medians[label] = {
            target: {m: statistics.median(r[target][m] for r in rounds)
                     for m in rounds[0][target]} for target in TARGETS}
        medians[label]["reads"] = {
            name: (statistics.median(r["reads"][name][0] for r in rounds),
                   max(r["reads"][name][1] for r in rounds),
                   statistics.median(r["reads"][name][2] for r in rounds),
                   statistics.median(r["reads"][name][3] for r in rounds))
            for name in rounds[0]["reads"]}
    print(f"at {n:,} runs, medians of the rounds:")
    for label, m in medians.items():
        for target in TARGETS:
            print("  " + _line(f"{label}, {target}", m[target]))
    new = medians["new"]
    print(f"  new, big group / new group: acks/s "
          f"{new['big group']['per_second'] / new['new group']['per_second']:.2f}")
    if "old" in medians:
        old = medians["old"]
        for target in TARGETS:
            print(f"  new/old, {target}: acks/s "
                  f"{new[target]['per_second'] / old[target]['per_second']:.2f}, p99 "
                  f"{new[target]['p99_ms'] / old[target]['p99_ms']:.2f}")
    print("  reads, ms: after a run into the big group median / slowest, then again "
          "median, then after a run into another group median:" + "".join(
              f"\n    {name}: " + ", ".join(
                  f"{label} {m['reads'][name][0]:.1f} / {m['reads'][name][1]:.1f}, "
                  f"{m['reads'][name][2]:.1f}, {m['reads'][name][3]:.1f}"
                  for label, m in medians.items())
              for name in new["reads"]), flush=True)


if __name__ == "__main__":
    main()
