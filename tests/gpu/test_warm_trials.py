"""On a host with an NVIDIA GPU and torch: batch trials in one process (trials.WarmTrials).

What only a real GPU shows: an out-of-memory error in a trial is caught and its
memory given back, so the next trial in the same process fits; the memory line
fitted to two probes predicts a third batch's peak; a --memory-limit makes the card
behave as a smaller one; and a run's search runs in a process beside it.
"""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(
        shutil.which("nvidia-smi") is None
        or subprocess.run(["nvidia-smi", "-L"], capture_output=True).returncode != 0,
        reason="no NVIDIA GPU on this host",
    ),
]

GIB = 1 << 30


@pytest.fixture(scope="module")
def torch_keras():
    """Keras on torch in this process, the way the workload loads it."""
    os.environ["KERAS_BACKEND"] = "torch"
    from gpubench.agent.workload import backend

    backend.select("torch", 1)
    return backend.import_keras()


def test_out_of_memory_is_caught_and_the_next_trial_fits(torch_keras) -> None:
    from gpubench.agent.workload import memory
    from gpubench.agent.workload.batch_search import MemoryLine
    from gpubench.agent.workload.trials import WarmTrials
    from gpubench.settings import RunSettings

    settings = RunSettings(model="B0", backend="torch", memory_limit_bytes=8 * GIB)
    memory.limit_memory("torch", 1, settings.memory_limit_bytes)
    trials = WarmTrials(settings)
    try:
        small, larger = trials(16, "probe"), trials(64, "probe")
        assert small.fits and larger.fits
        assert 0 < small.reserved_peak_bytes < larger.reserved_peak_bytes
        assert larger.capacity_bytes < 8 * GIB  # the limit, less the CUDA context
        line = MemoryLine.fit([small, larger])
        assert line is not None
        too_big = trials(int(line.largest(8 * GIB)) * 3, "confirm")  # three times the card
        assert not too_big.fits and "out of memory" in too_big.message.lower()
        # The memory of the failed step was given back: a batch near the line fits.
        near = trials(int(line.largest(larger.capacity_bytes * 0.8)), "confirm")
        assert near.fits, near.message
        predicted = line.peak(near.batch)
        assert abs(near.reserved_peak_bytes - predicted) / predicted < 0.25
    finally:
        memory.limit_memory("torch", 1, None)


def test_a_run_searches_in_a_process_beside_its_own(tmp_path) -> None:
    """`--batch steps`: the trials run in a `search` child (search_beside) while the run
    imports its framework; the child's trials and choice are the run's."""
    import sys

    from gpubench.events import parse_line

    env = {**os.environ, "GPUBENCH_CACHE": str(tmp_path)}
    env.pop("TORCH_CUDNN_V8_API_DISABLED", None)
    done = subprocess.run(
        [sys.executable, "-m", "gpubench.agent.workload", "run", "--backend", "torch",
         "--gpus", "1", "--model", "B0", "--image-size", "64", "--limit-images", "480",
         "--batch", "auto"],
        capture_output=True, text=True, timeout=900, env=env, check=False)
    events = [e for e in map(parse_line, done.stdout.splitlines()) if e is not None]
    assert done.returncode == 0, done.stderr[-3000:]
    kinds = [e.kind for e in events]
    trials = [e for e in events if e.kind == "batch_trial"]
    assert len(trials) >= 2 and trials[0].fits
    chosen = [e for e in events if e.kind == "batch_chosen"]
    assert len(chosen) == 1 and kinds.index("batch_chosen") < kinds.index("started")
    started = events[kinds.index("started")]
    assert started.batch_per_gpu == chosen[0].batch
    assert started.batch_choice == "searched"
    logs = [e.message for e in events if e.kind == "log"]
    assert any("ran in its own process" in line for line in logs), logs
    assert "search_done" not in kinds and "error" not in kinds
