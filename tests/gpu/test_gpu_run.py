"""On a host with an NVIDIA GPU (`make test-gpu`): a real B0 run through the agent.

Checks what only real hardware can show: the inventory read from the driver, energy
from NVML during the measured epoch, and the allocator's peak memory sitting below
NVML's per-process figure, which also counts the CUDA context.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(
        shutil.which("nvidia-smi") is None
        or subprocess.run(["nvidia-smi", "-L"], capture_output=True).returncode != 0,
        reason="no NVIDIA GPU on this host",
    ),
]


def test_b0_run_has_energy_and_memory_from_the_driver(tmp_path: Path) -> None:
    backend = os.environ.get("KERAS_BACKEND", "torch")
    command = [sys.executable, "-m", "gpubench.agent.cli", "run", "--models", "B0",
               "--batch", "32", "--limit-images", "320", "--backend", backend, "--offline",
               "--spool", str(tmp_path / "spool"), "--idle-timeout", "10", "--json"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    (run,) = json.loads(done.stdout)
    assert run["gpus"][0]["name"] and int(run["gpus"][0]["memory_total_bytes"]) > 0
    assert run["gpus"][0]["driver_version"]
    result = run["result"]
    assert result["status"] == "RUN_STATUS_OK"
    assert result["epoch2_seconds"] > 0
    assert result["energy_per_epoch_joules"] > 0
    assert result["mean_power_watts"] > 0
    (memory,) = result["memory"]
    allocator = int(memory["allocator_peak_bytes"])
    process = int(memory.get("process_peak_bytes", 0))
    assert 0 < allocator <= int(memory["memory_total_bytes"])
    if process:  # NVML reports per-process memory where the driver allows it
        assert allocator <= process
