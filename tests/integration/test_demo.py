"""`make demo` end to end: the real commands, a real collector process, a real run."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from gpubench.collector.store import RunFilter, Store

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_demo_runs_compares_and_stores_the_runs(tmp_path: Path) -> None:
    env = dict(os.environ, GPUBENCH_DEMO_DIR=str(tmp_path / "demo"),
               GPUBENCH_CACHE=str(tmp_path / "cache"), GPUBENCH_COLLECTOR="", GPUBENCH_TOKEN="")
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "demo.py")], env=env,
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    out = done.stdout + done.stderr
    # The refusal to mix unlike runs names what differs; the mixed comparison shows both.
    assert "differ in" in out and "image_size (224, 64" in out
    assert "1x NVIDIA H200" in out and "CPU" in out
    # The article's T4 in a section of its own, with how it was made unlike the runs.
    assert "published figures: transcribed, not measured by gpubench" in out
    assert "1x Tesla T4" in out and "weights imagenet" in out
    assert 'the article "EfficientNet B0/B3/B7 on rock-paper-scissors"' in out
    assert "B0 leaderboard · settings kernels+cuda-graphs · batch steps" in out
    # Every run is in the database once the collector has stopped (it checkpointed).
    store = Store(tmp_path / "demo" / "collector.duckdb")
    try:
        runs, _ = store.list(RunFilter(), page_size=20)
    finally:
        store.close()
    references = sorted((ROOT / "docs" / "results" / "runs").glob("*.json"))
    assert sorted(r.submitter for r in runs) == ["demo"] + ["reference"] * len(references)
    assert sum(r.run.published for r in runs) == 3 and not any(r.flagged for r in runs)
    assert not list((tmp_path / "demo" / "spool" / "pending").glob("*.json"))
    # A second demo in the same folder works too (the token of the first is replaced).
    again = subprocess.run([sys.executable, str(ROOT / "scripts" / "demo.py")], env=env,
                           capture_output=True, text=True, timeout=900)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
