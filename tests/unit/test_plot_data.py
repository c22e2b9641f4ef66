"""The figures `gpubench plot` draws: each group's median and spread, nothing derived."""

from __future__ import annotations

from factories import make_run

from gpubench import plot_data

METRICS = {metric.name: metric for metric in plot_data.METRICS}


def test_a_group_is_drawn_at_its_median_with_its_range() -> None:
    runs = [make_run(model="B7", gpu_name="Tesla T4", epoch2_seconds=s) for s in (700, 600, 650)]
    [bar] = plot_data.bars(runs, METRICS["epoch-time"], published=False)
    assert (bar.median, bar.low, bar.high, bar.runs) == (650, 600, 700, 3)
    assert bar.setup.gpu_config == "1x Tesla T4" and bar.batches == (2,)
    # The T4's 15,360 MiB is 15 GiB.
    assert bar.capacity_gib == 15


def test_unlike_runs_are_separate_bars_and_missing_figures_are_not_made_up() -> None:
    float32 = make_run(model="B0", epoch2_seconds=17.0)
    bf16 = make_run(model="B0", epoch2_seconds=9.0, precision="mixed_bfloat16")
    article = make_run(model="B0", epoch2_seconds=17.0, energy_per_epoch_joules=0.0)
    article.result.train_images_per_second = 0  # the article published none
    assert len(plot_data.bars([float32, bf16], METRICS["epoch-time"], published=False)) == 2
    assert plot_data.bars([article], METRICS["energy"], published=True) == []
    assert plot_data.missing([article], METRICS["throughput"]) == ["1x Tesla T4"]
