"""A run that runs out of memory at the batch the search chose runs again at a smaller one.

Real processes throughout: the real workload (Keras on torch, the CPU, tiny images)
under `gpubench-agent run`, and a genuine out-of-memory error, made by capping the
training's address space (GPUBENCH_RUN_ADDRESS_SPACE) between what batch 8 and
batch 16 need. The cap is calibrated here from two uncapped runs, read from
/proc while they train: no figure is hard-coded.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from waiting import WORKLOAD_RUN_DEADLINE_S

from gpubench import record

# Four real CPU trainings, minutes each: `make test-e2e`. make test keeps a real search
# (tests/workload/test_search_beside.py) and a real run to the collector
# (tests/agent/test_agent_cli.py).
pytestmark = [pytest.mark.slow, pytest.mark.e2e]

# 64 px images, 160 of them: 128 training images, so the speed rule's batch is 16
# (128 / 8 steps) whatever the search finds on a machine with gigabytes to spare.
TINY = ("--backend", "torch", "--gpus", "0", "--models", "B0", "--image-size", "64",
        "--limit-images", "160")
WORKLOAD_TINY = ("--backend", "torch", "--gpus", "0", "--model", "B0", "--image-size", "64",
                 "--limit-images", "160")
MIB = 1 << 20


def _environment(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("GPUBENCH_") or k == "GPUBENCH_STATE"}
    env.update(GPUBENCH_SPOOL=str(tmp_path / "spool"), GPUBENCH_CACHE=str(tmp_path / "cache"),
               COLUMNS="200", MALLOC_ARENA_MAX="1")
    env.update(extra)
    return env


def _address_space_peak(batch: int, env: dict[str, str]) -> int:
    """The workload's peak address space (VmPeak) over a run at `batch`, read while it runs."""
    child = subprocess.Popen(
        [sys.executable, "-m", "gpubench.agent.workload", "run", *WORKLOAD_TINY,
         "--batch", str(batch)], env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    status = Path(f"/proc/{child.pid}/status")
    peak = 0
    while child.poll() is None:
        try:
            for line in status.read_text().splitlines():
                if line.startswith("VmPeak:"):
                    peak = max(peak, int(line.split()[1]) * 1024)
        except (OSError, ValueError):
            pass
        time.sleep(0.02)
    stdout = child.stdout.read().decode() if child.stdout else ""
    child.stdout.close() if child.stdout else None
    assert child.returncode == 0, stdout[-2000:]
    return peak


@pytest.fixture(scope="module")
def peaks(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, int, int]:
    """A dataset cache, and the address space the run needs at batch 8 and at 16."""
    cache = tmp_path_factory.mktemp("retry-cache")
    env = _environment(cache, GPUBENCH_CACHE=str(cache))
    subprocess.run([sys.executable, "-m", "gpubench.agent.workload", "make-data",
                    "--limit-images", "160"], env=env, check=True, capture_output=True)
    at_8, at_16 = _address_space_peak(8, env), _address_space_peak(16, env)
    assert at_16 - at_8 > 16 * MIB, (at_8, at_16)  # room for a cap between them
    return cache, at_8, at_16


@pytest.mark.timeout(WORKLOAD_RUN_DEADLINE_S)
def test_out_of_memory_in_the_run_runs_again_at_the_next_smaller_batch(tmp_path, peaks) -> None:
    cache, at_8, at_16 = peaks
    cap = (at_8 + at_16) // 2
    done = subprocess.run(
        [sys.executable, "-m", "gpubench.agent.cli", "run", "--offline", *TINY, "--json"],
        env=_environment(tmp_path, GPUBENCH_RUN_ADDRESS_SPACE=str(cap),
                         GPUBENCH_CACHE=str(cache)),
        capture_output=True, text=True, timeout=WORKLOAD_RUN_DEADLINE_S, check=False)
    assert done.returncode == 0, done.stderr[-4000:]
    assert "batch 16 ran out of memory in the run; running again at batch 8" in done.stderr
    [data] = json.loads(done.stdout)
    run = record.from_dict(data)
    assert run.result.status == record.RunStatus.RUN_STATUS_OK
    assert run.config.batch_per_gpu == 8
    assert run.config.batch_choice == record.BatchChoice.BATCH_CHOICE_SEARCHED
    assert run.config.batch_rule == "steps"
    failed = [t for t in run.result.batch_trials if t.kind == "run"]
    assert [(t.batch, t.fits) for t in failed] == [(16, False)]
    assert "ran out of memory" in failed[0].message
    # The search's own trials are kept, and the memory answer is what really trained.
    assert [t.kind for t in run.result.batch_trials][:2] == ["probe", "probe"]
    assert run.result.largest_batch_per_gpu == 8
    assert any("batch 16 ran out of memory" in w for w in run.result.warnings)
    assert len(run.result.epochs) == 2 and run.result.epoch2_seconds > 0


@pytest.mark.timeout(WORKLOAD_RUN_DEADLINE_S)
def test_a_given_batch_that_runs_out_of_memory_ends_so(tmp_path, peaks) -> None:
    cache, at_8, _ = peaks
    done = subprocess.run(
        [sys.executable, "-m", "gpubench.agent.cli", "run", "--offline", *TINY, "--batch", "16",
         "--json"],
        env=_environment(tmp_path, GPUBENCH_RUN_ADDRESS_SPACE=str(at_8),
                         GPUBENCH_CACHE=str(cache)),
        capture_output=True, text=True, timeout=WORKLOAD_RUN_DEADLINE_S, check=False)
    assert done.returncode == 1, done.stderr[-4000:]
    assert "running again" not in done.stderr
    [data] = json.loads(done.stdout)
    run = record.from_dict(data)
    assert run.result.status == record.RunStatus.RUN_STATUS_OUT_OF_MEMORY
    assert run.config.batch_per_gpu == 16 and not run.result.batch_trials
