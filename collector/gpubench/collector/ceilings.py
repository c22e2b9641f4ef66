"""How fast a GPU could possibly train the benchmark: the ceilings a run is held to.

The figures are data (gpu_specs.json beside this module, the GPU catalogue): each known
GPU's names, architecture, peak TFLOP/s per precision, memory bandwidth, memory, power
limit and compute capability with the datasheet they come from, each model's FLOPs and
memory per training image, and the fastest run the project verified of a card in each
configuration. What a run of a card is expected to reach comes from those verified runs:
the card's own, else another card's scaled by the two cards' figures the way the model
scales (`Specs.expectation`). A run faster than its expectation by more than its margin,
or than the card's peaks, is implausible (collector.plausibility flags it); so is a run
on a GPU whose name the catalogue does not know. Adding a card's verified runs is a
change of data alone: rows of `verified`, with their records.

A run's GPU name is either a catalogued card's (the names NVML gives it, matched
exactly; a MIG device's name is its card's with the profile after "MIG") or
unrecognised. An unrecognised name is flagged; where it looks like a catalogued card's
(its skeleton, below, at most LOOK_ALIKE_EDITS from a catalogued name's: "NVIDIA-H200",
"NVIDIA H2OO", "NVIDlA H200", "nvidia h200", "NVIDIA H300") the reason names the card it
imitates, so that a reader sees the imitation at once. Any other may be a card the
catalogue does not list yet: its runs, flagged for nothing else, are shown apart as "not
yet in the catalogue" (collector.aggregates), never ranked with the catalogued cards'.
A skeleton is the name with case folded, the characters people and fonts confuse mapped
to one (O and 0; l, I, i, | and 1), everything but letters and digits left out.
Pure Python, no database.
"""

from __future__ import annotations

import functools
import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpubench import models

SPECS_FILE = Path(__file__).with_name("gpu_specs.json")

# A verified run is the fastest the project has seen on a card in one configuration
# (settings label, precision and batch rule); a faster one is not impossible (a newer
# version, a luckier machine: the project's own repeats of one configuration span up to
# 1.2x as versions improved), but one more than this many times faster than the fastest
# verified run of its own configuration is a claim nobody has shown.
SAME_CONFIGURATION_MARGIN = 1.25
# Where the card has verified runs of the run's precision but not of its settings or
# batch rule: the fastest of that precision (other settings are slower, not faster: the
# H200's fastest float32 B0 runs are all within 1.1x of each other) with a wider margin.
SAME_PRECISION_MARGIN = 1.5
# Where the card has no verified run of the precision's family (precision_family) at all:
# its fastest of any configuration (a transformer's times what its precision's faster
# units give, precision_gain), wider: a 16-bit run of the EfficientNets beat the fastest
# float32 one by 1.43x on the H200 (3,941 against 2,760 img/s), the ViT's bfloat16 its
# float32 by 1.91x on the H100 (1,996 against 1,045), torchvision's own B0 trains 5,136
# img/s in bfloat16 on the H200 (1.86x gpubench's float32). No more than 3x: a run
# three times what its card is expected to reach is a claim, not a measurement.
VERIFIED_MARGIN = 3.0
# A card not yet in the catalogue (collector.plausibility): this many times the fastest
# verified run of any card, as a new generation may be; its runs are shown apart, never
# ranked with the catalogued cards'.
UNCATALOGUED_MARGIN = 4.0
# A card without verified runs of its own is expected to train as fast as a card with
# them, scaled by the two cards' figures the way the model's training scales
# (`card_scale`); real cards land up to 1.78x above that expectation (the largest of
# the pairs in docs/protocol.md, "Expected of a card": bench/plausibility_margins.py
# --cards prints them), so a run is held to this many times it, on top of the margin of
# the verified run's own configuration.
CARD_MARGIN = 2.0
# The EfficientNets scale with the geometric mean of the ratios of memory bandwidth and
# fp32 TFLOP/s (their depthwise convolutions and element-wise work wait on memory, their
# other convolutions on the cores): every pair lands within 0.56-1.78x of it, where
# bandwidth alone spans 0.44-2.27x and fp32 alone 0.30-3.38x. The transformers scale
# with the compute their precision may run on (their matrix products).
BANDWIDTH_AND_COMPUTE = models.EFFICIENTNETS
COMPUTE = models.TRANSFORMERS
# The memory a training image holds (the batch search's slope) is written at least once
# per step; only part of it is assumed, so the bound stays below any real run: half at
# float32 (XLA or another layout may keep less), a quarter in 16-bit precision.
WRITTEN_SHARE = {"float32": 0.5}
WRITTEN_SHARE_16BIT = 0.25


@dataclass(frozen=True)
class GpuSpec:
    """What one GPU model can do at most (a row of gpu_specs.json)."""

    name: str
    pattern: str
    memory_gib: float
    power_watts: float
    fp32_tflops: float
    tf32_tflops: float
    fp16_tflops: float
    bandwidth_gb_s: float
    compute_capability: str = ""
    source: str = ""  # the datasheet the figures come from
    names: tuple[str, ...] = ()  # names NVML gives the card, each matched by `pattern`
    architecture: str = ""  # "Pascal", "Ampere", ... (NVIDIA's name for the generation)
    bf16_tflops: float = 0.0  # 0: no bfloat16 unit (before Ampere)
    fp8_tflops: float = 0.0  # 0: no 8-bit float unit (before Ada and Hopper); no run uses it
    note: str = ""  # which variant's figure a column holds, where the card's vary

    def peak_tflops(self, precision: str) -> float:
        """The highest rate the run's precision may use: float32 runs may use TF32
        tensor cores (torch's default for convolutions), mixed precision any 16-bit or
        wider unit (no benchmark precision is 8-bit)."""
        if precision == "float32":
            return max(self.fp32_tflops, self.tf32_tflops)
        return max(self.fp32_tflops, self.tf32_tflops, self.fp16_tflops, self.bf16_tflops)


@dataclass(frozen=True)
class ModelCost:
    """What one training image of a model costs at its native size."""

    gflop_per_image: float
    mb_per_image: float


@dataclass(frozen=True)
class Verified:
    """The fastest run the project measured on a GPU model in one configuration
    (settings label, precision, batch rule), training images/s."""

    gpu: str
    model: str
    settings: str
    precision: str
    batch_rule: str
    images_per_second: float
    record: str


@dataclass(frozen=True)
class Bound:
    """The fastest verified run a run is held to, and how far past it it may go."""

    verified: Verified
    margin: float
    alike: str  # which of the run's configuration the verified run shares, in words


@dataclass(frozen=True)
class Expectation:
    """What a run of one card, model and configuration is expected to reach (one GPU,
    the native size): a verified run, of the card or of another scaled to it, and how
    far past it a real run may go."""

    rate: float  # images (a language model's tokens) a second
    margin: float
    verified: Verified
    alike: str  # which of the run's configuration the verified run shares, in words
    # The card's figures over the verified run's card's (card_scale), and a transformer's
    # precision's over the verified run's (precision_gain): 1 for the card's own run.
    scale: float = 1.0

    @property
    def ceiling(self) -> float:
        """The most a real run of the card may claim: the expectation times its margin."""
        return self.rate * self.margin


def card_scale(model: str, precision: str, card: GpuSpec, reference: GpuSpec) -> float | None:
    """How much faster `card` trains `model` than `reference` is expected to
    (BANDWIDTH_AND_COMPUTE, COMPUTE); None for a model of neither."""
    if model in BANDWIDTH_AND_COMPUTE:  # at any precision: the fit was made so
        return math.sqrt(card.bandwidth_gb_s / reference.bandwidth_gb_s
                         * card.fp32_tflops / reference.fp32_tflops)
    if model in COMPUTE:
        # The most the card gains on any unit the precision may use (a card without
        # 16-bit tensor cores trains a mixed-precision model on its fp32 cores).
        units = _units(precision)
        return max(getattr(card, unit) / getattr(reference, unit) for unit in units
                   if getattr(card, unit) and getattr(reference, unit))
    return None


def _units(precision: str) -> tuple[str, str]:
    """The GpuSpec columns of the units a precision's matrix products may run on."""
    if precision == "float32":
        return ("fp32_tflops", "tf32_tflops")
    return ("fp32_tflops", "bf16_tflops" if precision == "mixed_bfloat16" else "fp16_tflops")


def precision_gain(model: str, card: GpuSpec, verified: str, precision: str) -> float:
    """How much faster a card may train a transformer (COMPUTE) in `precision` than in
    the `verified` run's, by its fastest unit of each (never under 1: a precision is
    held to a faster one's run as it is); 1 for any other model."""
    if model not in COMPUTE or verified == precision:
        return 1.0
    def fastest(name: str) -> float:
        return max(getattr(card, unit) for unit in _units(name))
    return max(1.0, fastest(precision) / fastest(verified))


def precision_family(precision: str) -> str:
    """float32, or "16-bit mixed" for mixed_float16 and mixed_bfloat16 alike: both run on
    the same 16-bit tensor cores and halve the bytes an activation moves, so a run of one
    is held to the verified runs of the other (the "same precision" tier of `bound_of`),
    never to the far wider margin of a card's fastest run of any configuration."""
    return "float32" if precision == "float32" else "16-bit mixed"


def scaling_words(model: str) -> str:
    """How `card_scale` scales a model, in words."""
    if model in BANDWIDTH_AND_COMPUTE:
        return "the geometric mean of the cards' memory bandwidth and fp32 TFLOP/s ratios"
    return ("the highest TFLOP/s ratio of the units the run's precision may use, against "
            "the verified run's card and precision")


@dataclass(frozen=True, eq=False)
class Specs:
    """The whole table."""

    gpus: tuple[GpuSpec, ...]
    models: dict[str, ModelCost]
    verified: tuple[Verified, ...]
    # GPU name -> its row (None: unknown); every run of a card looks its name up.
    _found: dict[str, GpuSpec | None] = field(default_factory=dict, repr=False)

    @functools.cached_property
    def unknown(self) -> GpuSpec:
        """What a GPU no pattern matches is held to: the best of every column."""
        return GpuSpec(
            name="any known GPU", pattern="",
            memory_gib=max(g.memory_gib for g in self.gpus),
            power_watts=max(g.power_watts for g in self.gpus),
            fp32_tflops=max(g.fp32_tflops for g in self.gpus),
            tf32_tflops=max(g.tf32_tflops for g in self.gpus),
            fp16_tflops=max(g.fp16_tflops for g in self.gpus),
            bf16_tflops=max(g.bf16_tflops for g in self.gpus),
            bandwidth_gb_s=max(g.bandwidth_gb_s for g in self.gpus),
        )

    def spec_of(self, gpu_name: str) -> GpuSpec | None:
        """The known GPU of that (normalised) name, or None; a MIG device's (MIG_NAME)
        is its card's. Case counts: NVML writes a card's name one way, and "nvidia h200"
        is a look-alike, not an H200."""
        if gpu_name not in self._found:
            mig = MIG_NAME.fullmatch(gpu_name)
            card = mig.group("card") if mig else gpu_name
            self._found[gpu_name] = next(
                (spec for spec in self.gpus if re.fullmatch(spec.pattern, card)), None)
        return self._found[gpu_name]

    def bound_of(self, spec: GpuSpec, model: str, settings: str, precision: str,
                 batch_rule: str) -> Bound | None:
        """The verified run a run of this card, model and configuration is held to: the
        fastest of the same configuration (SAME_CONFIGURATION_MARGIN), else of the same
        precision (SAME_PRECISION_MARGIN), else of any (VERIFIED_MARGIN); None when the
        card has no verified run of the model."""
        tiers = (
            (self.fastest(spec, model, settings=settings, precision=precision,
                          batch_rule=batch_rule),
             SAME_CONFIGURATION_MARGIN, f"{settings}, {precision}, batch rule {batch_rule}"),
            (self.fastest(spec, model, family=precision_family(precision)),
             SAME_PRECISION_MARGIN,
             f"{precision_family(precision)} precision, any settings"),
            (self.fastest(spec, model), VERIFIED_MARGIN, "any configuration"),
        )
        return next((Bound(best, margin, words) for best, margin, words in tiers
                     if best is not None), None)

    def expectation(self, spec: GpuSpec, model: str, settings: str, precision: str,
                    batch_rule: str) -> Expectation | None:
        """What a run of this card, model and configuration is expected to reach: its
        own verified run (`bound_of`), else another card's scaled by `card_scale` with
        CARD_MARGIN on top (the nearest configuration first, then the nearest card);
        None when no card has a verified run of the model or the model does not scale."""
        own = self.bound_of(spec, model, settings, precision, batch_rule)
        if own is not None:
            gain = precision_gain(model, spec, own.verified.precision, precision)
            return Expectation(own.verified.images_per_second * gain, own.margin,
                               own.verified, own.alike, gain)
        found = []
        for other in dict.fromkeys(v.gpu for v in self.verified if v.model == model):
            reference = self.card(other)
            bound = self.bound_of(reference, model, settings, precision, batch_rule)
            scale = card_scale(model, precision, spec, reference)
            if bound is not None and scale:
                found.append((bound.margin, abs(math.log(scale)), bound, scale))
        if not found:
            return None
        _, _, bound, scale = min(found, key=lambda item: item[:2])
        scale *= precision_gain(model, self.card(bound.verified.gpu), bound.verified.precision,
                                precision)
        return Expectation(bound.verified.images_per_second * scale,
                           bound.margin * CARD_MARGIN, bound.verified, bound.alike, scale)

    def card(self, name: str) -> GpuSpec:
        """The catalogue's row of that name (a row's `name`, not an NVML name)."""
        return next(spec for spec in self.gpus if spec.name == name)

    def fastest(self, spec: GpuSpec, model: str, **configuration: str) -> Verified | None:
        """The fastest verified run of a card and model whose configuration has the given
        values (settings, precision, batch_rule, or family: its precision_family; each left
        out matches any); None if none."""
        runs = [v for v in self.verified if v.gpu == spec.name and v.model == model
                and all((precision_family(v.precision) if name == "family"
                         else getattr(v, name)) == value
                        for name, value in configuration.items())]
        return max(runs, key=lambda v: v.images_per_second, default=None)


def read_specs(path: Path = SPECS_FILE) -> Specs:
    """Read a table in gpu_specs.json's format; ValueError names the file and the entry."""
    try:
        data = json.loads(path.read_text())
        gpus = tuple(_gpu(row) for row in data["gpus"])
        models = {name: ModelCost(**cost) for name, cost in data["models"].items()}
        verified = tuple(Verified(**row) for row in data["verified"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"{path}: not a GPU table ({exc})") from exc
    names = {g.name for g in gpus}
    for row in verified:
        if row.gpu not in names or (row.model not in models and row.model not in COMPUTE):
            raise ValueError(f"{path}: verified run of {row.gpu} {row.model}: no such GPU or model")
    return Specs(gpus, models, verified)


_GPU_FIELDS = frozenset(GpuSpec.__dataclass_fields__)


def _gpu(row: dict[str, Any]) -> GpuSpec:
    """A row of the table's "gpus" (its NVML names as a tuple; keys it lacks, left out)."""
    fields = {k: v for k, v in row.items() if k in _GPU_FIELDS}
    fields["names"] = tuple(fields.get("names", ()))
    return GpuSpec(**fields)


@functools.cache
def specs() -> Specs:
    """The collector's table (read once)."""
    return read_specs()


def written_share(precision: str) -> float:
    """The share of an image's memory assumed written per step (WRITTEN_SHARE)."""
    return WRITTEN_SHARE.get(precision, WRITTEN_SHARE_16BIT)


# -- names the catalogue does not know ----------------------------------------------------

# What a flag reason for a name the catalogue does not know begins with (the site and the
# CLI tell such runs apart by it).
UNRECOGNISED = "unrecognised GPU"
# Two skeletons this many edits apart or fewer are one name written two ways
# ("NVIDIA H2O0", "NVIDIA H200X", "NVIDIA H300"); a name further from every catalogued
# one (a catalogued name inside a longer one: "NVIDIA H200 Ultra") is another card.
LOOK_ALIKE_EDITS = 2
# How NVML names a MIG device: its card's name, "MIG" and the profile ("1g.10gb",
# "1c.2g.20gb", "1g.10gb+me"). It is a slice of that card: held to the card's figures.
MIG_NAME = re.compile(r"(?P<card>.+) MIG (\d+c\.)?\d+g\.\d+gb(\+me)?")
# Characters that look alike in the fonts GPU names are read in, each to one stand-in.
_CONFUSABLE = str.maketrans({"o": "0", "l": "1", "i": "1", "|": "1", "!": "1"})


def skeleton(name: str) -> str:
    """The name as it looks: case folded, confusable characters as one, letters and
    digits only ("NVIDlA H2OO" and "nvidia-h200" are both "nv1d1ah200")."""
    folded = name.casefold().translate(_CONFUSABLE)
    return "".join(ch for ch in folded if ch.isalnum())


@functools.lru_cache(maxsize=4096)  # every listing asks again of each stored name
def imitated(specs: Specs, name: str) -> GpuSpec | None:
    """The catalogued card an unrecognised name looks like: the one whose catalogue name
    or NVML name has the nearest skeleton, at most LOOK_ALIKE_EDITS apart (the same
    skeleton first); None if none is that near."""
    shape = skeleton(name)
    near = [(_edits(shape, known), spec) for known, spec in _catalogued(specs).items()
            if abs(len(known) - len(shape)) <= LOOK_ALIKE_EDITS]
    near = [(edits, spec) for edits, spec in near if edits <= LOOK_ALIKE_EDITS]
    return min(near, key=lambda pair: pair[0])[1] if near else None


def _edits(one: str, other: str) -> int:
    """How many characters must be inserted, deleted or changed to make one text the
    other (Levenshtein's distance)."""
    before = list(range(len(other) + 1))
    for i, a in enumerate(one, 1):
        now = [i]
        for j, b in enumerate(other, 1):
            now.append(min(before[j] + 1, now[j - 1] + 1, before[j - 1] + (a != b)))
        before = now
    return before[-1]


def not_yet_catalogued(specs: Specs, name: str) -> bool:
    """Whether a run's GPU name (several cards' joined with " + ") holds a card the
    catalogue does not list yet: a name no row gives, and none of its unknown names one
    that looks like a catalogued name (`imitated`: "nvidia h200", "NVIDIA H2OO"). A CPU
    run's (empty) name holds no card."""
    unknown = [part for part in name.split(" + ") if part and specs.spec_of(part) is None]
    return bool(unknown) and all(imitated(specs, part) is None for part in unknown)


@functools.lru_cache(maxsize=4)
def _catalogued(specs: Specs) -> dict[str, GpuSpec]:
    """The skeleton of every catalogue name and NVML name, with its card (the first in
    the catalogue's order where cards share one)."""
    cards: dict[str, GpuSpec] = {}
    for spec in specs.gpus:
        for known in (spec.name, *spec.names):
            cards.setdefault(skeleton(known), spec)
    return cards


def unrecognised_reason(specs: Specs, name: str) -> str:
    """Why a run on a GPU of this (unrecognised) name is flagged, naming the card it
    imitates where it looks like one."""
    card = imitated(specs, name)
    if card is None:
        return (f"{UNRECOGNISED} {name!r}: not yet in the catalogue (gpu_specs.json): its "
                "runs are shown apart until the card is added; its figures are held to "
                "the best of every card")
    return (f"{UNRECOGNISED} {name!r}: looks like the catalogued {card.name} but is not a "
            f"name NVML gives it (pattern {card.pattern!r})")
