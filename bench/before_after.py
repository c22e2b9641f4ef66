#!/usr/bin/env python3
"""The same runs at two versions of the code, side by side: each model's figures and
their ratios (after / before), from two spools of run records.

    python3 bench/before_after.py BEFORE_SPOOL AFTER_SPOOL

For each model: epoch 2 (the benchmark's figure), the whole model's time (search,
start-up and both epochs), the largest batch the search found and the batch it timed,
at each version, and after / before. A ratio within the repeats' spread (docs/results/
h200-default-run.md: 3.7% over four default B0 runs) is noise.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def runs(spool: Path) -> dict[str, dict]:
    """The last finished run of each model in the spool (pending/ and sent/)."""
    found: dict[str, dict] = {}
    records = [json.loads(p.read_text()) for sub in ("pending", "sent")
               for p in sorted((spool / sub).glob("*.json"))]
    for run in sorted(records, key=lambda r: r.get("created_at", "")):
        if run.get("result", {}).get("status") == "RUN_STATUS_OK":
            found[run["config"]["model"]] = run
    return found


def ratio(after: float | None, before: float | None) -> str:
    return f"{after / before:.3f}" if after and before else "-"


def seconds(value: float | None) -> str:
    return f"{value:.3f}" if value else "-"


def main(before_spool: Path, after_spool: Path) -> int:
    before, after = runs(before_spool), runs(after_spool)
    print("| model | epoch 2 before (s) | epoch 2 after (s) | after/before "
          "| model total before (s) | after (s) | after/before "
          "| largest batch before / after | timed batch before / after |")
    print("|" + "---|" * 9)
    for model in sorted(set(before) | set(after)):
        b = before.get(model, {}).get("result", {})
        a = after.get(model, {}).get("result", {})
        bc = before.get(model, {}).get("config", {})
        ac = after.get(model, {}).get("config", {})
        print(f"| {model} | {seconds(b.get('epoch2_seconds'))} "
              f"| {seconds(a.get('epoch2_seconds'))} "
              f"| {ratio(a.get('epoch2_seconds'), b.get('epoch2_seconds'))} "
              f"| {seconds(b.get('total_seconds'))} | {seconds(a.get('total_seconds'))} "
              f"| {ratio(a.get('total_seconds'), b.get('total_seconds'))} "
              f"| {b.get('largest_batch_per_gpu', '-')} / {a.get('largest_batch_per_gpu', '-')} "
              f"| {bc.get('batch_per_gpu', '-')} / {ac.get('batch_per_gpu', '-')} |")
    return 0 if before and after else 1


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]), Path(sys.argv[2])))
