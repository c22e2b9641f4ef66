"""`gpubench-collector --version` and `--log-level`, as the console script runs them."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
from pathlib import Path

import grpc
from waiting import STOP_DEADLINE_S

from gpubench.v1 import collector_pb2 as pb
from gpubench.v1 import collector_pb2_grpc
from gpubench.versions import VERSION

COLLECTOR = str(Path(sys.executable).with_name("gpubench-collector"))
# A trusted proxy no resolver finds (RFC 6761): a call that says it came through a proxy
# makes the collector look it up, and log a WARNING that it cannot.
UNFINDABLE = "gpubench-proxy.invalid"


def collector(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([COLLECTOR, *args], capture_output=True, text=True, timeout=60)


def test_version() -> None:
    done = collector("--version")
    assert done.returncode == 0 and done.stdout == f"gpubench-collector, version {VERSION}\n"


def served_log(db: Path, *options: str) -> str:
    """What `serve` with the `options` before it logs while a call comes through a
    trusted proxy it cannot look up (its stderr, once stopped)."""
    process = subprocess.Popen(
        [COLLECTOR, *options, "serve", "--db", str(db), "--port", "0",
         "--trusted-proxy", UNFINDABLE],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        first = process.stdout.readline()  # the address, once it serves
        found = re.search(r" on (127\.0\.0\.1:\d+) ", first)
        assert found, first + process.stderr.read()
        with grpc.insecure_channel(found.group(1)) as channel:
            stub = collector_pb2_grpc.CollectorStub(channel)
            try:  # refused (no token): what matters is that it came through a proxy
                stub.Stats(pb.StatsRequest(), timeout=30,
                           metadata=(("x-forwarded-for", "203.0.113.7"),))
            except grpc.RpcError as exc:
                assert exc.code() == grpc.StatusCode.UNAUTHENTICATED, exc
    finally:
        process.send_signal(signal.SIGTERM)
        _, said = process.communicate(timeout=STOP_DEADLINE_S)
    return said


def test_log_level_chooses_the_lines_shown(tmp_path: Path) -> None:
    said = served_log(tmp_path / "c.duckdb")  # INFO, the default
    assert " WARNING gpubench.collector.forwarded: " in said
    assert f"trusted proxy {UNFINDABLE}: cannot look it up" in said

    quiet = served_log(tmp_path / "quiet.duckdb", "--log-level", "error")
    assert "WARNING" not in quiet and "collector stopped" in quiet

    bad = collector("--log-level", "chatty", "token", "list", "--db", str(tmp_path / "c.duckdb"))
    assert bad.returncode == 2 and "'chatty' is not one of" in bad.stderr
    assert "--log-level" in collector("--help").stdout
