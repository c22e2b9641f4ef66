"""Charts of comparisons (matplotlib, the `charts` extra): the one module that draws."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from gpubench import figures, plot_data, tables
from gpubench.errors import ExitCode, GpubenchError
from gpubench.versions import DISTRIBUTION


def speedup_chart(frame: pd.DataFrame, path: str | Path) -> Path:
    """Draw a comparison's speedups as horizontal bars into `path` (format by suffix).

    Each bar is labelled with its speedup and epoch-2 median; the baseline is drawn
    in a different colour.
    """
    try:
        import matplotlib

        matplotlib.use("Agg")  # files only, never a window
        import matplotlib.pyplot as plt
    except ImportError:
        raise GpubenchError(
            f"--chart needs matplotlib: pip install '{DISTRIBUTION}[charts]'",
            exit_code=ExitCode.USAGE,
        ) from None
    if frame.empty:
        raise GpubenchError(
            "nothing to draw: the comparison has no runs", exit_code=ExitCode.FAILURE
        )

    # Fastest at the top: barh draws the first row at the bottom.
    rows = frame.iloc[::-1]
    labels = [
        config + (" (baseline)" if baseline else "")
        for config, baseline in zip(rows["gpu_config"], rows["is_baseline"], strict=True)
    ]
    speedups = rows["speedup"].fillna(0.0).tolist()
    colours = ["#888888" if b else "#3b75af" for b in rows["is_baseline"]]

    figure, axes = plt.subplots(figsize=(8, 0.5 * len(rows) + 1.5))
    try:
        bars = axes.barh(labels, speedups, color=colours)
        notes = [
            f"{figures.speedup(s)}  ({figures.seconds(t)})"
            for s, t in zip(rows["speedup"], rows["epoch2_median_s"], strict=True)
        ]
        axes.bar_label(bars, labels=notes, padding=3)
        axes.set_xlabel(f"{figures.SPEEDUP}: {figures.SPEEDUP_MEANS}")
        axes.set_title(tables.compare_title(frame))
        axes.set_xlim(0, max(speedups + [1.0]) * 1.3)
        figure.tight_layout()
        return _save(figure, path)
    finally:
        plt.close(figure)


# -- gpubench plot: one metric per chart, the runs' spread as error bars -------------------

MEASURED_COLOUR = "#3b75af"
PUBLISHED_COLOUR = "#d08c45"
CAPACITY_COLOUR = "#e4e4e4"


def _pyplot() -> Any:
    try:
        import matplotlib

        matplotlib.use("Agg")  # files only, never a window
        import matplotlib.pyplot as plt
    except ImportError:
        raise GpubenchError(
            f"gpubench plot needs matplotlib: pip install '{DISTRIBUTION}[charts]'",
            exit_code=ExitCode.USAGE,
        ) from None
    return plt


def _bar_label(bar: plot_data.Bar) -> str:
    setup = bar.setup
    batches = ", ".join(str(b) for b in bar.batches)
    settings = "keras" if setup.settings == "keras" else setup.settings
    return (f"{setup.gpu_config}\n{setup.backend} {setup.precision} {settings}\n"
            f"batch {batches} ({setup.batch_rule or 'rule unrecorded'}), {setup.pipeline}, "
            f"{setup.data}")


def _value_text(metric: plot_data.Metric, bar: plot_data.Bar) -> str:
    runs = f"{bar.runs} run" + ("s" if bar.runs > 1 else "")
    if metric.name == "peak-memory":
        share = bar.median / bar.capacity_gib if bar.capacity_gib else 0
        text = f"{bar.median:.1f} of {bar.capacity_gib:.0f} GiB ({figures.share(share)})"
    elif metric.name == "energy":
        text = figures.energy(bar.median)
    else:
        text = figures.three_digits(bar.median)
    if bar.high > bar.low and metric.name == "energy":
        text += f"  [{figures.energy(bar.low)}-{figures.energy(bar.high)}]"
    elif bar.high > bar.low:
        text += f"  [{figures.three_digits(bar.low)}-{figures.three_digits(bar.high)}]"
    return f"{text}, {runs}"


def _draw_panel(axes: Any, metric: plot_data.Metric, rows: Sequence[plot_data.Bar]) -> None:
    """One panel: a horizontal bar per group, top to bottom, with its whiskers."""
    positions = list(range(len(rows), 0, -1))  # barh draws the first at the bottom
    medians = [bar.median for bar in rows]
    published = rows[0].published
    right = max(bar.high for bar in rows)
    if metric.name == "peak-memory":
        capacities = [bar.capacity_gib for bar in rows]
        axes.barh(positions, capacities, color=CAPACITY_COLOUR, edgecolor="#9a9a9a",
                  height=0.72, label="the card's memory (or --memory-limit)")
        right = max(right, *capacities)
        axes.legend(loc="lower right", fontsize=8, frameon=False)
    drawn = axes.barh(positions, medians, height=0.5, edgecolor="white",
                      color=PUBLISHED_COLOUR if published else MEASURED_COLOUR,
                      hatch="//" if published else "")
    # Whiskers only where runs differ: a single run's zero-width whisker reads as a
    # spread that is not there.
    spread = [i for i, bar in enumerate(rows) if bar.high > bar.low]
    if spread:
        axes.errorbar([medians[i] for i in spread], [positions[i] for i in spread],
                      xerr=[[rows[i].median - rows[i].low for i in spread],
                            [rows[i].high - rows[i].median for i in spread]],
                      fmt="none", ecolor="#222222", capsize=5, elinewidth=1.2)
    for rect, bar in zip(drawn, rows, strict=True):
        # Beyond the capacity bar where one is drawn, so the text crosses no edge.
        anchor = max(bar.high, bar.capacity_gib) if metric.name == "peak-memory" else bar.high
        axes.annotate(_value_text(metric, bar), (anchor, rect.get_y() + 0.25),
                      xytext=(6, 0), textcoords="offset points", va="center", fontsize=9)
    axes.set_yticks(positions, [_bar_label(bar) for bar in rows], fontsize=8.5)
    axes.set_xlim(0, right * 1.6)
    axes.set_ylim(0.3, len(rows) + 0.7)
    axes.set_xlabel(metric.axis, fontsize=9)
    axes.grid(axis="x", color="#dddddd", linewidth=0.6)
    axes.set_axisbelow(True)
    for side in ("top", "right"):
        axes.spines[side].set_visible(False)


def metric_chart(
    model: str,
    metric: plot_data.Metric,
    measured: Sequence[plot_data.Bar],
    published: Sequence[plot_data.Bar],
    path: str | Path,
    *,
    footnotes: Sequence[str] = (),
) -> Path:
    """Draw one metric of `model` into `path` (format by suffix): a horizontal bar per
    group of like runs at the median, the runs' min-max as whiskers. Measured runs
    and published figures (hatched, another colour) are separate panels, each on its
    own scale, so that neither hides the other's spread. Peak memory bars stand on
    the card's capacity drawn behind them."""
    plt = _pyplot()
    panels = [(rows, title) for rows, title in (
        (list(measured), "measured by gpubench"),
        (list(published), "published: the article's figures, transcribed "
                          "(not measured by gpubench)"),
    ) if rows]
    if not panels:
        raise GpubenchError(f"nothing to draw: no run of {model} has {metric.title}",
                            exit_code=ExitCode.FAILURE)
    notes = ["bar: median of the runs; whiskers: fastest to slowest run (min-max)"
             + ("; each panel on its own scale" if len(panels) > 1 else ""), *footnotes]
    heights = [len(rows) + 0.9 for rows, _ in panels]
    figure, grid = plt.subplots(
        len(panels), 1, squeeze=False, gridspec_kw={"height_ratios": heights},
        figsize=(9, 0.8 * sum(heights) + 1.0 * len(panels) + 0.2 * len(notes) + 0.6))
    try:
        for axes, (rows, title) in zip(grid[:, 0], panels, strict=True):
            _draw_panel(axes, metric, rows)
            axes.set_title(title, loc="left", fontsize=9,
                           color="#8a5a20" if rows[0].published else "#1f4e79")
        better = f" ({metric.better} is better)" if metric.better else ""
        figure.suptitle(f"{model}: {metric.title}{better}", x=0.01, ha="left", fontsize=12)
        figure.text(0.01, 0.01, "\n".join(notes), fontsize=7.5, color="#555555",
                    va="bottom")
        bottom = (0.2 * len(notes) + 0.25) / figure.get_figheight()
        figure.tight_layout(rect=(0, bottom, 1, 1))
        return _save(figure, path, dpi=110)
    finally:
        plt.close(figure)


def _save(figure: Any, path: str | Path, dpi: float | None = None) -> Path:
    """Write `figure` to `path` (the format by its suffix); an error names the file."""
    target = Path(path)
    try:
        figure.savefig(target, dpi=dpi)
    except (OSError, ValueError) as exc:
        raise GpubenchError(
            f"{target}: cannot write the chart ({exc})", exit_code=ExitCode.BAD_DATA
        ) from None
    return target
