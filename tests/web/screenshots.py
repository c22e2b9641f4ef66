"""Screenshots of the results site: `.venv/bin/python tests/web/screenshots.py docs/site`.

Most pages over the reference runs (docs/results/runs), as `make demo` loads them; the
1x-against-2x comparison and the long names over the browser test's made-up runs
(tests/web/live_site.py: two H200s, a GPU name of 200 characters), which the reference
runs do not have. A live collector on a temporary DuckDB file, the site in front of it,
headless Chromium at 1280 and 390 px; fails on a console error or an unreadable layout,
as the browser test does.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path
from urllib.parse import quote

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]

from chromium import Chromium, find_chromium, save  # noqa: E402
from live_site import REFERENCE_RUNS, _start, community_runs  # noqa: E402

from gpubench import record  # noqa: E402
from gpubench.client import Client  # noqa: E402

BOTH = (1280, 390)
# Over the reference runs.
PAGES = [
    ("overview", "/", BOTH),
    ("leaderboard-b0", "/leaderboard/B0", BOTH),
    ("leaderboard-b0-bfloat16", "/leaderboard/B0?settings=kernels%2Bdata-on-device%2B"
     "cuda-graphs&batch_rule=steps&precision=mixed_bfloat16", (1280,)),
    ("compare-b3", "/compare/B3", BOTH),
    ("compare-refused", "/compare/B0?settings=&batch_rule=", (1280,)),
    ("fit-b7-16gib", "/fit/B7?memory=16GiB", BOTH),
    ("estimate-b7-400", "/estimate/B7?epochs=400", BOTH),
    ("cost-b7", "/cost/B7?precision=float32&price=" + quote("NVIDIA H200=32000"), (1280,)),
    ("gpu-h200", "/gpu/NVIDIA%20H200", (1280,)),
]
# Over the browser test's runs.
TEST_PAGES = [
    ("compare-1x-2x-marked", "/compare/B0?settings=&batch_rule=steps&backend=torch"
     "&precision=float32&pipeline=cached&allow_mixed=1&baseline=" + quote("1x NVIDIA H200"),
     BOTH),
    ("leaderboard-b0-long-name", "/leaderboard/B0?flagged=1", BOTH),
]


def _shoot(runs: list, pages: list, folder: Path, *, with_run: bool = False) -> list[str]:
    problems = []
    with tempfile.TemporaryDirectory() as tmp:
        for site, address, _, _ in _start(Path(tmp), runs, public_read=True):
            if with_run:
                with Client(address) as client:
                    b7 = next(s for s in client.iter_runs(model="B7", gpu="H200")
                              if s.run.result.batch_trials)
                pages = [*pages, ("run-h200-b7", f"/run/{b7.short_id}", BOTH)]
            with Chromium(find_chromium() or "chromium") as browser:
                for name, path, widths in pages:
                    for width in widths:
                        report = browser.load(site.url.rstrip("/") + path, width)
                        print(save(report, folder, name))
                        problems += [f"{path} at {width}px: {p}" for p in report.layout]
                        problems += [f"{path} at {width}px: {e}" for e in report.errors
                                     if "status of 409" not in e]
    return problems


def main(folder: Path) -> None:
    """Write the screenshots into `folder`."""
    if find_chromium() is None:
        raise SystemExit("no chromium: put one on PATH, or `make chromium` fetches "
                         "Debian's into .tools/chromium")
    reference = [record.from_json(p.read_text(), source=str(p)) for p in REFERENCE_RUNS]
    problems = _shoot(reference, PAGES, folder, with_run=True)
    problems += _shoot(reference + community_runs(), TEST_PAGES, folder)
    if problems:
        raise SystemExit("\n".join(problems))


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "docs/site"))
