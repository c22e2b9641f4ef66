#!/usr/bin/env python3
"""The multi-GPU scaling table from run records (spool JSON files).

    python bench/scaling_table.py SPOOL_DIR_OR_FILES... [--json]

Groups OK runs by (model, precision, settings, GPU name) and, for each GPU count,
takes the median training images/s (settings: the options that change how the
network is computed or fed, e.g. "kernels+data-on-device"; "keras" for none);
efficiency is that figure against linear scaling of the 1-GPU figure (images/s at
N GPUs / (N x images/s at 1 GPU)). Per-GPU peak memory is the allocator's largest
per-GPU peak; energy per epoch is the measured epoch's, all GPUs together.
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections import defaultdict
from pathlib import Path

from gpubench import record
from gpubench.v1 import run_pb2

GIB = 1024**3


def load(paths: list[Path]) -> list[dict]:
    """Every OK run record under the given files or spool folders."""
    files: list[Path] = []
    for path in paths:
        files += sorted(path.rglob("*.json")) if path.is_dir() else [path]
    runs = []
    for file in files:
        try:
            run = json.loads(file.read_text())
        except ValueError:
            continue
        if isinstance(run, dict) and run.get("result", {}).get("status") == "RUN_STATUS_OK":
            runs.append(run)
    return runs


def settings_label(config: dict) -> str:
    """How a run computed and fed the network ("keras", "kernels+data-on-device", ...):
    gpubench.record.settings_label, the label the collector's Compare keys by."""
    return record.settings_label(run_pb2.Config(
        **{option: bool(config.get(option)) for option, _ in record.SETTINGS_OPTIONS}))


def scaling_rows(runs: list[dict]) -> list[dict]:
    """One row per (model, precision, settings, GPU, GPU count), with efficiency against
    linear."""
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for run in runs:
        cfg = run["config"]
        gpu = (run.get("gpus") or [{}])[0].get("name", "CPU")
        key = (cfg["model"], cfg.get("precision", ""), settings_label(cfg), gpu,
               int(cfg.get("gpu_count", 0)))
        groups[key].append(run)
    rows = []
    for (model, precision, settings, gpu, count), members in sorted(groups.items()):
        speed = statistics.median(r["result"].get("train_images_per_second", 0) for r in members)
        base = groups.get((model, precision, settings, gpu, 1))
        base_speed = (statistics.median(r["result"].get("train_images_per_second", 0) for r in base)
                      if base else 0.0)
        peaks = [int(m.get("allocator_peak_bytes", 0)) for r in members
                 for m in r["result"].get("memory", [])]
        rows.append({
            "model": model, "precision": precision, "settings": settings, "gpu": gpu,
            "gpus": count,
            "runs": len(members),
            "batch_per_gpu": max(int(r["config"].get("batch_per_gpu", 0)) for r in members),
            "epoch2_s": statistics.median(r["result"].get("epoch2_seconds", 0) for r in members),
            "images_per_s": speed,
            "efficiency": speed / (count * base_speed) if base_speed and count else None,
            "peak_gib_per_gpu": max(peaks, default=0) / GIB,
            "energy_per_epoch_j": statistics.median(
                r["result"].get("energy_per_epoch_joules", 0) for r in members),
        })
    return rows


def markdown(rows: list[dict]) -> str:
    lines = ["| model | precision | settings | GPU | GPUs | batch/GPU | epoch 2 (s) "
             "| train img/s | efficiency vs linear | peak per GPU (GiB) | energy/epoch (J) "
             "| runs |",
             "|" + "---|" * 12]
    for r in rows:
        eff = "-" if r["efficiency"] is None else f"{r['efficiency']:.0%}"
        lines.append(f"| {r['model']} | {r['precision']} | {r['settings']} | {r['gpu']} "
                     f"| {r['gpus']} "
                     f"| {r['batch_per_gpu']} | {r['epoch2_s']:.2f} | {r['images_per_s']:.0f} "
                     f"| {eff} | {r['peak_gib_per_gpu']:.1f} | {r['energy_per_epoch_j']:.0f} "
                     f"| {r['runs']} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("paths", nargs="+", type=Path, help="spool folders or run JSON files")
    parser.add_argument("--json", action="store_true", help="print the rows as JSON")
    args = parser.parse_args()
    rows = scaling_rows(load(args.paths))
    print(json.dumps(rows, indent=1) if args.json else markdown(rows))


if __name__ == "__main__":
    main()
