"""The site in a real browser: headless Chromium loads every page at desktop (1280 px)
and phone (390 px) widths; a console error, a page wider than the window, an element
sticking out of it or overlapping text fails the test. Screenshots go to
$GPUBENCH_SITE_SCREENSHOTS (default: the test's temporary folder)."""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import quote

import pytest
from chromium import Chromium, find_chromium, save
from conftest import HOSTILE_GPU

CHROMIUM = find_chromium()
WIDTHS = (1280, 390)

pytestmark = pytest.mark.skipif(
    CHROMIUM is None,
    reason="chromium is not installed: the results site's browser test needs it "
           "(apt-get install chromium; `make test` installs it when run as root)")


def pages(live_site) -> list[tuple[str, str]]:
    """(name, path) of every kind of page, with the hostile run's among them."""
    return [*PAGES, ("run-hostile", f"/run/{live_site.hostile_run_id}"),
            ("run-flagged", f"/run/{live_site.flagged_run_id}")]


# Pages answered with an error status on purpose: Chromium logs the status of the
# document itself as an error, which is the page working, not failing.
EXPECTED_STATUS = {"/compare/B0?settings=&batch_rule=": 409}
PAGES = [
        ("overview", "/"),
        ("leaderboard-b0", "/leaderboard/B0"),
        ("leaderboard-b7-flagged", "/leaderboard/B7?flagged=1"),
        ("compare-b0", "/compare/B0?baseline=Tesla+T4"),
        ("compare-refused", "/compare/B0?settings=&batch_rule="),
        ("gpu-t4", "/gpu/Tesla%20T4"),
        ("gpu-hostile", "/gpu/" + quote(HOSTILE_GPU, safe="")),
        ("runs", "/runs"),
]


def test_pages_read_well_in_a_browser(live_site, tmp_path):
    folder = Path(os.environ.get("GPUBENCH_SITE_SCREENSHOTS") or tmp_path)
    failures = []
    with Chromium(CHROMIUM) as browser:
        for name, path in pages(live_site):
            for width in WIDTHS:
                report = browser.load(live_site.url.rstrip("/") + path, width)
                save(report, folder, name)
                status = EXPECTED_STATUS.get(path)
                errors = [e for e in report.errors
                          if not (status and e.startswith("network:")
                                  and f"status of {status}" in e and e.endswith(path))]
                failures += [f"{path} at {width}px: {e}" for e in errors + report.layout]
                assert report.screenshot.startswith(b"\x89PNG")
    assert not failures, "\n".join(failures)
