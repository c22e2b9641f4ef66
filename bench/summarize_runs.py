#!/usr/bin/env python3
"""Print a Markdown table of the run records in a spool (pending/ and sent/).

    python bench/summarize_runs.py SPOOL_DIR

One row per run, in the order they were created: what ran (label, model, GPUs,
batch and its rule, the largest batch found, the search's trials ("x": did not
fit) and time, the model's whole time, precision), epoch 1 and epoch 2, training
images/s, the allocator's peaks next to NVML's per-process and per-device peaks,
energy per epoch and power.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

GIB = 1024**3


def rows(spool: Path) -> list[dict]:
    runs = [json.loads(p.read_text()) for sub in ("pending", "sent")
            for p in sorted((spool / sub).glob("*.json"))]
    return sorted(runs, key=lambda r: r.get("created_at", ""))


def fmt(value: float | None, pattern: str = "{:.1f}") -> str:
    return "-" if not value else pattern.format(value)


def main(spool: Path) -> None:
    print("| run | model | GPUs | batch/GPU | rule | largest | trials | search (s) "
          "| model total (s) | precision | status | epoch 1 (s) | epoch 2 (s) "
          "| train img/s | step CV | allocator peak (GiB) | reserved peak (GiB) "
          "| NVML process peak (GiB) | NVML device peak (GiB) | energy/epoch (J) "
          "| mean power (W) |")
    print("|" + "---|" * 21)
    for run in rows(spool):
        cfg, res = run.get("config", {}), run.get("result", {})
        epochs = {e.get("number"): e for e in res.get("epochs", [])}
        memory = res.get("memory", [{}])
        peak = max((int(m.get("allocator_peak_bytes", 0)) for m in memory), default=0)
        proc = max((int(m.get("process_peak_bytes", 0)) for m in memory), default=0)
        dev = max((int(m.get("device_peak_bytes", 0)) for m in memory), default=0)
        held = max((int(m.get("allocator_reserved_peak_bytes", 0)) for m in memory), default=0)
        status = res.get("status", "").removeprefix("RUN_STATUS_").lower()
        trials = res.get("batch_trials", [])
        tried = " ".join(f"{t.get('batch')}{'' if t.get('fits') else 'x'}" for t in trials)
        largest = f"{res.get('largest_batch_per_gpu', '-')}" + (
            "+" if res.get("largest_batch_capped") else "")
        print(f"| {run.get('label', '')} | {cfg.get('model')} | {cfg.get('gpu_count', 0)} "
              f"| {cfg.get('batch_per_gpu')} | {cfg.get('batch_rule', '-')} | {largest} "
              f"| {tried or '-'} | {fmt(res.get('search_seconds'))} "
              f"| {fmt(res.get('total_seconds'))} | {cfg.get('precision')} | {status} "
              f"| {fmt(epochs.get(1, {}).get('wall_seconds'))} "
              f"| {fmt(res.get('epoch2_seconds'), '{:.2f}')} "
              f"| {fmt(res.get('train_images_per_second'), '{:.0f}')} "
              f"| {fmt(res.get('step_time_cv'), '{:.3f}')} "
              f"| {fmt(peak / GIB, '{:.1f}')} | {fmt(held / GIB, '{:.1f}')} "
              f"| {fmt(proc / GIB, '{:.1f}')} "
              f"| {fmt(dev / GIB, '{:.1f}')} "
              f"| {fmt(res.get('energy_per_epoch_joules'), '{:.0f}')} "
              f"| {fmt(res.get('mean_power_watts'), '{:.0f}')} |")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
