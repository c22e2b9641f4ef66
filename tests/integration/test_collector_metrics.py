"""The collector's own /metrics (`gpubench-collector serve --metrics-port`): the real
process, scraped as Prometheus text and as OpenMetrics, every refusal reason there
from the start."""

from __future__ import annotations

import re
import select
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from factories import make_run

from gpubench.client import Client
from gpubench.collector.stats import REFUSAL_REASONS
from gpubench.errors import GpubenchError

CLI = [sys.executable, "-m", "gpubench.collector.cli"]


def _start(db: Path, *extra: str) -> tuple[subprocess.Popen[str], str, str]:
    """The collector serving `db`; its gRPC address and its metrics URL."""
    process = subprocess.Popen([*CLI, "serve", "--db", str(db), "--port", "0",
                                "--metrics-port", "0", *extra],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    address = metrics = ""
    seen = ""
    deadline = time.monotonic() + 60
    while not (address and metrics) and time.monotonic() < deadline:
        ready, _, _ = select.select([process.stdout], [], [], 0.2)
        if ready:
            line = process.stdout.readline()
            seen += line
            if found := re.search(r" on (127\.0\.0\.1:\d+) ", line):
                address = found.group(1)
            if found := re.search(r"metrics on (http://127\.0\.0\.1:\d+/metrics)", line):
                metrics = found.group(1)
        if process.poll() is not None:
            break
    if not (address and metrics):
        process.kill()
        raise AssertionError(f"collector did not start: {seen}{process.stderr.read()}")
    return process, address, metrics


def _scrape(url: str, accept: str = "") -> tuple[str, str]:
    request = urllib.request.Request(url, headers={"Accept": accept} if accept else {})
    with urllib.request.urlopen(request, timeout=30) as answer:
        return answer.headers["content-type"], answer.read().decode()


def test_the_collector_serves_its_own_metrics(tmp_path: Path) -> None:
    db = tmp_path / "collector.duckdb"
    token = subprocess.run([*CLI, "token", "create", "lab", "--db", str(db)],
                           capture_output=True, text=True, check=True).stdout.split()[-1]
    process, address, url = _start(db)
    try:
        kind, before = _scrape(url)
        assert kind.startswith("text/plain")
        assert "gpubench_collector_up 1.0" in before
        # Every reason from the start, at 0: a rate over it has a series at once.
        for reason in REFUSAL_REASONS:
            assert f'gpubench_collector_refusals_total{{reason="{reason}"}} 0.0' in before
        with Client(address, token=token) as client:
            client.submit_run(make_run())
        with Client(address, token="gpb_wrong") as client, pytest.raises(GpubenchError):
            client.submit_run(make_run())
        kind, after = _scrape(url, "application/openmetrics-text; version=1.0.0")
        assert kind.startswith("application/openmetrics-text")
        assert after.rstrip().endswith("# EOF")
        assert "gpubench_collector_submissions_total 1.0" in after
        assert 'gpubench_collector_refusals_total{reason="token"} 1.0' in after
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=60)


def test_a_metrics_port_in_use_is_said(tmp_path: Path) -> None:
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        done = subprocess.run([*CLI, "serve", "--db", str(tmp_path / "c.duckdb"), "--port", "0",
                               "--metrics-port", str(port)], capture_output=True, text=True,
                              timeout=60)
    assert done.returncode == 2
    assert f"--metrics-port: cannot listen on 127.0.0.1:{port}" in done.stderr
