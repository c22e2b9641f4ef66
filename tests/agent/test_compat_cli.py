"""The compatibility check as a person meets it: `gpubench-agent run` and `largest-batch`
with an NVML profile in place of the GPU, and the real workload or the stand-in one
(whose `probe` prints a recorded or documented answer)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from builds import cpu_torch_only
from test_agent_cli import agent, agent_env

from gpubench import record
from gpubench.agent import host
from gpubench.agent.display import RunDisplay
from gpubench.agent.inventory import take_inventory
from gpubench.agent.nvml_replay import FakeNvml
from gpubench.agent.runners.local import LocalRunner

DATA = Path(__file__).resolve().parent.parent / "data"
GTX_1070 = DATA / "nvml-gtx1070-laptop.json"
T4 = DATA / "nvml-t4-colab.json"


def probe_file(tmp_path: Path, *builds: dict) -> Path:
    """A probe answer with `builds` ({'backend': ..., 'version': ..., ...}), as a file."""
    answer = {"format": "gpubench-probe", "version": 1, "python": "3.12.3", "keras": "3.15.1",
              "backends": {b.pop("backend"): {"cuda": "", "archs": [], **b} for b in builds}}
    path = tmp_path / "probe.json"
    path.write_text(json.dumps(answer))
    return path


CPU_BUILDS = ({"backend": "torch", "version": "2.13.0+cpu"},
              {"backend": "tensorflow", "version": "2.21.0"})
# torch's cu126 wheel (sm_50 ... sm_90) and TensorFlow 2.21's GPU build: documented values.
TORCH_CU126 = {"backend": "torch", "version": "2.11.0+cu126", "cuda": "12.6",
               "archs": ["sm_50", "sm_60", "sm_70", "sm_75", "sm_80", "sm_86", "sm_90"]}
TORCH_CU130 = {"backend": "torch", "version": "2.11.0+cu130", "cuda": "13.0",
               "archs": ["sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120"]}
TENSORFLOW_GPU = {"backend": "tensorflow", "version": "2.21.0", "cuda": "12.5.1",
                  "archs": ["sm_60", "sm_70", "sm_80", "sm_89", "compute_90"]}


def said(done: object) -> str:
    """stderr as one line (rich wraps long lines at the terminal's width)."""
    return " ".join(done.stderr.split())  # type: ignore[attr-defined]


def spooled(tmp_path: Path) -> list[Path]:
    return [p for p in (tmp_path / "spool").rglob("*.json")]


@cpu_torch_only
def test_the_gtx_1070_with_the_cpu_builds_stops_before_training(tmp_path: Path) -> None:
    """The real workload of this environment (CPU builds of torch and TensorFlow) on the
    laptop GTX 1070: exit 2 in seconds, with the reason and what to install."""
    env = agent_env(tmp_path, None, GPUBENCH_NVML_TRACE=str(GTX_1070))
    started = time.monotonic()
    done = agent(["run", "--models", "B0", "--offline"], env)
    elapsed = time.monotonic() - started
    assert done.returncode == 2, done.stderr
    assert elapsed < 30
    message = said(done)
    assert "runs on the NVIDIA GeForce GTX 1070: torch 2.13.0+cpu is built without CUDA " \
           "(a CPU build); tensorflow 2.21.0 is built without CUDA (a CPU build)" in message
    assert "pip install torch --index-url https://download.pytorch.org/whl/cu126" in message
    assert "train on the CPU with --gpus 0" in message
    assert "B0:" not in done.stderr and spooled(tmp_path) == []  # nothing started


def test_largest_batch_is_checked_too(tmp_path: Path) -> None:
    env = agent_env(tmp_path, None, GPUBENCH_NVML_TRACE=str(GTX_1070))
    done = agent(["largest-batch", "--models", "B0", "--backend", "tensorflow"], env)
    assert done.returncode == 2, done.stderr
    assert "--backend tensorflow cannot run on the NVIDIA GeForce GTX 1070: tensorflow " \
           "2.21.0 is built without CUDA" in said(done)


def test_gpus_0_skips_the_check(tmp_path: Path, fake_workload_command: list[str]) -> None:
    probe = probe_file(tmp_path, *[dict(b) for b in CPU_BUILDS])
    env = agent_env(tmp_path, fake_workload_command, GPUBENCH_NVML_TRACE=str(GTX_1070),
                    FAKE_WORKLOAD_PROBE=str(probe))
    stopped = agent(["run", "--models", "B0", "--batch", "8", "--offline"], env)
    assert stopped.returncode == 2 and "built without CUDA" in stopped.stderr
    done = agent(["run", "--models", "B0", "--batch", "8", "--offline", "--gpus", "0",
                  "--json"], env)
    assert done.returncode == 0, done.stderr
    assert "built without CUDA" not in done.stderr and "backend" not in done.stderr
    [run] = [record.from_dict(data) for data in json.loads(done.stdout)]
    assert run.config.gpu_count == 0


def test_a_build_that_runs_is_chosen_and_said(tmp_path: Path,
                                              fake_workload_command: list[str]) -> None:
    probe = probe_file(tmp_path, dict(TORCH_CU126), dict(TENSORFLOW_GPU))
    env = agent_env(tmp_path, fake_workload_command, GPUBENCH_NVML_TRACE=str(GTX_1070),
                    FAKE_WORKLOAD_PROBE=str(probe))
    done = agent(["run", "--models", "B0", "--batch", "8", "--offline", "--idle-timeout", "0"],
                 env)
    assert done.returncode == 0, done.stderr
    assert ("backend torch: torch 2.11.0+cu126 runs on the NVIDIA GeForce GTX 1070 (sm_60 "
            "kernels run on 6.1; CUDA 12.6 on the driver's CUDA 12.2 (minor version "
            "compatibility))") in said(done)


def test_on_the_t4_tensorflow_runs_where_the_cuda_13_torch_cannot(
        tmp_path: Path, fake_workload_command: list[str]) -> None:
    probe = probe_file(tmp_path, dict(TORCH_CU130), dict(TENSORFLOW_GPU))
    env = agent_env(tmp_path, fake_workload_command, GPUBENCH_NVML_TRACE=str(T4),
                    FAKE_WORKLOAD_PROBE=str(probe))
    done = agent(["largest-batch", "--models", "B0", "--json"], env)
    assert done.returncode == 0, done.stderr
    line = said(done)
    assert "backend tensorflow: tensorflow 2.21.0 (CUDA 12.5.1) runs on the Tesla T4" in line
    assert "not torch: driver 525.85.12 runs CUDA 12.0 at most" in line


def test_keras_backend_is_what_was_asked(tmp_path: Path, fake_workload_command: list[str],
                                         trace_path: Path) -> None:
    # The answer recorded on the GPU machine: torch 2.11.0+cu130 and JAX's CUDA 13 plugin.
    env = agent_env(tmp_path, fake_workload_command, GPUBENCH_NVML_TRACE=str(trace_path),
                    KERAS_BACKEND="jax")
    done = agent(["largest-batch", "--models", "B0"], env)
    assert done.returncode == 0, done.stderr
    assert "backend jax (KERAS_BACKEND=jax): jax " in done.stderr


def test_a_workload_that_cannot_answer_is_not_stopped(tmp_path: Path,
                                                      fake_workload_command: list[str],
                                                      trace_path: Path) -> None:
    # An image older than the check has no `probe`: said, and the run goes on.
    env = agent_env(tmp_path, fake_workload_command, GPUBENCH_NVML_TRACE=str(trace_path),
                    FAKE_WORKLOAD_PROBE=str(tmp_path / "absent.json"))
    done = agent(["largest-batch", "--models", "B0"], env)
    assert done.returncode == 0, done.stderr
    assert "the workload could not say what it was built for (`probe --json` exited with 1" \
        in said(done)


def test_no_compat_check_starts_the_workload_anyway(tmp_path: Path,
                                                    fake_workload_command: list[str]) -> None:
    probe = probe_file(tmp_path, *[dict(b) for b in CPU_BUILDS])
    env = agent_env(tmp_path, fake_workload_command, GPUBENCH_NVML_TRACE=str(GTX_1070),
                    FAKE_WORKLOAD_PROBE=str(probe))
    done = agent(["largest-batch", "--models", "B0", "--no-compat-check"], env)
    assert done.returncode == 0, done.stderr
    assert "--no-compat-check: the workload's builds are not checked" in done.stderr


def test_the_check_passes_the_chosen_backend_on(tmp_path: Path,
                                                fake_workload_command: list[str],
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KERAS_BACKEND", raising=False)
    monkeypatch.setenv("FAKE_WORKLOAD_PROBE",
                       str(probe_file(tmp_path, dict(TORCH_CU130), dict(TENSORFLOW_GPU))))
    inventory = take_inventory(FakeNvml.from_trace(T4))
    runner = LocalRunner(fake_workload_command)
    display = RunDisplay(quiet=True)
    assert host.check_builds(runner, inventory, 1, None, display, False) == "tensorflow"
    assert host.check_builds(runner, inventory, 0, None, display, False) is None
    assert host.check_builds(runner, inventory, 1, "jax", display, True) == "jax"
