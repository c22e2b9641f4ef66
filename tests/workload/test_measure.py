"""Step statistics of an epoch: images/s after warm-up, median step time, CV, warnings."""

from __future__ import annotations

import pytest

from gpubench.agent.workload.measure import CV_WARNING, step_stats


def test_rate_leaves_out_the_warmup_step_and_counts_the_short_last_batch() -> None:
    # Epoch starts at 10.0; a slow first step (2 s), then four of 0.5 s, the last one short.
    ends = [12.0, 12.5, 13.0, 13.5, 14.0]
    images = [8, 8, 8, 8, 3]
    stats = step_stats(10.0, ends, images)
    assert stats.timed_steps == 4
    assert stats.images_per_second == pytest.approx((8 + 8 + 8 + 3) / 2.0)
    assert stats.step_time_median_seconds == pytest.approx(0.5)
    assert stats.step_time_cv == pytest.approx(0.0)
    assert stats.warnings == []


def test_uneven_steps_are_flagged() -> None:
    ends, t = [], 0.0
    for step_time in (1.0, 0.2, 0.6, 0.2, 0.6, 0.2, 0.6):
        t += step_time
        ends.append(t)
    stats = step_stats(0.0, ends, [4] * len(ends))
    assert stats.step_time_cv > CV_WARNING
    assert any("vary by" in w and "run it again with nothing else busy" in w
               for w in stats.warnings)  # what to do, not only that it is unstable
    assert stats.step_time_median_seconds == pytest.approx(0.4)


def test_too_few_steps_are_flagged_not_hidden() -> None:
    stats = step_stats(0.0, [1.0], [16], label="epoch 2: ")
    assert stats.timed_steps == 1
    assert stats.images_per_second == pytest.approx(16.0)
    assert any(w.startswith("epoch 2: only 1 step") for w in stats.warnings)


def test_no_steps_gives_zero_and_a_warning() -> None:
    stats = step_stats(0.0, [], [])
    assert stats.images_per_second == 0.0 and stats.warnings
