"""The batch search: a memory line from two probes, one confirm, budgets; the speed rule.

The search is held against fake memory curves (a card of known capacity whose peak
at each batch is known), and run for real with trial processes whose address
space is capped (--trial-address-space), so that on the CPU a batch genuinely runs
out of memory. The cap is calibrated on this machine from one uncapped trial: no
figure is hard-coded.
"""

from __future__ import annotations

import itertools

import pytest

from gpubench.agent.workload import batch_search
from gpubench.agent.workload.batch_search import (
    HEADROOM,
    MemoryLine,
    NoBatchFits,
    Trial,
    fallbacks,
    search,
    speed_batch,
)
from gpubench.agent.workload.trials import ProcessTrials
from gpubench.settings import RULE_LARGEST, RULE_STEPS, RunSettings

GIB = 1 << 30


class Card:
    """A card of `capacity` bytes whose peak at a batch is `peak(batch)`."""

    def __init__(self, capacity: float, peak, report: bool = True) -> None:
        self.capacity = int(capacity)
        self.peak = peak
        self.report = report
        self.tried: list[tuple[int, str]] = []

    def __call__(self, batch: int, kind: str) -> Trial:
        self.tried.append((batch, kind))
        used = int(self.peak(batch))
        fits = used <= self.capacity
        return Trial(batch, fits, reserved_peak_bytes=used if fits and self.report else 0,
                     capacity_bytes=self.capacity if self.report else 0, kind=kind,
                     message="" if fits else "CUDA out of memory")

    def true_largest(self) -> int:
        return max(b for b in range(1, 100_000) if self.peak(b) <= self.capacity)


def linear(fixed: float, per_image: float):
    return lambda batch: fixed + per_image * batch


def test_a_linear_card_takes_two_probes_and_one_confirm() -> None:
    card = Card(139 * GIB, linear(2 * GIB, 0.1 * GIB))  # B0-like on a 139 GiB card
    found = search(card, probes=(16, 64), largest_useful=10_000)
    assert [kind for _, kind in card.tried] == ["probe", "probe", "confirm"]
    assert card.tried[0][0] == 16 and card.tried[1][0] == 64
    truth = card.true_largest()
    assert found.largest <= truth
    # The prediction leaves HEADROOM of the card free, no more.
    assert found.largest >= int(truth * (1 - HEADROOM)) - 2
    assert not found.capped and found.line is not None
    assert found.line.per_image_bytes == pytest.approx(0.1 * GIB)


def test_the_second_probe_is_the_likely_speed_batch_when_it_must_fit() -> None:
    # B0 on an H200: the first probe proves 128 fits, so the run's batch is probed.
    card = Card(139 * GIB, linear(0.07 * GIB, 0.1 * GIB))
    found = search(card, probes=(16, 64), largest_useful=1709, speed_candidate=128)
    assert [b for b, _ in card.tried][:2] == [16, 128] and len(card.tried) == 3
    assert speed_batch(found.largest, 1709) == 128
    # B7 on an H200: 128 cannot be proved from batch 2; 16, the largest power of two
    # the first probe proves, is what the speed rule then picks.
    card = Card(139 * GIB, linear(1.27 * GIB, 4.07 * GIB))
    found = search(card, probes=(2, 8), largest_useful=1709, speed_candidate=128)
    assert [b for b, _ in card.tried][:2] == [2, 16]
    assert speed_batch(found.largest, 1709) == 16
    # A small card: nothing above the first probe is proved; the model's own probe.
    card = Card(8 * GIB, linear(3 * GIB, 0.4 * GIB))
    search(card, probes=(8, 32), largest_useful=1709, speed_candidate=128)
    assert [b for b, _ in card.tried][:2] == [8, 32]


def test_a_curve_steeper_than_the_probes_steps_down_and_still_fits() -> None:
    # Fragmentation: memory grows faster at large batches than the probes show.
    card = Card(16 * GIB, lambda b: 1 * GIB + 0.05 * GIB * b + 0.0004 * GIB * b * b)
    found = search(card, probes=(16, 64), largest_useful=10_000)
    assert len(card.tried) <= 6
    assert card(found.largest, "check").fits
    kinds = [kind for _, kind in card.tried]
    assert kinds[:2] == ["probe", "probe"] and "confirm" in kinds
    misses = [batch for batch, _ in card.tried if card.peak(batch) > card.capacity]
    assert misses, "the line over-predicted: a confirm must have failed"
    assert all(batch > found.largest for batch in misses)
    # Within the search's precision of the true largest batch.
    truth = card.true_largest()
    assert truth - found.largest <= max(1, truth // batch_search.GAP_SHARE)


def test_a_small_card_halves_the_first_probe() -> None:
    card = Card(8 * GIB, linear(3 * GIB, 2.5 * GIB))  # B7 on an 8 GB card: batch 2 fits
    found = search(card, probes=(2, 8), largest_useful=1709)
    assert card.tried[0] == (2, "probe")
    assert found.largest == 2 and card(3, "").fits is False
    card = Card(8 * GIB, linear(3 * GIB, 4 * GIB))  # only batch 1 fits
    found = search(card, probes=(2, 8), largest_useful=1709)
    assert [b for b, _ in card.tried][:2] == [2, 1] and found.largest == 1


def test_nothing_fits_is_an_out_of_memory_error() -> None:
    card = Card(1 * GIB, linear(2 * GIB, 1 * GIB))
    with pytest.raises(NoBatchFits, match="even batch 1 runs out of memory") as caught:
        search(card, probes=(4, 16), largest_useful=100)
    assert caught.value.exit_code == 3


def test_the_training_set_caps_the_search() -> None:
    card = Card(139 * GIB, linear(1 * GIB, 0.01 * GIB))  # 13,000 would fit
    found = search(card, probes=(16, 64), largest_useful=1709)
    assert (found.largest, found.capped) == (1709, True)
    assert len(card.tried) == 3


def test_without_memory_figures_it_doubles() -> None:
    card = Card(10 * GIB, linear(1 * GIB, 0.1 * GIB), report=False)  # fits up to 90
    found = search(card, probes=(16, 32), largest_useful=1000, max_trials=12)
    batches = [b for b, _ in card.tried]
    assert batches[:4] == [16, 32, 64, 128]
    assert found.largest <= 90 and 90 - found.largest <= 90 // batch_search.GAP_SHARE


def test_the_trial_budget_and_the_time_budget_end_the_search() -> None:
    steep = lambda b: 1 * GIB + 0.05 * GIB * b + 0.001 * GIB * b * b  # noqa: E731
    card = Card(16 * GIB, steep)
    found = search(card, probes=(16, 64), largest_useful=10_000, max_trials=3)
    assert len(card.tried) == 3 and found.stopped_by == "trials"
    ticks = itertools.count(0, 50)  # every look at the clock: 50 s later
    card = Card(16 * GIB, steep)
    found = search(card, probes=(16, 64), largest_useful=10_000, budget_seconds=120,
                   clock=lambda: float(next(ticks)))
    assert found.stopped_by == "time" and len(card.tried) < 5
    assert card(found.largest, "").fits


def test_the_memory_line_is_a_least_squares_fit() -> None:
    trials = [Trial(16, True, reserved_peak_bytes=3_000),
              Trial(64, True, reserved_peak_bytes=7_800),
              Trial(32, True, reserved_peak_bytes=4_600), Trial(128, False)]
    line = MemoryLine.fit(trials)
    assert line is not None
    assert line.per_image_bytes == pytest.approx(100.0)
    assert line.fixed_bytes == pytest.approx(1_400.0)
    assert line.largest(11_400) == 100
    assert MemoryLine.fit(trials[:1]) is None
    flat = [Trial(16, True, peak_memory_bytes=5), Trial(64, True, peak_memory_bytes=5)]
    assert MemoryLine.fit(flat) is None


@pytest.mark.parametrize(("largest", "train", "devices", "expected"), [
    (1360, 1709, 1, 128),  # B0 on an H200: 1709 / 8 = 213 -> 128, 14 steps
    (416, 1709, 1, 128),
    (36, 1709, 1, 32),  # B7 on an H200
    (60, 1709, 1, 32),  # the article's GTX 1070 B0
    (16, 1709, 1, 16),
    (1, 1709, 1, 1),
    (1000, 1709, 2, 64),  # two GPUs: 1709 / 16 = 106 per GPU
    (500, 40, 1, 4),  # a tiny dataset: 40 / 8 = 5
    (500, 5, 1, 1),
])
def test_the_speed_rule(largest: int, train: int, devices: int, expected: int) -> None:
    batch = speed_batch(largest, train, devices)
    assert batch == expected
    assert batch <= largest and batch & (batch - 1) == 0


def test_fallbacks_are_smaller_confirmed_batches() -> None:
    card = Card(139 * GIB, linear(2 * GIB, 0.1 * GIB))
    found = search(card, probes=(16, 64), largest_useful=10_000)
    assert fallbacks(RULE_STEPS, 128, found) == [64, 32, 16, 8, 4, 2, 1]
    assert fallbacks(RULE_LARGEST, found.largest, found) == [64, 16]


def test_a_trial_process_runs_the_network_as_the_run_computes_it() -> None:
    settings = RunSettings(model="B0", backend="torch", precision="mixed_bfloat16",
                           cuda_graphs=True, channels_first=False, memory_limit_bytes=16 * GIB)
    command = ProcessTrials(settings).command(64, "confirm")
    assert command[command.index("--batch") + 1] == "64"
    assert command[command.index("--kind") + 1] == "confirm"
    assert command[command.index("--memory-limit") + 1] == str(16 * GIB)
    # Trials run their steps eagerly: a CUDA graph's pool would stay with the trial.
    assert {"--no-cuda-graphs", "--no-jit-compile", "--batched-augmentation",
            "--fused-batchnorm", "--channels-last"} <= set(command)


# Real out-of-memory trials, minutes on a CPU: make test-e2e. make test searches for real
# without a cap (tests/workload/test_search_beside.py).
@pytest.mark.slow
@pytest.mark.e2e
def test_real_search_with_capped_trial_processes(workload) -> None:
    common = ("--backend", "torch", "--gpus", "0", "--model", "B0", "--image-size", "32",
              "--trial-steps", "1")
    # Fewer malloc arenas: the address space a trial needs then varies by a few MB only.
    env = {"MALLOC_ARENA_MAX": "1"}
    calibration = workload("trial", *common, "--batch", "16", env=env)
    assert calibration.returncode == 0, calibration.stderr[-2000:]
    needed = calibration.one("batch_trial").address_space_peak_bytes
    assert needed > 0
    # Room for batch 16 and some more, not for 64.
    cap = needed + 40 * 2**20

    run = workload("run", *common, "--batch", "largest", "--max-trials", "4",
                   "--limit-images", "240", "--trial-address-space", str(cap), env=env)
    assert run.returncode == 0, run.stderr[-3000:]
    trials = run.of("batch_trial")
    assert [(t.batch, t.trial_kind) for t in trials[:2]] == [(16, "probe"),
                                                                     (64, "probe")]
    fits = [t.batch for t in trials if t.fits]
    misses = [t for t in trials if not t.fits]
    assert misses and fits and max(fits) < min(t.batch for t in misses)
    # Only an out-of-memory failure makes "does not fit" (any other stops the search);
    # the message is the allocator's line (oneDNN's "could not create a primitive" on CPU).
    assert all(t.message for t in misses)
    assert all(t.seconds > 0 and t.capacity_bytes == cap for t in trials)
    chosen = run.one("batch_chosen")
    assert chosen.search.largest == max(fits) == chosen.batch
    assert chosen.rule == "largest" and chosen.search.search_seconds > 0
    started = run.one("started")
    assert (started.batch_per_gpu, started.batch_choice,
            started.batch_rule) == (max(fits), "searched", "largest")
    kinds = [e.kind for e in run.events]
    assert kinds.index("batch_chosen") < kinds.index("started")  # searched before training
