"""Agent test helpers: the recorded H200 NVML trace and the stand-in workload script."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
TRACE = HERE.parent / "data" / "nvml-h200-trace.json"
FAKE_WORKLOAD = HERE / "fake_workload.py"


@pytest.fixture
def trace_path() -> Path:
    """The NVML trace recorded on an H200 (tests/data/README.md says how)."""
    return TRACE


@pytest.fixture
def fake_workload_command() -> list[str]:
    """The command of the stand-in workload (a real child process)."""
    return [sys.executable, str(FAKE_WORKLOAD)]


@pytest.fixture(scope="module")
def engine():
    """A client of the running docker engine; the test is skipped where none answers."""
    docker = pytest.importorskip("docker")
    try:
        client = docker.from_env()
        client.ping()
    except Exception as exc:  # noqa: BLE001
        pytest.skip(f"no docker engine ({exc})")
    yield client
    client.close()
