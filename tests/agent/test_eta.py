"""The suite line's estimate: nothing before a measurement, then refined as the run goes."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from gpubench import figures
from gpubench.agent.display import RunDisplay
from gpubench.agent.eta import (
    FIRST_OVERHEAD_SECONDS,
    RELATIVE_IMAGE_COST,
    SuiteClock,
)

IMAGES = 1709 + 427 / 3  # what an epoch costs, in training images


def test_no_estimate_before_anything_is_measured() -> None:
    clock = SuiteClock(["B0", "B3", "B7"], epochs=2)
    assert clock.seconds_left(0.0) is None
    clock.model_started(0, now=0.0)
    assert clock.seconds_left(1.0) is None
    assert clock.describe(1.0) == "model 1 of 3 (B0)"


def test_a_trial_gives_a_first_estimate_for_every_model() -> None:
    clock = SuiteClock(["B0", "B3", "B7"], epochs=2)
    clock.model_started(0, now=0.0)
    clock.trial(batch=128, step_seconds=0.128)  # 1 ms an image
    left = clock.seconds_left(10.0)
    per_image = 0.001
    b0 = (FIRST_OVERHEAD_SECONDS - 10.0) + 2 * per_image * IMAGES
    rest = sum(FIRST_OVERHEAD_SECONDS + 2 * per_image * RELATIVE_IMAGE_COST[m] * IMAGES
               for m in ("B3", "B7"))
    assert left == pytest.approx(b0 + rest)


def test_measured_epochs_and_finished_models_replace_the_guesses() -> None:
    clock = SuiteClock(["B0", "B7"], epochs=2)
    clock.model_started(0, now=0.0)
    clock.trial(batch=128, step_seconds=0.128)
    clock.epoch(5.0)
    clock.epoch(0.7)
    clock.model_finished(now=45.7)  # 40 s outside its epochs
    clock.model_started(1, now=50.0)
    per_image = 0.7 / IMAGES  # the faster epoch
    b7_epoch = per_image * RELATIVE_IMAGE_COST["B7"] * IMAGES
    assert clock.seconds_left(50.0) == pytest.approx(40.0 + 2 * b7_epoch)
    clock.trial(batch=16, step_seconds=0.2)  # B7's own trial: 12.5 ms an image
    assert clock.seconds_left(60.0) == pytest.approx(30.0 + 2 * 0.0125 * IMAGES)
    clock.epoch(30.0)  # epoch 1 of B7: one epoch left, as long as the faster one seen
    assert clock.seconds_left(100.0) == pytest.approx(30.0)
    assert clock.describe(100.0) == "model 2 of 2 (B7), about 30 s left"


def test_the_first_epochs_steps_give_an_estimate_where_nothing_else_does() -> None:
    """--quick (a given batch, no trials) on a CPU: the time left shows after the first
    steps, the first one (the framework's set-up) left out, and shrinks as steps end."""
    clock = SuiteClock(["B0"], epochs=2)
    clock.model_started(0, now=0.0)
    clock.epoch_started(14)
    clock.step(1, now=30.0)  # graphs built in the first step
    clock.step(2, now=42.0)
    assert clock.seconds_left(42.0) is None and clock.describe(42.0) == ""
    clock.step(3, now=54.0)  # two steps timed: 12 s a step, 14 steps an epoch
    epoch = 12.0 * 14 * IMAGES / 1709
    assert clock.seconds_left(54.0) == pytest.approx((2 - 3 / 14) * epoch)
    assert clock.describe(54.0) == f"about {figures.rough_duration((2 - 3 / 14) * epoch)} left"
    clock.step(10, now=138.0)
    assert clock.seconds_left(138.0) == pytest.approx((2 - 10 / 14) * epoch)
    clock.epoch(200.0)  # the measured epoch replaces the steps' estimate
    assert clock.seconds_left(200.0) == pytest.approx(200.0)


def test_the_display_keeps_the_clock_and_fits_80_columns() -> None:
    out = io.StringIO()
    display = RunDisplay(Console(file=out, width=80, color_system=None))
    display.suite_started(["B0", "B3", "B7"], 2)
    display.model_started("B0", 2, lambda: None, 0)
    from gpubench.events import BatchChosen, BatchTrial, Phase, SearchSummary

    for event in (
        Phase(phase="search", message="searching"),
        BatchTrial(batch=16, fits=True, trial_kind="probe", reserved_peak_bytes=1866465280,
                   seconds=7.0, step_seconds=0.02),
        BatchChosen(batch=128, rule="steps", fallbacks=(64, 32),
                    search=SearchSummary(largest=1221, capped=False, search_seconds=15.4,
                                         capacity_bytes=0, fixed_bytes=0, per_image_bytes=0)),
    ):
        display.event(event)
    display.model_finished()
    lines = out.getvalue().splitlines()
    assert "B0: probe batch 16 fits (1.7 GiB), 7 s" in lines
    assert "B0: fits batch 1221; timed at 128 (search 15 s)" in lines
    assert all(len(line) <= 80 for line in lines)
    assert display.clock is not None and display.clock.models[0].image_seconds == 0.02 / 16
