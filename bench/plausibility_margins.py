"""How close the real runs in docs/results come to the collector's plausibility limits.

    .venv/bin/python bench/plausibility_margins.py

For every run record the project measured or transcribed (docs/results/**/*.json), the
ratios gpubench.collector.plausibility holds to its tolerances, and how far the run stays
under each ceiling of gpubench.collector.ceilings; then the range of each over all runs. The
tolerances in gpubench.collector.plausibility are set from these ranges (docs/protocol.md,
"What the collector accepts").
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / part) for part in ("", "agent", "collector")]  # the three source roots

from gpubench import record  # noqa: E402
from gpubench.collector import ceilings, plausibility  # noqa: E402

COLUMNS = ("rate", "steps", "power", "flops", "bandwidth", "verified")
WHAT = {
    "rate": "images/s over training images / the measured epoch's training time",
    "steps": "full steps x median step time over the measured epoch's training time",
    "power": "mean power over the run's GPUs' power limit",
    "flops": "claimed images/s over the peak-FLOP/s ceiling",
    "bandwidth": "claimed images/s over the memory-bandwidth ceiling",
    "verified": "claimed images/s over the verified ceiling (the fastest verified run of the "
                "same GPU, model and configuration, times its margin)",
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
    if res.train_images_per_second and train and cfg.train_images:
        found["rate"] = res.train_images_per_second / (cfg.train_images / train)
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
        bound = specs.bound_of(cards[0], cfg.model, record.settings_label(cfg),
                               cfg.precision, record.batch_rule(cfg))
        if bound is not None:
            most = bound.verified.images_per_second * len(cards) / pixels * bound.margin
            found["verified"] = rate / most
    return found


def main() -> int:
    rows = [(name, ratios(run)) for name, run in records()]
    width = max(len(name) for name, _ in rows)
    print(f"{'record':{width}}  " + "  ".join(f"{c:>9}" for c in COLUMNS))
    for name, found in rows:
        cells = ("-" if found[c] is None else f"{found[c]:.3f}" for c in COLUMNS)
        print(f"{name:{width}}  " + "  ".join(f"{cell:>9}" for cell in cells))
    print(f"\n{len(rows)} runs; the range of each ratio:")
    for column in COLUMNS:
        values = [found[column] for _, found in rows if found[column] is not None]
        if values:
            print(f"  {column:9} {min(values):.3f} - {max(values):.3f} ({len(values)} runs): "
                  f"{WHAT[column]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
