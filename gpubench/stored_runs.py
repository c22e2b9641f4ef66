"""Picking stored runs for an answer, and saying how they were measured.

`gpubench estimate`, `fit` and `plot` read stored runs (ListRuns) rather than a
comparison: they need each run's epochs, batch trials and memory limit. This module
keeps the rules they share in one place: measured runs apart from published ones,
runs flagged as implausible and outliers left out, and runs grouped by everything
that changes what was timed so that no figure mixes unlike runs.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable
from dataclasses import dataclass

from gpubench import comparison_key, record
from gpubench.errors import NotFound
from gpubench.v1 import collector_pb2, run_pb2


@dataclass(frozen=True, order=True)
class Setup:
    """Everything that changes what a run timed, as one group's key: the GPU
    configuration and the comparison key in comparison_key.SETUP_DIMENSIONS, which
    leaves out the training images and the epochs: `estimate` scales a run's epoch-2
    time by the images and epochs asked for, and `fit`'s memory does not depend on
    them, so runs of other sizes answer alike. `setup.backend` reads the key's."""

    gpu_config: str  # "1x NVIDIA H200", "1x NVIDIA H200 as 16 GiB"
    key: comparison_key.Key

    def __getattr__(self, name: str) -> comparison_key.Value:
        if name == "key":  # not yet set (a copy being made)
            raise AttributeError(name)
        try:
            return self.key[name]
        except KeyError:
            raise AttributeError(name) from None

    def as_dict(self) -> dict[str, comparison_key.Value]:
        """The GPU configuration and the key's values, by name (JSON-ready)."""
        return {"gpu_config": self.gpu_config, **self.key}

    def describe(self) -> str:
        """How the runs were measured, in one line: 'torch float32 kernels+cuda-graphs,
        batch rule steps, cached, synthetic-rps, weights none, 600 px'."""
        rule = self.batch_rule or "unrecorded"
        return (f"{self.backend} {self.precision} {self.settings}, batch rule {rule}, "
                f"{self.pipeline} pipeline, {self.data} data, weights {self.weights}, "
                f"{self.image_size} px")


def gpu_name(run: run_pb2.Run) -> str:
    """The run's GPU name(s) as the collector files them ("" on a CPU)."""
    return " + ".join(sorted({record.normalize_gpu_name(g.name) for g in run.gpus}))


def gpu_count(run: run_pb2.Run) -> int:
    """How many GPUs trained."""
    return run.config.gpu_count or len(run.gpus)


def setup_of(run: run_pb2.Run) -> Setup:
    """The group a run belongs to."""
    return Setup(
        gpu_config=record.gpu_config_name(gpu_name(run), gpu_count(run),
                                          run.config.memory_limit_bytes),
        key=comparison_key.key_of(run).only(comparison_key.SETUP_DIMENSIONS),
    )


def names_gpu(name: str, wanted: str) -> bool:
    """The --gpu rule: whether `wanted` is the GPU name `name` in full, any case and white
    space as the collector normalises names ("tesla  t4" is the Tesla T4; "T4" names
    none: closest_gpu_names says what it may mean)."""
    return (record.normalize_gpu_name(name).casefold()
            == record.normalize_gpu_name(wanted).casefold())


def matches_gpu(run: run_pb2.Run, wanted: str) -> bool:
    """Whether `wanted` names one of the run's GPUs (names_gpu)."""
    return any(names_gpu(gpu.name, wanted) for gpu in run.gpus)


def closest_gpu_names(wanted: str, names: Iterable[str], count: int = 3) -> list[str]:
    """Up to `count` of `names` most like `wanted` (difflib's ratio against the whole
    name or any run of its words, at least 0.5 and near the best), the most alike first:
    what a --gpu that names no GPU may have meant ("Tesla T5", "H200", "rtx6000 ada")."""
    needle = record.normalize_gpu_name(wanted).casefold()
    scored = []
    for name in set(names):
        words = re.findall(r"\w+", record.normalize_gpu_name(name).casefold())
        parts = {" ".join(words[start:end]) for start in range(len(words))
                 for end in range(start + 1, len(words) + 1)}
        score = max((difflib.SequenceMatcher(None, needle, part).ratio()
                     for part in parts | {name.casefold()}), default=0.0)
        if score >= 0.5:
            scored.append((-score, name))
    # Only those about as alike as the most alike: "H200" is the NVIDIA H200, not also
    # the A100 its "00" resembles.
    best = -min(scored)[0] if scored else 0.0
    return [name for score, name in sorted(scored)[:count] if -score >= best - 0.15]


def no_gpu_named(flag: str, wanted: str, names: Iterable[str], runs_of: str = "") -> NotFound:
    """NotFound for a `flag` ("--gpu") whose `wanted` names none of `names`, the GPUs
    with runs (`runs_of`: " of B7", or "" for any run): the closest names, then all."""
    known = sorted(set(names))
    close = closest_gpu_names(wanted, known)
    guess = f"; did you mean {' or '.join(close)}?" if close else ""
    found = f"GPUs with runs{runs_of}: {', '.join(known)}" if known \
        else f"no GPU has runs{runs_of} yet"
    return NotFound(f"{flag} {wanted!r}: no GPU with runs{runs_of} is named so{guess} "
                    f"({found})")


def usable(stored: collector_pb2.StoredRun, *, include_outliers: bool = False) -> bool:
    """A finished run whose figures can answer: status ok and an epoch-2 time, not
    flagged as implausible, not an outlier unless asked."""
    run = stored.run
    return (run.result.status == run_pb2.RUN_STATUS_OK and run.result.epoch2_seconds > 0
            and not stored.flagged and (include_outliers or not stored.outlier))


def split(stored_runs: Iterable[collector_pb2.StoredRun], *, include_outliers: bool = False
          ) -> tuple[list[run_pb2.Run], list[run_pb2.Run]]:
    """The usable runs as (measured, published): the two are never mixed."""
    measured: list[run_pb2.Run] = []
    published: list[run_pb2.Run] = []
    for stored in stored_runs:
        if usable(stored, include_outliers=include_outliers):
            (published if stored.run.published else measured).append(stored.run)
    return measured, published


def outliers(stored_runs: Iterable[collector_pb2.StoredRun]) -> list[run_pb2.Run]:
    """The measured runs `split` leaves out as outliers of their GPU configuration."""
    return [stored.run for stored in stored_runs
            if stored.outlier and not stored.run.published
            and usable(stored, include_outliers=True)]


def grouped(runs: Iterable[run_pb2.Run]) -> dict[Setup, list[run_pb2.Run]]:
    """Runs by their Setup, in a stable order (by GPU configuration, then settings)."""
    groups: dict[Setup, list[run_pb2.Run]] = {}
    for run in runs:
        groups.setdefault(setup_of(run), []).append(run)
    return dict(sorted(groups.items()))


def epoch_seconds(run: run_pb2.Run, number: int) -> float:
    """The wall time of epoch `number` (training and validation), 0 if not recorded."""
    for epoch in run.result.epochs:
        if epoch.number == number:
            return epoch.wall_seconds
    return 0.0
