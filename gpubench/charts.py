"""Charts of comparisons (matplotlib, the `charts` extra): the one module that draws."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from gpubench import tables
from gpubench.errors import ExitCode, GpubenchError


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
            "--chart needs matplotlib: pip install 'gpubench[charts]'", exit_code=ExitCode.USAGE
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
            f"{tables.format_speedup(s)}  ({tables.format_seconds(t)} s)"
            for s, t in zip(rows["speedup"], rows["epoch2_median_s"], strict=True)
        ]
        axes.bar_label(bars, labels=notes, padding=3)
        axes.set_xlabel("speedup (epoch 2 median, baseline = 1x)")
        axes.set_title(tables.compare_title(frame))
        axes.set_xlim(0, max(speedups + [1.0]) * 1.3)
        figure.tight_layout()
        target = Path(path)
        try:
            figure.savefig(target)
        except (OSError, ValueError) as exc:
            raise GpubenchError(
                f"{target}: cannot write the chart ({exc})", exit_code=ExitCode.BAD_DATA
            ) from None
    finally:
        plt.close(figure)
    return target
