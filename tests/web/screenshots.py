"""Screenshots of the results site over the reference runs (docs/results/runs), as
`make demo` loads them: `.venv/bin/python tests/web/screenshots.py docs/site`.

A live collector on a temporary DuckDB file, the site in front of it, headless
Chromium at 1280 and 390 px; fails on a console error or an unreadable layout, as the
browser test does.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]

from chromium import Chromium, find_chromium, save  # noqa: E402
from conftest import REFERENCE_RUNS, _start  # noqa: E402

from gpubench import record  # noqa: E402
from gpubench.client import Client  # noqa: E402

PAGES = [
    ("overview", "/", (1280, 390)),
    ("leaderboard-b0", "/leaderboard/B0", (1280, 390)),
    ("leaderboard-b0-bfloat16", "/leaderboard/B0?settings=kernels%2Bdata-on-device%2B"
     "cuda-graphs&batch_rule=steps&precision=mixed_bfloat16", (1280,)),
    ("compare-b3", "/compare/B3", (1280, 390)),
    ("compare-refused", "/compare/B0?settings=&batch_rule=", (1280,)),
    ("gpu-h200", "/gpu/NVIDIA%20H200", (1280,)),
]


def main(folder: Path) -> None:
    """Write the screenshots into `folder`."""
    chromium = find_chromium()
    if chromium is None:
        raise SystemExit("chromium is not installed (apt-get install chromium)")
    runs = [record.from_json(p.read_text(), source=str(p)) for p in REFERENCE_RUNS]
    problems = []
    with tempfile.TemporaryDirectory() as tmp:
        for site, address, _, _ in _start(Path(tmp), runs, public_read=True):
            with Client(address) as client:
                b7 = next(client.iter_runs(model="B7", gpu="H200"))
            pages = [*PAGES, ("run-h200-b7", f"/run/{b7.run.run_id}", (1280, 390))]
            with Chromium(chromium) as browser:
                for name, path, widths in pages:
                    for width in widths:
                        report = browser.load(site.url.rstrip("/") + path, width)
                        print(save(report, folder, name))
                        problems += [f"{path} at {width}px: {p}" for p in report.layout]
                        problems += [f"{path} at {width}px: {e}" for e in report.errors
                                     if "status of 409" not in e]
    if problems:
        raise SystemExit("\n".join(problems))


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "docs/site"))
