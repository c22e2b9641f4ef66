"""--batch auto: doubling then bisection, and the search run for real with capped children.

The real search runs `trial` child processes whose address space is capped
(--memory-limit-bytes), so on the CPU a batch can genuinely run out of memory.
The cap is calibrated on this machine from one uncapped trial: no figure is
hard-coded.
"""

from __future__ import annotations

import pytest
from gpubench.agent.workload import batch_search
from gpubench.agent.workload.batch_search import NoBatchFits, Trial, search
from gpubench.agent.workload.options import RunSettings


def _threshold(largest_fitting: int, tried: list[int]):
    def try_batch(batch: int) -> Trial:
        tried.append(batch)
        return Trial(batch, fits=batch <= largest_fitting)

    return try_batch


def test_doubles_then_bisects_to_the_largest_batch() -> None:
    tried: list[int] = []
    chosen, trials = search(_threshold(100, tried), start=8, largest=10_000, max_trials=20)
    assert tried[:6] == [8, 16, 32, 64, 128, 96]  # doubling until 128 fails, then between
    assert chosen == max(t.batch for t in trials if t.fits)
    assert 100 - chosen <= chosen // 8  # within the search's precision
    assert all(t.batch > chosen for t in trials if not t.fits)


def test_stops_at_the_largest_useful_batch() -> None:
    tried: list[int] = []
    chosen, _ = search(_threshold(10_000, tried), start=32, largest=300, max_trials=10)
    assert (chosen, tried) == (300, [32, 64, 128, 256, 300])


def test_keeps_to_the_trial_budget() -> None:
    tried: list[int] = []
    chosen, trials = search(_threshold(1000, tried), start=1, largest=100_000, max_trials=5)
    assert len(trials) == 5 and chosen == 16


def test_halves_when_the_first_batch_does_not_fit() -> None:
    tried: list[int] = []
    chosen, _ = search(_threshold(5, tried), start=32, largest=1000, max_trials=10)
    assert tried[:3] == [32, 16, 8] and chosen == 5


def test_nothing_fits_is_an_out_of_memory_error() -> None:
    with pytest.raises(NoBatchFits, match="even batch 1 runs out of memory") as caught:
        search(_threshold(0, []), start=4, largest=100, max_trials=10)
    assert caught.value.exit_code == 3


def test_a_trial_runs_its_steps_as_the_run_does() -> None:
    settings = RunSettings(model="B0", backend="torch", precision="mixed_bfloat16",
                           cuda_graphs=True, channels_first=False)
    command = batch_search.trial_command(settings, 64)
    assert command[command.index("--batch") + 1] == "64"
    assert {"--cuda-graphs", "--no-jit-compile", "--batched-augmentation", "--fused-batchnorm",
            "--channels-last"} <= set(command)


@pytest.mark.slow
def test_real_search_with_capped_trial_processes(workload) -> None:
    common = ("--backend", "torch", "--gpus", "0", "--model", "B0", "--image-size", "32",
              "--trial-steps", "1")
    # Fewer malloc arenas: the address space a trial needs then varies by a few MB only.
    env = {"MALLOC_ARENA_MAX": "1"}
    calibration = workload("trial", *common, "--batch", "32", env=env)
    assert calibration.returncode == 0, calibration.stderr[-2000:]
    needed = calibration.one("batch_trial").get("address_space_peak_bytes")
    assert needed > 0
    # Room for batch 32 and a little more; at 32 px batch 48 needs ~40 MB more, 64 ~75 MB.
    cap = needed + 20 * 2**20

    run = workload("run", *common, "--batch", "auto", "--max-trials", "3",
                   "--limit-images", "120", "--memory-limit-bytes", str(cap), env=env)
    assert run.returncode == 0, run.stderr[-3000:]
    trials = run.of("batch_trial")
    assert [t.get("batch") for t in trials] == [32, 64, 48]  # double, fail, bisect
    fits = [t.get("batch") for t in trials if t.get("fits")]
    misses = [t for t in trials if not t.get("fits")]
    assert fits == [32] and len(misses) == 2
    # Only an out-of-memory failure makes "does not fit" (any other stops the search);
    # the message is the allocator's line (oneDNN's "could not create a primitive" on CPU).
    assert all(t.get("message") for t in misses)
    assert all(t.get("seconds") > 0 for t in trials)
    chosen = run.one("batch_chosen").get("batch")
    assert chosen == 32
    started = run.one("started")
    assert (started.get("batch_per_gpu"), started.get("batch_choice")) == (chosen, "searched")
    assert run.one("result").get("batch_per_gpu") == chosen
    kinds = [e.kind for e in run.events]
    assert kinds.index("batch_chosen") < kinds.index("started")  # searched before training
