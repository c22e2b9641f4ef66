"""The figures `gpubench plot` draws: per group of like runs, each metric's median and
spread (min, max) over the runs, measured and published apart.

Grouping is stored_runs.Setup: runs that differ in anything that changes what was
timed are separate bars. A published run contributes only what was published (no
throughput or energy for the article's T4): a missing figure is left out, never
derived.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace

from gpubench import fit, stored_runs
from gpubench.stored_runs import Setup
from gpubench.v1 import run_pb2

GIB = 1024**3


@dataclass(frozen=True)
class Metric:
    """One chart: what it shows and how a run gives it (0: not recorded)."""

    name: str  # file name part: "epoch-time"
    title: str
    axis: str  # the value axis' label, with its unit
    value: Callable[[run_pb2.Run], float]
    better: str  # "lower" or "higher", said in the title ("" says nothing)


def _energy(run: run_pb2.Run) -> float:
    return run.result.energy_per_epoch_joules


METRICS = (
    Metric("epoch-time", "epoch 2 wall time", "seconds (training and validation)",
           lambda run: run.result.epoch2_seconds, "lower"),
    Metric("throughput", "training throughput", "training images per second",
           lambda run: run.result.train_images_per_second, "higher"),
    Metric("peak-memory", "peak GPU memory and the card's memory", "GiB (the allocator's peak)",
           lambda run: fit.run_peak(run) / GIB, ""),
    Metric("energy", "energy of epoch 2, all GPUs", "joules",
           _energy, "lower"),
)


def in_unit(metric: Metric, unit: str) -> Metric:
    """`metric` with its axis in the runs' unit: a language model's throughput counts
    tokens (gpubench.models)."""
    if metric.name != "throughput" or unit != "tokens":
        return metric
    return replace(metric, axis="training tokens per second")


@dataclass(frozen=True)
class Bar:
    """One group's figure of one metric."""

    setup: Setup
    published: bool
    runs: int  # runs with the figure
    median: float
    low: float
    high: float
    capacity_gib: float  # the card's memory (or --memory-limit), for peak memory
    batches: tuple[int, ...]


def bars(runs: Iterable[run_pb2.Run], metric: Metric, *, published: bool) -> list[Bar]:
    """One Bar per group of `runs` that has the metric, in stored_runs.grouped's order."""
    found = []
    for setup, members in stored_runs.grouped(runs).items():
        values = sorted(v for v in (metric.value(run) for run in members) if v > 0)
        if not values:
            continue
        capacity = min(fit.capacity_bytes(run) for run in members) / GIB
        found.append(Bar(setup, published, len(values), statistics.median(values), values[0],
                         values[-1], capacity,
                         tuple(sorted({run.config.batch_per_gpu for run in members}))))
    return found


def missing(runs: Iterable[run_pb2.Run], metric: Metric) -> list[str]:
    """The groups of `runs` without the metric (GPU configurations), for a footnote."""
    return [setup.gpu_config for setup, members in stored_runs.grouped(runs).items()
            if not any(metric.value(run) > 0 for run in members)]
