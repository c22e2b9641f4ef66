"""The site in a real browser: headless Chromium loads every page at desktop (1280 px)
and phone (390 px) widths, with a GPU name of 200 characters among the runs; a console
error, a page wider than the window, an element sticking out of it, a figure column out
of view inside its scrolling box or overlapping text fails the test. The answers (fit,
estimate, 1x against 2x marked) say what they answer, and every download the pages link
opens in pandas with the comparison key, a formula cell neutralised. Screenshots go to
$GPUBENCH_SITE_SCREENSHOTS (default: the test's temporary folder)."""

from __future__ import annotations

import io
import json
import os
import urllib.request
from pathlib import Path
from urllib.parse import quote, urlsplit

import pandas as pd
import pytest
from chromium import Chromium, find_chromium, save
from live_site import FORMULA_LABEL, HOSTILE_GPU, LONG_GPU

from gpubench import frames

CHROMIUM = find_chromium()
WIDTHS = (1280, 390)

# Chromium is a fetched Debian tool: the browser test is part of `make test-e2e`.
pytestmark = [pytest.mark.e2e, pytest.mark.skipif(
    CHROMIUM is None,
    reason="chromium is not installed: the results site's browser test needs it "
           "(on PATH, or fetched into .tools/chromium by `make chromium`, which `make "
           "test-e2e` runs where apt-get is)")]

MARKED = ("/compare/B0?settings=&batch_rule=steps&backend=torch&precision=float32"
          "&pipeline=cached&allow_mixed=1&baseline=" + quote("1x NVIDIA H200"))
# (name, path, what the page must say): every kind of page; the lists hold the
# 200-character name.
PAGES = [
    ("overview", "/", "How fast does each GPU train EfficientNet?"),
    ("leaderboard-b0", "/leaderboard/B0", "B0 leaderboard"),
    ("leaderboard-b0-sorted", "/leaderboard/B0?sort=img_s&order=desc", "img/s ▼"),
    ("leaderboard-b7-flagged", "/leaderboard/B7?flagged=1", "B7 leaderboard"),
    # The 200-character name is no card the catalogue knows: its runs are flagged, shown
    # on the leaderboard when flagged runs are asked for.
    ("leaderboard-b0-flagged", "/leaderboard/B0?flagged=1", LONG_GPU[:40]),
    ("compare-b0", "/compare/B0?baseline=" + quote("1x Tesla T4"), "how much faster than"),
    ("compare-refused", "/compare/B0?settings=&batch_rule=", "compare them anyway, marked"),
    ("compare-1x-2x-marked", MARKED, "Unlike runs, compared anyway"),
    ("fit-b7-16gib", "/fit/B7?memory=16GiB", "How sure:"),
    ("fit-b0-t4", "/fit/B0?card=" + quote("Tesla T4"), "fits, at"),
    ("estimate-b7-400", "/estimate/B7?epochs=400", "Assumes an epoch's time"),
    ("cost-b0", "/cost/B0?price=" + quote("NVIDIA H200=32000") + "&price="
     + quote("Tesla T4=2300"), "The prices are yours"),
    ("gpu-t4", "/gpu/Tesla%20T4", "Tesla T4"),
    ("gpu-long", "/gpu/" + quote(LONG_GPU, safe=""), "next page"),
    ("gpu-hostile", "/gpu/" + quote(HOSTILE_GPU, safe=""), HOSTILE_GPU),
    ("runs", "/runs", "next page"),
    ("runs-b0-fastest", "/runs?model=B0&sort=epoch2", "epoch 2 ▲"),
]
# Pages answered with an error status on purpose: Chromium logs the status of the
# document itself as an error, which is the page working, not failing.
EXPECTED_STATUS = {"/compare/B0?settings=&batch_rule=": 409}
# What a list download must carry on every row.
KEY = (*frames.SHARED, "largest_batch_per_gpu")


def pages(live_site) -> list[tuple[str, str, str]]:
    """Every page, the hostile, flagged and limited runs' among them."""
    return [*PAGES, ("run-hostile", f"/run/{live_site.hostile_run_id}", "The run"),
            ("run-flagged", f"/run/{live_site.flagged_run_id}", "Flagged as implausible"),
            ("run-limited", f"/run/{live_site.limited_run_id}", "of limit")]


def _opened(url: str) -> pd.DataFrame:
    """A download as pandas reads it."""
    with urllib.request.urlopen(url, timeout=30) as answer:
        body = answer.read()
    if "format=csv" in url:
        return pd.read_csv(io.BytesIO(body), keep_default_na=False)
    if "format=parquet" in url:
        return pd.read_parquet(io.BytesIO(body))
    document = json.loads(body)
    if isinstance(document, dict) and "groups" in document:
        return pd.DataFrame(document["groups"])
    return pd.DataFrame(document if isinstance(document, list) else [document])


def test_pages_read_well_in_a_browser(live_site, tmp_path):
    folder = Path(os.environ.get("GPUBENCH_SITE_SCREENSHOTS") or tmp_path)
    failures = []
    downloads: set[str] = set()
    with Chromium(CHROMIUM) as browser:
        for name, path, says in pages(live_site):
            for width in WIDTHS:
                report = browser.load(live_site.url.rstrip("/") + path, width)
                save(report, folder, name)
                status = EXPECTED_STATUS.get(path)
                errors = [e for e in report.errors
                          if not (status and e.startswith("network:")
                                  and f"status of {status}" in e and e.endswith(path))]
                failures += [f"{path} at {width}px: {e}" for e in errors + report.layout]
                if says not in report.text:
                    failures.append(f"{path} at {width}px: does not say {says!r}")
                assert report.screenshot.startswith(b"\x89PNG")
                downloads.update(u for u in report.downloads if "/run/" not in u)
    assert not failures, "\n".join(failures)
    # Every list's downloads, as the pages link them, open in pandas with the key.
    linked = {urlsplit(u).path for u in downloads}
    assert {"/leaderboard/B0", "/compare/B0", "/runs", "/gpu/Tesla%20T4"} <= linked, linked
    for url in sorted(downloads):
        frame = _opened(url)
        if "/fit/" in url or "/estimate/" in url:
            continue  # answers, not lists: their JSON is checked against the CLI's
        missing = [c for c in KEY if c not in frame.columns]
        assert not missing, f"{url}: no {missing}"
    runs_csv = next(u for u in downloads if "/runs" in u and "format=csv" in u)
    labels = _opened(runs_csv.split("?")[0] + "?format=csv")["label"].tolist()
    assert "'" + FORMULA_LABEL in labels and FORMULA_LABEL not in labels


def test_the_check_sees_a_figure_column_out_of_view():
    # A 200-character name that cannot wrap, in a table of figures in a scrolling box,
    # as the site's lists were before they cut long names: the figures are pushed past
    # the box's right edge, seen only by scrolling. The check must say so.
    name = "X" * 200
    page = ("<style>.scroll{overflow-x:auto;max-width:100%} td{white-space:nowrap}</style>"
            "<div class='scroll'><table><tr><th>GPU</th><th class='n'>epoch 2</th></tr>"
            f"<tr><td>{name}</td><td class='n'>9.30 s</td></tr></table></div>")
    with Chromium(CHROMIUM) as browser:
        report = browser.load("data:text/html," + quote(page), 1280)
        cut = browser.load("data:text/html," + quote(page.replace(name, "Tesla T4")), 1280)
    assert any("a figure column out of view" in p for p in report.layout), report.layout
    assert not cut.layout, cut.layout
