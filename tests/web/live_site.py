"""A live results site for the tests: a collector on port 0 holding real and hostile
runs, and `gpubench-collector web` in front of it (imported by the tests and by
screenshots.py under a name of its own: every test folder has a conftest)."""

from __future__ import annotations

import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from factories import make_run
from site_in_thread import start_in_thread

from gpubench import record
from gpubench.client import Client

ROOT = Path(__file__).resolve().parents[2]
REFERENCE_RUNS = sorted((ROOT / "docs" / "results" / "runs").glob("*.json"))
HOSTILE_GPU = "<script>alert(1)</script>"
HOSTILE_LABEL = '<img src=x onerror="alert(2)">'
HOSTILE_WARNING = "epoch 2 slower \u202eevil\u202c and \u200bhidden"
# The longest GPU name the collector accepts (200 characters): its lists must keep every
# figure column in view all the same.
LONG_GPU = ("Quantum Accelerator Board " + "X" * 150 + " Extreme Edition Forty")[:200]
LONG_RUNS = 55  # more than a page of a list
# The start two runs' ids share: `runs list` and the site show them longer than 8.
SHARED_ID_START = "c0ffee00-0f1"
# A label a spreadsheet would run as a formula (OWASP's CSV injection).
FORMULA_LABEL = "=cmd|' /C calc'!A0"
# A run with --memory-limit: 13.2 GiB of a 16 GiB limit on a 140 GiB card.
LIMIT_GIB, LIMIT_PEAK_GIB = 16, 13.2


def alike_run(gpu_name: str, model: str, epoch2_seconds: float, **paths: object):
    """A run made as the reference runs were (the default run: torch, its own kernels,
    CUDA graphs, the steps rule, cached synthetic data, no weights), on `gpu_name`."""
    options = {
        "backend": "torch", "config__dataset_name": record.SYNTHETIC_DATA,
        "config__pipeline": "cached", "config__weights": "none", "config__batch_rule": "steps",
        "config__batched_augmentation": True, "config__fused_batchnorm": True,
        "config__channels_first": True, "config__cuda_graphs": True,
    }
    options.update(paths)
    return make_run(gpu_name=gpu_name, model=model, epoch2_seconds=epoch2_seconds,
                    **options)  # type: ignore[arg-type]


def community_runs() -> list:
    """Runs of other cards at the reference runs' settings, one hostile, one flagged, one
    at Keras's own settings (TensorFlow); runs of a card with a 200-character name (more
    than a page of them), of two H200s (without CUDA graphs, as a run on two GPUs is),
    one with --memory-limit, and one labelled as a spreadsheet formula."""
    runs = []
    for gpu, times in (("Tesla T4", {"B0": (9.1, 9.6, 9.3), "B3": (31.0, 32.5), "B7": (410.0,)}),
                       ("NVIDIA RTX 6000 Ada Generation",
                        {"B0": (1.9, 2.05), "B3": (6.4, 6.6, 6.5), "B7": (58.0, 60.5)}),
                       ("NVIDIA GeForce GTX 1070", {"B0": (21.0, 22.4), "B3": (70.0,)})):
        for model, seconds in times.items():
            runs += [alike_run(gpu, model, s) for s in seconds]
    # Tesla T4's two B3 runs: ids that share their first 12 characters (short ids longer).
    t4_b3 = [run for run in runs if run.gpus[0].name == "Tesla T4" and run.config.model == "B3"]
    for run, tail in zip(t4_b3, ("1-4000-8000-000000000001", "2-4000-8000-000000000002"),
                         strict=True):
        run.run_id = SHARED_ID_START + tail
    hostile = alike_run(HOSTILE_GPU, "B0", 4.2, label=HOSTILE_LABEL)
    hostile.result.warnings.append(HOSTILE_WARNING)
    runs.append(hostile)
    runs.append(alike_run("Tesla T4", "B0", 0.05))  # faster than a T4 can: flagged
    runs.append(make_run(gpu_name="Tesla T4", model="B0", config__batch_rule="steps",
                         config__dataset_name=record.SYNTHETIC_DATA, config__pipeline="cached",
                         config__weights="none"))  # tensorflow, settings "keras"
    runs += [alike_run(LONG_GPU, "B0", 3.0 + i / 100) for i in range(LONG_RUNS)]
    runs += [alike_run(LONG_GPU, model, seconds) for model, seconds in (("B3", 12.0),
                                                                         ("B7", 95.0))]
    for seconds in (0.42, 0.44, 0.43):  # two H200s: torch's kernels, no CUDA graphs
        runs.append(alike_run("NVIDIA H200", "B0", seconds, gpu_count=2,
                              config__cuda_graphs=False))
    limited = alike_run("NVIDIA H200", "B7", 21.0, config__memory_limit_bytes=LIMIT_GIB << 30,
                        peak_memory_bytes=int(LIMIT_PEAK_GIB * (1 << 30)),
                        result__largest_batch_per_gpu=3)
    runs.append(limited)
    runs.append(alike_run("NVIDIA RTX 6000 Ada Generation", "B0", 2.0, label=FORMULA_LABEL))
    return runs


@dataclass
class LiveSite:
    """The site in front of a live collector."""

    url: str  # ends with "/"
    collector: str
    admin_token: str
    hostile_run_id: str
    flagged_run_id: str
    limited_run_id: str = ""

    def get(self, path: str, token: str | None = None) -> tuple[int, str, dict[str, str]]:
        """GET `path`: status, body, headers (an error status is returned, not raised)."""
        request = urllib.request.Request(self.url.rstrip("/") + path)
        if token:
            request.add_header("Authorization", f"Bearer {token}")
        try:
            with urllib.request.urlopen(request, timeout=30) as answer:
                return answer.status, answer.read().decode(), dict(answer.headers)
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode(), dict(exc.headers)


def _start(tmp: Path, runs: list, public_read: bool, *, site_token: bool = False,
           visitor_tokens: bool = False, auth_failures_per_minute: float = 0) -> Iterator[tuple]:
    """A collector holding `runs` and the site in front of it, reading with a token of
    its own if `site_token`; yields (site, address, admin token, the token book)."""
    from gpubench.collector.auth import TokenBook
    from gpubench.collector.server import create_server
    from gpubench.collector.store import Store
    from gpubench.collector.web.reads import SiteConfig

    store = Store(tmp / "collector.duckdb")
    tokens = TokenBook(store)
    server, port = create_server(store, port=0, tokens=tokens, public_read=public_read,
                                 rate_limit=0,
                                 auth_failures_per_minute=auth_failures_per_minute)
    server.start()
    _, admin = tokens.create("admin", admin=True)
    address = f"127.0.0.1:{port}"
    with Client(address, token=admin) as client:
        for run in runs:
            client.submit_run(run)
        # Acknowledged runs are in DuckDB within a second; every read sees them at once.
        deadline = time.monotonic() + 30
        while store.runs.count() < len(runs) and time.monotonic() < deadline:
            time.sleep(0.05)
    token = tokens.create("site", admin=False)[1] if site_token else None
    site = start_in_thread(SiteConfig(address, token=token, visitor_tokens=visitor_tokens))
    try:
        yield site, address, admin, tokens
    finally:
        site.stop()
        server.stop(None).wait()
        tokens.flush()
        store.close()
