"""The answers people came for, from stored runs: how long a training would take
(estimate), whether a card of some memory trains the model and at about what batch
(fit), and what the speed costs (a comparison with prices).

Each answer is one JSON-ready document, its sentences included, made here once: the
`gpubench estimate`, `fit` and `compare --price` commands print it (or its JSON), and
the results site shows it and answers it as JSON at a stable address. Measured runs
answer; published figures (transcribed) are answered apart, never mixed in.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

import pandas as pd

from gpubench import estimate as estimating
from gpubench import figures, frames, prices, record, stored_runs
from gpubench import fit as fitting
from gpubench.errors import NotFound
from gpubench.stored_runs import Setup
from gpubench.v1 import collector_pb2, run_pb2


class RunSource(Protocol):
    """What the answers read stored runs through: the Client (gpubench.client), whose
    fit and estimate call them, so that this module needs no import of it."""

    def iter_runs(self, *, gpu: str | None = None, model: str | None = None
                  ) -> Iterator[collector_pb2.StoredRun]: ...

    def model_of(self, text: str) -> tuple[str, str]: ...

PUBLISHED_HEADING = "Published figures (transcribed from the article, not measured by gpubench)"
ASSUMES = ("Assumes an epoch's time (training and validation) linear in its images, epoch 1's "
           "extra start-up (epoch 1 minus epoch 2) paid once, and every later epoch as long as "
           "epoch 2 (no checkpoints, no early stopping).")


@dataclass
class Runs:
    """The usable runs behind an answer: measured and published apart, and the outliers
    left out by their group, for a note."""

    measured: list[run_pb2.Run] = field(default_factory=list)
    published: list[run_pb2.Run] = field(default_factory=list)
    outliers: dict[Setup, list[run_pb2.Run]] = field(default_factory=dict)

    def outlier_note(self, setup: Setup) -> str:
        """'; 2 outliers left out: --include-outliers keeps them', or ''."""
        count = len(self.outliers.get(setup, []))
        if not count:
            return ""
        return (f"; {count} outlier{'s' if count > 1 else ''} left out: --include-outliers "
                "keeps them")


def read_runs(client: RunSource, model: str, gpu: str | None = None, *,
              include_outliers: bool = False) -> Runs:
    """The usable runs of `model` (a model's name or fingerprint: Client.model_of) on the
    GPUs `gpu` names (stored_runs.names_gpu; every GPU: None)."""
    model, fingerprint = client.model_of(model)
    # The collector lists the runs whose GPU's name contains the name: matches_gpu keeps
    # the GPU of that name.
    named = record.normalize_gpu_name(gpu) if gpu else None
    stored = [s for s in client.iter_runs(model=model, gpu=named)
              if s.run.config.model_fingerprint.startswith(fingerprint)]
    matching = [s for s in stored if gpu is None or stored_runs.matches_gpu(s.run, gpu)]
    left_out = [] if include_outliers else stored_runs.outliers(matching)
    measured, published = stored_runs.split(matching, include_outliers=include_outliers)
    return Runs(measured, published, stored_runs.grouped(left_out))


def no_such_gpu(client: RunSource, model: str, gpu: str) -> NotFound:
    """`gpu` names no GPU with runs of `model` (a typo, most likely): the error names the
    closest and every GPU that has runs of it (stored_runs.no_gpu_named)."""
    names = {stored_runs.gpu_name(stored.run) or "CPU" for stored in client.iter_runs(model=model)}
    return stored_runs.no_gpu_named("--gpu", gpu, names, f" of {model}")


def card_memory(client: RunSource, name: str) -> int:
    """The memory of the card named `name` (as NVML names it, case aside), as its stored
    runs' inventories recorded it; NotFound naming the card when no run was on one."""
    wanted = record.normalize_gpu_name(name).casefold()
    sizes = sorted(gpu.memory_total_bytes for stored in client.iter_runs(gpu=name)
                   for gpu in stored.run.gpus
                   if record.normalize_gpu_name(gpu.name).casefold() == wanted
                   and gpu.memory_total_bytes)
    if not sizes:
        raise NotFound(f"card {name!r}: no stored run was on a GPU of that name, so its memory "
                       "is unknown (give the memory instead, e.g. 16GiB)")
    return sizes[len(sizes) // 2]


# -- estimate ---------------------------------------------------------------------------


def _seconds_range(values: list[float]) -> str:
    low, high = figures.seconds(values[0]), figures.seconds(values[-1])
    return low if low == high else f"{low.removesuffix(' s')}-{high}"


def _estimate_group(runs: Runs, group: estimating.GroupEstimate) -> dict[str, Any]:
    members = group.runs
    epoch2 = sorted(r.epoch2_s for r in members)
    epoch1 = sorted(r.epoch1_s for r in members if r.epoch1_s > 0)
    images = sorted({r.run_images for r in members})
    basis = "epoch 2 " + _seconds_range(epoch2)
    if epoch1:
        basis += ", epoch 1 " + _seconds_range(epoch1)
    else:
        basis += " (epoch 1 not recorded: no start-up added)"
    basis += (f", at {', '.join(f'{n:,}' for n in images)} training images, "
              f"{figures.TIMED_BATCH} {', '.join(str(b) for b in group.batches)}")
    count = f"{len(members)} run" + ("s" if len(members) > 1 else "")
    return {
        "setup": group.setup.as_dict(),
        "runs": len(members),
        "seconds_min": group.min_s,
        "seconds_median": group.median_s,
        "seconds_max": group.max_s,
        "per_run": [asdict(r) for r in members],
        "answer": f"{group.setup.gpu_config}: {figures.duration_range(group.seconds)} "
                  f"({count}{runs.outlier_note(group.setup)})",
        "basis": f"from {basis}",
        "settings": f"settings: {group.setup.describe()}",
    }


def estimate_document(runs: Runs, model: str, epochs: int, images: int,
                      gpu: str | None = None) -> dict[str, Any]:
    """How long `epochs` epochs of `images` training images take on each GPU
    configuration (gpubench.estimate says how): one entry per group of like runs, with
    the range over its runs and the sentences that say it."""
    where = f" on {gpu}" if gpu else ""
    return {
        "model": model, "gpu": gpu or "", "epochs": epochs, "images": images,
        "question": f"{model}{where}: {epochs:,} epochs of {images:,} training images",
        "none": f"none stored of {model}{where} (gpubench runs list --model {model} lists "
                "what there is)",
        "measured": [_estimate_group(runs, g)
                     for g in estimating.estimate(runs.measured, epochs, images)],
        "published": [_estimate_group(runs, g)
                      for g in estimating.estimate(runs.published, epochs, images)],
        "assumes": ASSUMES,
    }


# -- fit --------------------------------------------------------------------------------


def _gib(num_bytes: float) -> str:
    return f"{num_bytes / frames.GIB:.2f} GiB"


def _verdict(result: fitting.Answer) -> str:
    if not result.basis:
        return "no run says"
    if result.basis == fitting.BOUND:
        return f"fits, at batch {result.batch} at least" if result.batch else \
            "not shown to fit (the runs' peaks are above the budget)"
    if result.batch == 0:
        return "does not fit, not even batch 1"
    low, high = result.batches[0], result.batches[-1]
    spread = f" ({low}-{high} across runs)" if low != high else ""
    capped = any(f.capped and f.batch == result.batch for f in result.deciding)
    return f"fits, at about batch {result.batch}{' or more' if capped else ''}{spread}"


def _how_sure(result: fitting.Answer) -> str:
    """Why the answer deserves the trust it does, in a sentence."""
    runs = len(result.deciding)
    count = f"{runs} run" + ("s" if runs > 1 else "")
    if result.confidence == "high":
        return f"high: searched on a card of (nearly) that memory ({count})"
    if result.basis == fitting.SEARCHED:
        return f"fair: searched at (nearly) that memory, but the {count} disagree"
    tried = sorted({b for f in result.deciding for b in f.trial_batches})
    span = f"{tried[0]}-{tried[-1]}" if tried else ""
    if result.confidence == "fair":
        return (f"fair: predicted by the memory line of {count} searched on another card, "
                f"within the batches its trials measured ({span})")
    if result.confidence == "rough":
        return (f"rough: predicted by the memory line of {count} searched on another card, "
                f"outside the batches its trials measured ({span}); the card's driver "
                "context and allocator are left to the headroom")
    return f"a floor only: one peak at one batch ({count}) bounds the memory per image"


def _fit_lines(found: fitting.RunFit, memory_bytes: int) -> tuple[str, str]:
    """What one run says: its answer, and what the answer rests on ('' when searched)."""
    card = f"{found.setup.gpu_config} ({record.memory_size(found.capacity_bytes)})"
    if found.basis == fitting.SEARCHED:
        more = " or more (the training set capped the search)" if found.capped else ""
        return f"{card}: batch {found.batch}{more}, searched", ""
    if found.basis == fitting.LINE and found.line is not None:
        trials = ", ".join(str(b) for b in found.trial_batches)
        return (f"{card}: batch {found.batch}, predicted",
                f"from its search's trials at batches {trials}: "
                f"{_gib(found.line.fixed_bytes)} + {_gib(found.line.per_image_bytes)} an image; "
                f"{record.memory_size(memory_bytes)} less {fitting.HEADROOM:.0%} headroom is "
                f"{_gib(fitting.budget_bytes(memory_bytes))}")
    return (f"{card}: at least batch {found.batch}, a floor",
            f"from its peak of {_gib(found.peak_bytes)} at batch {found.peak_batch}: at "
            f"most {_gib(found.peak_bytes / found.peak_batch)} an image")


def _answer_document(result: fitting.Answer, memory_bytes: int) -> dict[str, Any]:
    runs = []
    for run_fit in result.deciding:
        answer, basis = _fit_lines(run_fit, memory_bytes)
        runs.append({**asdict(run_fit), "setup": run_fit.setup.as_dict(),
                     "extrapolated": run_fit.extrapolated,
                     "answer": answer, "basis_text": basis,
                     "settings": f"settings: {run_fit.setup.describe()}"})
    return {
        "basis": result.basis,
        "batch": result.batch,
        "confidence": result.confidence,
        "verdict": _verdict(result),
        "how_sure": f"How sure: {_how_sure(result)}.",
        "runs": runs,
        "left_aside": len(result.fits) - len(result.deciding),
    }


def fit_document(runs: Runs, model: str, memory_bytes: int,
                 card: str = "") -> dict[str, Any]:
    """Whether a card of `memory_bytes` (the card named `card`, if one was) trains
    `model`, and at about what batch (gpubench.fit says how): one answer per way of
    computing the network, each with how sure it is and the runs it rests on."""
    size = record.memory_size(memory_bytes)
    named = f"{card}, " if card else ""
    measured = fitting.answers(runs.measured, memory_bytes)
    published = fitting.answers(runs.published, memory_bytes)
    return {
        "model": model, "memory_bytes": memory_bytes, "memory": size, "card": card,
        "question": f"{model} on a card of {named}{size} ({memory_bytes / 1e9:.2f} GB)",
        "none": f"none of {model} with batch trials or a searched largest batch",
        "measured": {label: _answer_document(a, memory_bytes) for label, a in measured.items()
                     if a.basis},
        "published": {label: _answer_document(a, memory_bytes)
                      for label, a in published.items() if a.basis},
    }


# -- cost -------------------------------------------------------------------------------


def cost_document(frame: pd.DataFrame, book: prices.Prices) -> dict[str, Any]:
    """A comparison (gpubench.frames.compare_frame) with what the cards buy: each group's
    price and training images a second per 1,000 USD, the prices, and a warning for each
    GPU without one."""
    costed = prices.cost_frame(frame, book) if len(book) and not frame.empty else frame
    document = frames.compare_document(costed)
    if len(book):
        document["prices_usd"] = book.as_dict()
        document["warnings"] += prices.unpriced(costed) if "usd" in costed else []
    return document
