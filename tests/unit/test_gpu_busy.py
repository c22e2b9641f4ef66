"""The guard against figures that time the host: calibrated on the project's own GPU
records, and silent where the telemetry is too thin to judge."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from factories import make_run

from gpubench import gpu_busy, record
from gpubench.v1 import run_pb2

RESULTS = Path(__file__).resolve().parents[2] / "docs" / "results"


def _records(pattern: str) -> list[tuple[str, run_pb2.Run]]:
    found = []
    for path in sorted(RESULTS.glob(pattern)):
        data = json.loads(path.read_text())
        for i, item in enumerate(data if isinstance(data, list) else [data]):
            if isinstance(item, dict) and "result" in item:
                found.append((f"{path.relative_to(RESULTS)}[{i}]", record.from_dict(item)))
    return found


def _measured(run: run_pb2.Run) -> run_pb2.Epoch:
    epoch = record.measured_epoch(run)
    assert epoch is not None
    return epoch


def test_every_default_and_reference_run_is_busy_enough() -> None:
    """The default runs on the H200 (in-process and in the containers) and the
    reference runs: none is called host-bound."""
    runs = (_records("runs/*.json") + _records("h200-default-run/call*-default-b*.json")
            + _records("h200-containers/records/*/*/*.json"))
    assert len(runs) > 30
    warned = [(name, _measured(run).mean_gpu_utilization) for name, run in runs
              if gpu_busy.idle_gpu_warning(run)]
    assert warned == []


@pytest.mark.parametrize("name", [
    "h200-jax/call5-jax-quick.json",  # Keras on JAX, one operation at a time: 3.6%
    "h200-agent-runs/call1-b0-torch-float32-bs128.json",  # Keras's own torch path: 18%
    "h200-agent-runs/call2-kernels-b0-128.json",  # torch kernels, no graphs: 10%
])
def test_runs_that_timed_the_host_are_warned(name: str) -> None:
    [(_, run)] = _records(name)
    warning = gpu_busy.idle_gpu_warning(run)
    busy = _measured(run).mean_gpu_utilization
    assert warning is not None and busy < gpu_busy.BUSY_THRESHOLD_PERCENT
    assert f"busy {busy:.0f}% of epoch 2" in warning
    assert f"({_measured(run).samples} NVML samples" in warning
    assert "measures the host and the framework, not the GPU" in warning


def test_too_few_samples_are_not_judged_but_said() -> None:
    run = make_run(gpu_name="NVIDIA H200")
    epoch = _measured(run)
    epoch.mean_gpu_utilization, epoch.samples = 2.0, gpu_busy.MIN_SAMPLES - 1
    assert gpu_busy.idle_gpu_warning(run) is None
    note = gpu_busy.few_samples_note(run)
    assert note is not None and f"rests on {gpu_busy.MIN_SAMPLES - 1} NVML sample" in note
    epoch.samples = gpu_busy.MIN_SAMPLES
    assert gpu_busy.idle_gpu_warning(run) is not None
    assert gpu_busy.few_samples_note(run) is None


def test_cpu_runs_and_failed_runs_are_not_judged() -> None:
    cpu = make_run(gpu_name="NVIDIA H200", gpu_count=0)
    _measured(cpu).mean_gpu_utilization = 0.0
    assert gpu_busy.idle_gpu_warning(cpu) is None and gpu_busy.few_samples_note(cpu) is None
    failed = make_run(gpu_name="NVIDIA H200", status="error")
    assert gpu_busy.idle_gpu_warning(failed) is None
