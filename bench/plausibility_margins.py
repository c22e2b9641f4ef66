"""How close the real runs in docs/results come to the collector's plausibility limits.

    .venv/bin/python bench/plausibility_margins.py
    .venv/bin/python bench/plausibility_margins.py --cards

For every run record the project measured or transcribed (docs/results/**/*.json), the
ratios gpubench.collector.plausibility holds to its tolerances, and how far the run stays
under each ceiling of gpubench.collector.ceilings; then the range of each over all runs. The
tolerances in gpubench.collector.plausibility are set from these ranges (docs/protocol.md,
"What the collector accepts").

With --cards: how far real cards land from what is expected of them from another card
(ceilings.card_scale), over every pair of cards measured alike: each other card's records
in docs/results against the H200's reference records (docs/results/runs) of the same
configuration, and the published pairs below (PUBLISHED); each pair both ways.
ceilings.CARD_MARGIN is set from the largest landing.
"""

from __future__ import annotations

import json
import sys
import textwrap
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / part) for part in ("", "agent", "collector")]  # the three source roots

from gpubench import models, record  # noqa: E402
from gpubench.collector import ceilings, plausibility  # noqa: E402

COLUMNS = ("rate", "steps", "power", "flops", "bandwidth", "verified")
WHAT = {
    "rate": "images/s over training images / the measured epoch's training time",
    "steps": "full steps x median step time over the measured epoch's training time",
    "power": "mean power over the run's GPUs' power limit",
    "flops": "claimed images/s over the peak-FLOP/s ceiling",
    "bandwidth": "claimed images/s over the memory-bandwidth ceiling",
    "verified": "claimed images/s over the ceiling of what is expected of the card (its "
                "verified run, or another card's scaled to it, times the margin)",
}


def records() -> list[tuple[str, object]]:
    """(name, Run) of every record under docs/results."""
    found = []
    for path in sorted((ROOT / "docs" / "results").rglob("*.json")):
        data = json.loads(path.read_text())
        for i, item in enumerate(data if isinstance(data, list) else [data]):
            if isinstance(item, dict) and "schema_version" in item and "result" in item:
                name = str(path.relative_to(ROOT / "docs" / "results"))
                found.append((name + (f"[{i}]" if isinstance(data, list) else ""),
                              record.from_dict(item)))
    return found


def ratios(run: object) -> dict[str, float | None]:
    """The run's ratio for each of COLUMNS (None where it has no such figure)."""
    res, cfg = run.result, run.config
    epoch = record.measured_epoch(run)
    train = epoch.train_seconds if epoch else 0.0
    found: dict[str, float | None] = dict.fromkeys(COLUMNS)
    each = models.per_sample(models.unit_of(cfg.model, cfg.unit), cfg.input_spec)
    if res.train_images_per_second and train and cfg.train_images and each:
        found["rate"] = res.train_images_per_second / (cfg.train_images * each / train)
    full = cfg.train_images // cfg.global_batch if cfg.global_batch else 0
    if res.step_time_median_seconds and train and full:
        found["steps"] = res.step_time_median_seconds * full / train
    limit = sum(g.power_limit_watts for g in run.gpus[: cfg.gpu_count])
    if res.mean_power_watts and limit:
        found["power"] = res.mean_power_watts / limit
    specs = ceilings.specs()
    rate = plausibility.claimed_rate(run)
    cost = specs.models.get(cfg.model)
    native = record.NATIVE_IMAGE_SIZE.get(cfg.model, 0)
    used = list(run.gpus[: cfg.gpu_count])
    if rate and cost and native and used:
        pixels = (cfg.image_size / native) ** 2
        cards = [specs.spec_of(record.normalize_gpu_name(g.name)) or specs.unknown
                 for g in used]
        flops = sum(c.peak_tflops(cfg.precision) for c in cards) * 1e12
        found["flops"] = rate / (flops / (cost.gflop_per_image * 1e9 * pixels))
        written = cost.mb_per_image * 1e6 * pixels * ceilings.written_share(cfg.precision)
        found["bandwidth"] = rate / (sum(c.bandwidth_gb_s for c in cards) * 1e9 / written)
        expected = specs.expectation(cards[0], cfg.model, record.settings_label(cfg),
                                     cfg.precision, record.batch_rule(cfg))
        if expected is not None:
            found["verified"] = rate / (expected.ceiling * len(cards) / pixels)
    return found


@dataclass(frozen=True)
class Pair:
    """Two cards that trained one model alike: how many times faster the first (its
    `count` cards) was than the second's, and where that figure comes from."""

    model: str
    card: str  # a catalogue row's name
    count: int
    reference: str
    reference_count: int
    times_faster: float
    source: str


# Pairs of cards measured alike elsewhere, as published: B4 is held as the EfficientNets
# are. The article's own figures: docs/results/runs/README.md ("Published").
ARTICLE = ("the article 'EfficientNet B0/B3/B7 on rock-paper-scissors' (TensorFlow, the "
           "hand-tuned batches)")
NVIDIA_EFFICIENTNET = ("NVIDIA DeepLearningExamples, PyTorch/Classification/ConvNets/"
                       "efficientnet/README.md, training performance (21.03 NGC "
                       "container), 1 GPU")
PUBLISHED = (
    # The T4's B7 epoch 2, 678 s, against the GTX 1070's "about 15 minutes an epoch".
    Pair("B7", "GeForce GTX 1070", 1, "Tesla T4", 1, 678 / 900, ARTICLE),
    # "2x RTX 6000 Ada is about 17x (B0), 8x (B3) and 11x (B7) faster than the GTX 1070".
    Pair("B0", "RTX 6000 Ada Generation", 2, "GeForce GTX 1070", 1, 17.0, ARTICLE),
    Pair("B3", "RTX 6000 Ada Generation", 2, "GeForce GTX 1070", 1, 8.0, ARTICLE),
    Pair("B7", "RTX 6000 Ada Generation", 2, "GeForce GTX 1070", 1, 11.0, ARTICLE),
    # A100 80GB TF32 / mixed against V100 16GB and 32GB FP32 / mixed, img/s.
    Pair("B0", "A100 SXM4 80GB", 1, "Tesla V100 SXM2", 1, 1078 / 655,
         NVIDIA_EFFICIENTNET + ", TF32 / V100 16GB FP32"),
    Pair("B0", "A100 SXM4 80GB", 1, "Tesla V100 SXM2", 1, 2489 / 1301,
         NVIDIA_EFFICIENTNET + ", mixed / V100 16GB mixed"),
    Pair("B4", "A100 SXM4 80GB", 1, "Tesla V100 SXM2", 1, 157 / 83,
         NVIDIA_EFFICIENTNET + ", TF32 / V100 16GB FP32"),
    Pair("B4", "A100 SXM4 80GB", 1, "Tesla V100 SXM2", 1, 331 / 204,
         NVIDIA_EFFICIENTNET + ", mixed / V100 16GB mixed"),
    Pair("B0", "A100 SXM4 80GB", 1, "Tesla V100 SXM2", 1, 1078 / 646,
         NVIDIA_EFFICIENTNET + ", TF32 / V100 32GB FP32"),
    Pair("B0", "A100 SXM4 80GB", 1, "Tesla V100 SXM2", 1, 2489 / 1401,
         NVIDIA_EFFICIENTNET + ", mixed / V100 32GB mixed"),
)
def recorded_pairs() -> list[Pair]:
    """Each other card's measured records in docs/results against the H200's reference
    record (docs/results/runs) of the same model and configuration, by epoch 2 (the
    figure of merit; a card's fastest where it has several)."""
    specs = ceilings.specs()
    h200: dict[tuple, tuple[str, object]] = {}
    others: dict[tuple, tuple[str, object]] = {}
    for name, run in records():
        if run.published or run.config.gpu_count != 1 or not run.result.epoch2_seconds:
            continue
        cfg = run.config
        card = specs.spec_of(record.normalize_gpu_name(run.gpus[0].name))
        key = (cfg.model, record.settings_label(cfg), cfg.precision, record.batch_rule(cfg))
        if card is not None and card.name == "H200" and name.startswith("runs/"):
            h200[key] = (name, run)
        elif card is not None and card.name != "H200":
            best = others.get((card.name, *key))
            if best is None or run.result.epoch2_seconds < best[1].result.epoch2_seconds:
                others[(card.name, *key)] = (name, run)
    found = []
    for (card, *key), (name, run) in sorted(others.items()):
        reference = h200.get(tuple(key))
        if reference is not None:
            found.append(Pair(key[0], card, 1, "H200", 1,
                              reference[1].result.epoch2_seconds / run.result.epoch2_seconds,
                              f"docs/results/{name} / docs/results/{reference[0]}"))
    return found


def landing(pair: Pair, scale: Callable[[object, object], float]) -> float:
    """How far the pair's first cards landed from what is expected of them from the
    second's: its times-faster over the expected ratio (`scale` of one card to one)."""
    specs = ceilings.specs()
    expected = scale(specs.card(pair.card), specs.card(pair.reference)) * pair.count \
        / pair.reference_count
    return pair.times_faster / expected


def _mix(card: object, reference: object) -> float:
    return ceilings.card_scale("B0", "float32", card, reference)


def _bandwidth(card: object, reference: object) -> float:
    return card.bandwidth_gb_s / reference.bandwidth_gb_s


def _fp32(card: object, reference: object) -> float:
    return card.fp32_tflops / reference.fp32_tflops


RULES = {"mix": _mix, "bandwidth": _bandwidth, "fp32": _fp32}


def landings() -> list[tuple[Pair, bool, dict[str, float]]]:
    """Every pair both ways (the second card's landing from the first: the inverse),
    with its landing under each of RULES."""
    found = []
    for pair in (*recorded_pairs(), *PUBLISHED):
        forward = {rule: landing(pair, scale) for rule, scale in RULES.items()}
        found.append((pair, False, forward))
        found.append((pair, True, {rule: 1 / value for rule, value in forward.items()}))
    return found


def _short(card: str) -> str:
    return card.replace("GeForce ", "").replace(" Generation", "")


def cards_main() -> int:
    """Print every pair's landings, then each rule's range."""
    rows = landings()
    print(f"{'model':5} {'card':>20} {'from':>20} " + " ".join(f"{r:>9}" for r in RULES))
    for pair, inverse, found in rows:
        card = f"{pair.count}x {_short(pair.card)}"
        reference = f"{pair.reference_count}x {_short(pair.reference)}"
        if inverse:
            card, reference = reference, card
        print(f"{pair.model:5} {card[-20:]:>20} {reference[-20:]:>20} "
              + " ".join(f"{found[r]:9.2f}" for r in RULES))
    print("\nsources:")
    for source in dict.fromkeys(pair.source for pair, _, _ in rows):
        print(textwrap.fill(source, 78, initial_indent="- ", subsequent_indent="  "))
    print(f"\n{len(rows)} landings (actual over expected); the range of each rule:")
    for rule in RULES:
        values = [found[rule] for _, _, found in rows]
        print(f"  {rule:9} {min(values):.2f} - {max(values):.2f}")
    print(f"ceilings.CARD_MARGIN: {ceilings.CARD_MARGIN:g}")
    return 0


def main() -> int:
    if sys.argv[1:] == ["--cards"]:
        return cards_main()
    rows = [(name, ratios(run)) for name, run in records()]
    # 80 columns: a record's name on a line of its own where it is longer than its column.
    width = 26
    print(f"{'record':{width}}" + "".join(f"{c:>9}" for c in COLUMNS))
    for name, found in rows:
        cells = ("-" if found[c] is None else f"{found[c]:.3f}" for c in COLUMNS)
        if len(name) > width:
            print(name)
            name = ""
        print(f"{name:{width}}" + "".join(f"{cell:>9}" for cell in cells))
    print(f"\n{len(rows)} runs; the range of each ratio:")
    for column in COLUMNS:
        values = [found[column] for _, found in rows if found[column] is not None]
        if values:
            print(textwrap.fill(f"{column:9} {min(values):.3f} - {max(values):.3f} "
                                f"({len(values)} runs): {WHAT[column]}", 78,
                                initial_indent="  ", subsequent_indent="    "))
    return 0


if __name__ == "__main__":
    sys.exit(main())
