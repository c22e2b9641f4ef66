"""Charts drawn on the server as SVG, through the site's templates (no script, no fetch).

Positions along the value axis are percentages of the chart's width, and text has a
fixed size in pixels, so one SVG reads the same on a phone and on a desktop: the bars
stretch, the labels do not shrink.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from gpubench import figures
from gpubench.v1 import collector_pb2

ROW_HEIGHT = 46  # px: a label line above a bar
TOP = 8
AXIS_HEIGHT = 28
# Longer configuration names are cut in the chart (the table has them): a cut label and
# its figures fit a phone's width.
LABEL_CHARS = 34
NICE_STEPS = (0.1, 0.2, 0.25, 0.5, 1, 2, 2.5, 5, 10, 20, 25, 50, 100, 200, 500, 1000)


@dataclass(frozen=True)
class Bar:
    """One GPU configuration's bar: its speedup and the speedups its runs' spread spans."""

    label: str
    value_text: str
    baseline: bool
    y: int  # top of the label line, px
    width: float  # % of the plot
    low: float  # % of the plot: the slowest run's speedup
    high: float  # the fastest run's


@dataclass(frozen=True)
class Tick:
    """A grid line of the value axis."""

    x: float  # %
    text: str


@dataclass(frozen=True)
class SpeedupChart:
    """What the speedup.svg template draws."""

    bars: list[Bar]
    ticks: list[Tick]
    height: int
    axis_y: int
    one_x: float  # % where the baseline's 1.0x falls
    title: str


def _short(text: str) -> str:
    return text if len(text) <= LABEL_CHARS else text[: LABEL_CHARS - 1] + "…"


def _step(most: float) -> float:
    """The smallest nice tick step that draws at most 6 ticks up to `most`."""
    for step in NICE_STEPS:
        if most / step <= 6:
            return step
    return 10 ** math.ceil(math.log10(most / 6))


def speedup_chart(groups: list[collector_pb2.CompareGroup], names: list[str],
                  title: str) -> SpeedupChart:
    """The bars of a comparison's groups (fastest first), `names` their configurations.

    Each bar is the group's speedup over the baseline (its median epoch 2 against the
    baseline's); the whisker spans the speedups of its slowest and fastest run, the
    spread a reader should weigh a difference against.
    """
    spans = []
    for group in groups:
        median = group.epoch2_median_seconds
        low = group.speedup * median / group.epoch2_max_seconds if group.epoch2_max_seconds \
            else group.speedup
        high = group.speedup * median / group.epoch2_min_seconds if group.epoch2_min_seconds \
            else group.speedup
        spans.append((low, high))
    if not groups:
        return SpeedupChart(bars=[], ticks=[], height=AXIS_HEIGHT, axis_y=TOP, one_x=0.0,
                            title=title)
    most = max([1.0, *(high for _, high in spans), *(g.speedup for g in groups)]) * 1.06
    step = _step(most)

    def at(value: float) -> float:
        return round(min(value / most, 1.0) * 100, 3)

    bars = []
    for i, (group, name, (low, high)) in enumerate(zip(groups, names, spans, strict=True)):
        # The table's figures, as every view formats them (gpubench.figures).
        text = f"{figures.speedup(group.speedup)} · {figures.seconds(group.epoch2_median_seconds)}"
        if group.is_baseline:
            text += " · baseline"
        bars.append(Bar(label=_short(name), value_text=text, baseline=group.is_baseline,
                        y=TOP + i * ROW_HEIGHT, width=at(group.speedup), low=at(low),
                        high=at(high)))
    ticks = []
    value = 0.0
    while value <= most + 1e-9:
        ticks.append(Tick(x=at(value), text=f"{value:g}x"))
        value = round(value + step, 6)
    axis_y = TOP + len(groups) * ROW_HEIGHT
    return SpeedupChart(bars=bars, ticks=ticks, height=axis_y + AXIS_HEIGHT, axis_y=axis_y,
                        one_x=at(1.0), title=title)
