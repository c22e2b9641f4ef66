"""How busy each GPU run in docs/results kept its GPU, and what the host-bound guard says.

    .venv/bin/python bench/gpu_busy_calibration.py

For every GPU run record the project measured (docs/results/**/*.json): the measured
epoch's mean NVML utilisation, its samples, epoch 2, the settings label, and whether
gpubench.gpu_busy calls it host-bound; sorted by utilisation. docs/protocol.md ("A GPU
that waits") sets the guard's threshold from this table.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / part) for part in ("", "agent", "collector")]  # the three source roots

from gpubench import gpu_busy, record  # noqa: E402


def main() -> None:
    rows = []
    seen: set[str] = set()
    for path in sorted((ROOT / "docs" / "results").rglob("*.json")):
        data = json.loads(path.read_text())
        for item in data if isinstance(data, list) else [data]:
            if not isinstance(item, dict) or "result" not in item:
                continue
            run = record.from_dict(item)
            epoch = record.measured_epoch(run)
            if run.config.gpu_count == 0 or epoch is None or not epoch.samples:
                continue  # CPU runs and transcribed figures: no telemetry
            if run.run_id in seen:
                continue  # the same record kept in two places
            seen.add(run.run_id)
            verdict = ("host-bound" if gpu_busy.idle_gpu_warning(run)
                       else "not judged" if gpu_busy.few_samples_note(run) else "busy")
            rows.append((epoch.mean_gpu_utilization, epoch.samples, run.result.epoch2_seconds,
                         run.config.model, run.software.backend,
                         record.settings_label(run.config), verdict,
                         str(path.relative_to(ROOT / "docs" / "results"))))
    print(f"threshold: busy under {gpu_busy.BUSY_THRESHOLD_PERCENT:g}% over at least "
          f"{gpu_busy.MIN_SAMPLES} samples is host-bound")
    print("| busy % | samples | epoch 2 (s) | model | backend | settings | guard | record |")
    print("|---|---|---|---|---|---|---|---|")
    for busy, samples, epoch2, model, backend, label, verdict, name in sorted(rows):
        print(f"| {busy:.1f} | {samples} | {epoch2:.3f} | {model} | {backend} | {label} | "
              f"{verdict} | {name} |")


if __name__ == "__main__":
    main()
