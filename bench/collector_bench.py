"""Collector speed: submissions/s over gRPC, the store's own ceiling, Compare latency at scale.

    .venv/bin/python bench/collector_bench.py            # 1,000,000 stored runs for Compare
    .venv/bin/python bench/collector_bench.py --quick    # 100,000, fewer submissions
    .venv/bin/python bench/collector_bench.py --server-cpus 0,1 --client-cpus 2-9

Prints, in one run:
1. submissions/s over gRPC with 1 and with 16 concurrent clients (each client a
   separate connection with its own token, in separate processes, as agents are), and
   the collector's CPU per submission;
2. the store's ceiling without gRPC: one run at a time, and 16 threads submitting
   (each submission one DuckDB commit); the
   gRPC/ceiling ratio;
3. Compare p50/p99 latency over gRPC with --runs runs stored (bulk-loaded from an
   Arrow table; the outliers are scored as Compare reads); --skip-compare leaves it out.
Targets: >= 100 submissions/s with 16 clients; Compare p99 < 50 ms at 1M runs.
bench/collector_ab.py compares the submissions with another revision in one run.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import platform
import statistics
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

import numpy as np
import pyarrow as pa

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))  # the realistic run records of the test suite

from factories import CARDS, make_run  # noqa: E402

from gpubench import record  # noqa: E402
from gpubench.collector.auth import TokenBook  # noqa: E402
from gpubench.collector.columns import RUN_COLUMNS  # noqa: E402
from gpubench.collector.rows import run_row  # noqa: E402
from gpubench.collector.server import create_server  # noqa: E402
from gpubench.collector.store import Store  # noqa: E402

TARGET_SUBMISSIONS = 100.0
TARGET_COMPARE_P99_MS = 50.0
# High enough never to refuse the benchmark, but the limiter's code still runs.
RATE_LIMIT = 1e9


# -- submissions over gRPC ----------------------------------------------------------------


def _client_process(
    address: str, tokens: list[str], per_client: int, start_at, results, cpus: set[int] | None
) -> None:
    """Submit `per_client` runs from each of len(tokens) threads, each on its own channel."""
    import grpc

    if cpus:
        os.sched_setaffinity(0, cpus)

    from gpubench.v1 import collector_pb2, collector_pb2_grpc

    gpus = list(CARDS)
    jobs = []
    for i, token in enumerate(tokens):
        requests = [
            collector_pb2.SubmitRunRequest(run=make_run(gpu_name=gpus[(i + k) % len(gpus)]))
            for k in range(per_client)
        ]
        # Its own connection, as an agent has (channels of one process share one otherwise).
        channel = grpc.insecure_channel(address, options=[("grpc.use_local_subchannel_pool", 1)])
        stub = collector_pb2_grpc.CollectorStub(channel)
        metadata = (("authorization", f"Bearer {token}"),)
        warm = collector_pb2.SubmitRunRequest(run=make_run())
        stub.SubmitRun(warm, metadata=metadata, timeout=30)  # connect before the clock starts
        jobs.append((stub, metadata, requests, channel))
    spans: list[tuple[float, float, int]] = []

    def work(stub, metadata, requests) -> None:
        while time.monotonic() < start_at.value:
            time.sleep(0.0005)
        begin = time.monotonic()
        for request in requests:
            stub.SubmitRun(request, metadata=metadata, timeout=60)
        spans.append((begin, time.monotonic(), len(requests)))

    threads = [threading.Thread(target=work, args=job[:3]) for job in jobs]
    results.put(("ready", len(threads)))
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for job in jobs:
        job[3].close()
    results.put(("done", spans))


def _thread_cpu_seconds() -> dict[str, float]:
    """CPU seconds so far of this process's threads, by Python thread name (Linux)."""
    names = {t.native_id: t.name.rstrip("0123456789_-") for t in threading.enumerate()}
    tick = os.sysconf("SC_CLK_TCK")
    found: dict[str, float] = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            stat = Path(f"/proc/self/task/{tid}/stat").read_text()
            comm = Path(f"/proc/self/task/{tid}/comm").read_text().strip()
        except OSError:  # the thread ended
            continue
        fields = stat[stat.rindex(")") + 2:].split()
        name = names.get(int(tid), f"native {comm}")
        found[name] = found.get(name, 0.0) + (int(fields[11]) + int(fields[12])) / tick
    return found


@dataclass
class Submissions:
    """One SubmitRun measurement: the rate and the collector's CPU per submission."""

    clients: int
    per_second: float
    cpu_ms: float  # the collector's, per submission
    breakdown: str  # where that CPU went


def submissions_over_grpc(
    workdir: Path, clients: int, total: int, client_cpus: set[int] | None = None,
) -> Submissions:
    """Submissions per second with `clients` concurrent clients, `total` runs in all;
    also where the collector's CPU went per submission, by thread."""
    store = Store(workdir / f"grpc-{clients}.duckdb")
    tokens = TokenBook(store)
    server, port = create_server(store, tokens=tokens, rate_limit=RATE_LIMIT)
    server.start()
    try:
        secrets = [tokens.create(f"agent-{i}", admin=False)[1] for i in range(clients)]
        processes_n = min(clients, 8)
        ctx = mp.get_context("spawn")  # no fork after gRPC has started
        start_at = ctx.Value("d", float("inf"))
        results = ctx.Queue()
        per_client = max(total // clients, 1)
        processes = [
            ctx.Process(
                target=_client_process,
                args=(f"127.0.0.1:{port}", secrets[p::processes_n], per_client, start_at, results,
                      client_cpus),
            )
            for p in range(processes_n)
        ]
        for p in processes:
            p.start()
        ready = sum(results.get(timeout=300)[1] for _ in processes)
        assert ready == clients
        cpu_before = _thread_cpu_seconds()
        start_at.value = time.monotonic() + 0.2
        spans = [span for _ in processes for span in results.get(timeout=600)[1]]
        cpu_after = _thread_cpu_seconds()
        for p in processes:
            p.join()
        begin = min(s[0] for s in spans)
        end = max(s[1] for s in spans)
        done = sum(s[2] for s in spans)
        stored = store.runs.count()
        assert stored == done + clients, f"stored {stored}, submitted {done} + {clients} warm-ups"
        spent = {k: v - cpu_before.get(k, 0.0) for k, v in cpu_after.items()}
        shown = sorted(((v, k) for k, v in spent.items() if v > 0), reverse=True)
        collector = sum(spent.values())
        parts = [f"{k} {v / done * 1000:.2f}" for v, k in shown[:5]]
        return Submissions(clients, done / (end - begin), collector / done * 1000,
                           ", ".join(parts))
    finally:
        server.stop(None).wait()
        store.close()


# -- the store's ceiling (no gRPC) --------------------------------------------------------


def store_one_commit_per_run(workdir: Path, n: int) -> float:
    """Runs/s storing one run at a time: a DuckDB commit each."""
    store = Store(workdir / "store-single.duckdb")
    runs = [make_run() for _ in range(n)]
    try:
        begin = time.perf_counter()
        for run in runs:
            store.submit_many([run], "bench")
        return n / (time.perf_counter() - begin)
    finally:
        store.close()


def store_threads(workdir: Path, threads: int, total: int) -> float:
    """Runs/s with `threads` threads submitting at once (they take the write lock in
    turn), no gRPC."""
    store = Store(workdir / "store-group.duckdb")
    gpus = list(CARDS)
    per = total // threads
    batches = [[make_run(gpu_name=gpus[(i + k) % 4]) for k in range(per)] for i in range(threads)]
    barrier = threading.Barrier(threads + 1)

    def work(runs) -> None:
        barrier.wait()
        for run in runs:
            store.submit(run, "bench")

    workers = [threading.Thread(target=work, args=(b,)) for b in batches]
    for w in workers:
        w.start()
    try:
        barrier.wait()
        begin = time.perf_counter()
        for w in workers:
            w.join()
        return per * threads / (time.perf_counter() - begin)
    finally:
        store.close()


# -- Compare at scale ---------------------------------------------------------------------

# What a realistic population of runs looks like: how often each setting occurs.
MODELS = {"B0": 0.5, "B3": 0.3, "B7": 0.2}
GPU_COUNTS = {1: 0.7, 2: 0.2, 4: 0.06, 8: 0.04}
BACKENDS = {"tensorflow": 0.7, "torch": 0.25, "jax": 0.05}
PRECISIONS = {"float32": 0.6, "mixed_float16": 0.25, "mixed_bfloat16": 0.15}
VERSIONS = {"1": 0.9, "0": 0.1}
STATUSES = {"ok": 0.9, "out_of_memory": 0.07, "error": 0.03}
# More GPU names than the four cards with figures: the others get scaled figures.
EXTRA_GPUS = [
    "NVIDIA A100-SXM4-80GB", "NVIDIA A10G", "NVIDIA L4", "NVIDIA GeForce RTX 4090",
    "NVIDIA GeForce RTX 3090", "NVIDIA H100 80GB HBM3", "NVIDIA L40S", "Tesla V100-SXM2-16GB",
]


def _pick(rng: np.random.Generator, weights: dict, n: int) -> np.ndarray:
    keys = list(weights)
    p = np.array(list(weights.values()), dtype=float)
    return np.array(keys, dtype=object)[rng.choice(len(keys), size=n, p=p / p.sum())]


def synthetic_runs(n: int, seed: int = 7) -> pa.Table:
    """`n` runs as an Arrow table of the store's columns, with realistic spreads."""
    rng = np.random.default_rng(seed)
    gpu_names = list(CARDS) + EXTRA_GPUS
    gpu = np.array(gpu_names, dtype=object)[rng.integers(0, len(gpu_names), n)]
    model = _pick(rng, MODELS, n)
    count = _pick(rng, GPU_COUNTS, n).astype(np.int32)
    backend = _pick(rng, BACKENDS, n)
    precision = _pick(rng, PRECISIONS, n)
    version = _pick(rng, VERSIONS, n)
    status = _pick(rng, STATUSES, n)
    # One real record per (GPU, model, count) stands in for the blob column: the
    # figures compared are the extracted columns, which are all per run.
    templates = {}
    base = {}
    for name in gpu_names:
        for m in MODELS:
            for c in GPU_COUNTS:
                run = make_run(gpu_name=name, model=m, gpu_count=c)
                templates[name, m, c] = run.SerializeToString()
                base[name, m, c] = run_row(run, "bench")
    rows = [base[k] for k in zip(gpu, model, count.tolist(), strict=True)]
    ok = status == "ok"
    noise = rng.lognormal(0.0, 0.04, n)
    noise[rng.random(n) < 0.01] *= rng.uniform(1.5, 3.0)  # a few runs on a busy machine
    epoch2 = np.array([r["epoch2_seconds"] for r in rows]) * noise
    created = datetime(2025, 1, 1) + np.array(
        [timedelta(seconds=int(s)) for s in rng.integers(0, 3 * 365 * 86400, n)]
    )
    table = {
        # random version-4 ids, as agents make them
        "run_id": [str(uuid.UUID(bytes=rng.bytes(16), version=4)) for _ in range(n)],
        "content_sha256": ["0" * 64] * n,
        "submitter": [f"lab-{i}" for i in rng.integers(0, 50, n)],
        "received_at": created + timedelta(minutes=5),
        "created_at": created,
        "schema_version": np.full(n, 1, np.int32),
        "benchmark_version": version,
        "label": [""] * n,
        "status": status,
        "model": model,
        "backend": backend,
        "precision": precision,
        "image_size": np.array([record.NATIVE_IMAGE_SIZE[m] for m in model], np.int32),
        "gpu_name": gpu,
        "gpu_count": count,
        "batch_per_gpu": np.array([r["batch_per_gpu"] for r in rows], np.int32),
        "global_batch": np.array([r["global_batch"] for r in rows], np.int32),
        "train_images": np.full(n, 1709, np.int32),
        "epoch2_seconds": np.where(ok, epoch2, np.nan),
        "train_images_per_second": np.where(ok, 1709 / (epoch2 * 0.82), np.nan),
        "peak_memory_bytes": [r["peak_memory_bytes"] for r in rows],
        "memory_total_bytes": [r["memory_total_bytes"] for r in rows],
        "energy_per_epoch_joules": np.where(
            ok, np.array([r["energy_per_epoch_joules"] for r in rows]) * noise, np.nan
        ),
        "images_per_joule": np.where(
            ok, 1709 / (np.array([r["energy_per_epoch_joules"] for r in rows]) * noise), np.nan
        ),
        "record": [templates[k] for k in zip(gpu, model, count.tolist(), strict=True)],
        "settings": ["keras"] * n,  # the templates' configs turn no option on
    }
    # The columns the figures above do not vary (batch rule, pipeline, flags, ...): as the
    # template's row has them.
    for name in RUN_COLUMNS.names:
        table.setdefault(name, [r[name] for r in rows])
    arrays = {}
    for name in RUN_COLUMNS.names:
        values = table[name]
        if isinstance(values, np.ndarray) and values.dtype == float:
            arrays[name] = pa.array(values, RUN_COLUMNS.field(name).type, mask=np.isnan(values))
        else:
            arrays[name] = pa.array(values, RUN_COLUMNS.field(name).type)
    return pa.table(arrays, schema=RUN_COLUMNS)


# The shapes Compare is meant to answer fast: per outlier group.
COMPARE_REQUESTS = {
    "pinned (model, backend, precision, size, version)": dict(
        model="B0", backend="tensorflow", precision="float32", image_size=224,
        benchmark_version="1",
    ),
    "pinned, 3 GPUs, T4 baseline": dict(
        model="B7", backend="tensorflow", precision="float32", image_size=600,
        benchmark_version="1", gpu_names=["Tesla T4", "NVIDIA H200", "NVIDIA L4"],
        baseline_gpu="Tesla T4",
    ),
    "pinned, outliers in": dict(
        model="B3", backend="torch", precision="mixed_bfloat16", image_size=300,
        benchmark_version="1", include_outliers=True,
    ),
}
# Mixing unlike runs on purpose: the medians are taken across the groups.
MIXED_REQUESTS = {
    "model only, allow_mixed (computed from the runs)": dict(model="B0", allow_mixed=True),
}
MIXED_QUERIES = 30


def compare_latency(workdir: Path, runs: int, queries: int) -> dict[str, tuple[float, float]]:
    """Compare p50/p99 (ms) over gRPC per request shape, with `runs` runs stored."""
    import grpc

    from gpubench.v1 import collector_pb2, collector_pb2_grpc

    store = Store(workdir / "compare.duckdb")
    try:
        begin = time.perf_counter()
        chunk = 200_000
        with store.database.write_lock:  # as a write of the store's would
            con = store.database.cursor()
            for offset in range(0, runs, chunk):
                loading = synthetic_runs(min(chunk, runs - offset), seed=offset)
                con.register("loading", loading.select(RUN_COLUMNS.names).cast(RUN_COLUMNS))
                con.execute("INSERT INTO runs BY NAME SELECT * FROM loading")
                con.unregister("loading")
            loaded = time.perf_counter() - begin
        print(f"  loaded {store.runs.count():,} runs in {loaded:.1f} s")
        tokens = TokenBook(store)
        server, port = create_server(store, tokens=tokens, rate_limit=0)
        server.start()
        try:
            secret = tokens.create("reader", admin=False)[1]
            channel = grpc.insecure_channel(f"127.0.0.1:{port}")
            stub = collector_pb2_grpc.CollectorStub(channel)
            metadata = (("authorization", f"Bearer {secret}"),)
            found = {}
            shapes = [(name, fields, queries) for name, fields in COMPARE_REQUESTS.items()]
            shapes += [(name, fields, min(queries, MIXED_QUERIES))
                       for name, fields in MIXED_REQUESTS.items()]
            for name, fields, count in shapes:
                request = collector_pb2.CompareRequest(**fields)
                reply = stub.Compare(request, metadata=metadata, timeout=30)  # warm
                assert reply.groups, name
                times = []
                for _ in range(count):
                    t = time.perf_counter()
                    stub.Compare(request, metadata=metadata, timeout=30)
                    times.append((time.perf_counter() - t) * 1000)
                times.sort()
                found[name] = (statistics.median(times), times[int(0.99 * (len(times) - 1))])
                print(
                    f"  {name}: {len(reply.groups)} groups, "
                    f"p50 {found[name][0]:.1f} ms, p99 {found[name][1]:.1f} ms"
                )
            channel.close()
            return found
        finally:
            server.stop(None).wait()
    finally:
        store.close()


def _print_submissions(found: Submissions) -> None:
    print(f"  {found.clients:2d} client(s): {found.per_second:6.0f} submissions/s; "
          f"collector CPU {found.cpu_ms:.2f} ms per submission ({found.breakdown})")


def _cpus(text: str) -> set[int]:
    """'0,1' or '2-9' or '0,4-7' as a set of CPU numbers."""
    found: set[int] = set()
    for part in text.split(","):
        low, _, high = part.partition("-")
        found.update(range(int(low), int(high or low) + 1))
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=1_000_000,
                        help="runs stored for the Compare latency (default 1,000,000)")
    parser.add_argument("--submissions", type=int, default=8000,
                        help="runs submitted per gRPC measurement (default 8000)")
    parser.add_argument("--queries", type=int, default=300,
                        help="Compare calls per request shape (default 300)")
    parser.add_argument("--quick", action="store_true",
                        help="100,000 runs, 2000 submissions, 100 queries")
    parser.add_argument("--dir", type=Path, help="where the databases go (default: a temp dir)")
    parser.add_argument("--server-cpus", type=_cpus,
                        help="pin the collector (this process) to these CPUs, e.g. 0,1")
    parser.add_argument("--skip-compare", action="store_true",
                        help="only the submission figures (no Compare latency)")
    parser.add_argument("--client-cpus", type=_cpus,
                        help="pin the client processes to these CPUs, e.g. 2-9 (default: "
                             "wherever the collector may run)")
    args = parser.parse_args()
    if args.server_cpus:
        os.sched_setaffinity(0, args.server_cpus)
    if args.quick:
        args.runs, args.submissions, args.queries = 100_000, 2000, 100
    workdir = Path(tempfile.mkdtemp(prefix="collector-bench-", dir=args.dir))
    usable = sorted(os.sched_getaffinity(0))
    print(f"machine: {platform.node()}, {os.cpu_count()} cores, Python {platform.python_version()}")
    print(f"collector on CPUs {usable}; clients on "
          f"{sorted(args.client_cpus) if args.client_cpus else 'the same CPUs'}")
    print(f"databases in {workdir}")

    print("submissions over gRPC (SubmitRun: validate, one DuckDB commit, acknowledge):")
    one = submissions_over_grpc(workdir, 1, max(args.submissions // 4, 200), args.client_cpus)
    _print_submissions(one)
    multi = submissions_over_grpc(workdir, 16, args.submissions, args.client_cpus)
    _print_submissions(multi)
    sixteen = multi.per_second

    print("the store without gRPC (the ceiling):")
    per_run = store_one_commit_per_run(workdir, 300)
    print(f"  one run at a time:              {per_run:8.0f} runs/s")
    ceiling = store_threads(workdir, 16, args.submissions)
    print(f"  16 threads:                     {ceiling:8.0f} runs/s")
    print(f"  gRPC @16 / store @16: {sixteen / ceiling:.2f}")

    if not args.skip_compare:
        print(f"Compare latency over gRPC with {args.runs:,} runs stored:")
        found = compare_latency(workdir, args.runs, args.queries)
        worst = max(found[name][1] for name in COMPARE_REQUESTS)
    print()
    print(f"submissions/s @16 clients: {sixteen:.0f} "
          f"({'meets' if sixteen >= TARGET_SUBMISSIONS else 'MISSES'} >= {TARGET_SUBMISSIONS:.0f}"
          f"); collector CPU per submission: {multi.cpu_ms:.2f} ms")
    if not args.skip_compare:
        print(f"Compare p99 (worst pinned shape) at {args.runs:,} runs: {worst:.1f} ms "
              f"({'meets' if worst < TARGET_COMPARE_P99_MS else 'MISSES'} < "
              f"{TARGET_COMPARE_P99_MS:.0f} ms)")


if __name__ == "__main__":
    main()
