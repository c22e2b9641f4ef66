"""The training-time arithmetic of `gpubench estimate`, against hand-computed figures."""

from __future__ import annotations

import pytest
from factories import make_run

from gpubench import estimate, record


def test_startup_once_and_epochs_linear_in_images() -> None:
    # The article's T4, B7: epoch 1 839 s, epoch 2 678 s; 400 epochs of its 1709 images
    # are 161 s of start-up once plus 400 x 678 s.
    assert estimate.training_seconds(839, 678, 1709, 400, 1709) == pytest.approx(271_361)
    # Twice the images: every epoch twice as long, the start-up not.
    assert estimate.training_seconds(839, 678, 1709, 400, 3418) == pytest.approx(542_561)


def test_no_startup_without_epoch_one_or_below_epoch_two() -> None:
    assert estimate.training_seconds(0, 10, 100, 3, 50) == pytest.approx(15)
    assert estimate.training_seconds(8, 10, 100, 3, 100) == pytest.approx(30)


def test_nothing_to_scale_from_is_an_error() -> None:
    with pytest.raises(ValueError):
        estimate.training_seconds(10, 0, 1709, 400, 1709)


def test_groups_keep_unlike_runs_apart_with_their_range() -> None:
    runs = [make_run(model="B7", gpu_name="Tesla T4", epoch2_seconds=s) for s in (600, 700, 650)]
    other = make_run(model="B7", gpu_name="Tesla T4", epoch2_seconds=100, precision="mixed_float16")
    groups = estimate.estimate([*runs, other], epochs=10, images=record.STANDARD_TRAIN_IMAGES)
    assert len(groups) == 2
    [float32] = [g for g in groups if g.setup.precision == "float32"]
    # make_run's epoch 1 is 3.9 x epoch 2: a start-up of 2.9 x epoch 2, once.
    assert float32.min_s == pytest.approx(600 * 2.9 + 10 * 600)
    assert float32.median_s == pytest.approx(650 * 2.9 + 10 * 650)
    assert float32.max_s == pytest.approx(700 * 2.9 + 10 * 700)
    assert float32.batches == [2]


