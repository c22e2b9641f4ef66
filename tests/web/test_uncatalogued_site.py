"""The site shows runs on a card not yet in the GPU catalogue apart: a section of its own
on the leaderboard and the comparison, marked, with how to have the card added, never
ranked with the catalogued cards; the downloads carry them with `in_catalogue` false."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest
from live_site import LiveSite, _start, alike_run

from gpubench import figures

T4 = "Tesla T4"
NEW = "NVIDIA Rubin R100"  # a card the catalogue does not list (yet), like none it does


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveSite]:
    runs = [alike_run(T4, "B0", s) for s in (9.1, 9.6, 9.3)]
    runs += [alike_run(NEW, "B0", s) for s in (1.5, 1.6)]  # faster than the T4
    tmp: Path = tmp_path_factory.mktemp("uncatalogued")
    for site, address, admin, _ in _start(tmp, runs, public_read=True):
        yield LiveSite(site.url, address, admin, "", "")


def test_the_leaderboard_lists_the_new_card_below_the_ranked_ones(site: LiveSite) -> None:
    status, page, _ = site.get("/leaderboard/B0")
    assert status == 200
    heading = page.index(f">{figures.NOT_CATALOGUED.capitalize()}</h2>")
    assert page.index(T4) < heading < page.index(NEW)
    assert "gpubench-agent inventory" in page[heading:]
    status, body, _ = site.get("/leaderboard/B0?format=csv")
    frame = pd.read_csv(io.StringIO(body))
    assert frame[["gpu_name", "rank", "in_catalogue"]].values.tolist() == [
        [T4, 1, True], [NEW, 0, False]]
    status, body, _ = site.get("/leaderboard/B0?format=json")
    assert status == 200
    rows = json.loads(body)
    assert [(r["gpu_name"], r["in_catalogue"]) for r in rows] == [(T4, True), (NEW, False)]


def test_the_home_page_ranks_only_catalogued_cards(site: LiveSite) -> None:
    status, page, _ = site.get("/")
    assert status == 200 and T4 in page and NEW not in page


def test_the_comparison_shows_the_new_card_apart(site: LiveSite) -> None:
    status, page, _ = site.get("/compare/B0")
    assert status == 200
    heading = page.index(f">{figures.NOT_CATALOGUED.capitalize()}</h2>")
    assert page.index(T4) < heading < page.index(NEW, heading)
    assert f'<option value="1x {NEW}"' not in page  # never a baseline to choose
    chart = page[page.index("<svg"):page.index("</svg>")]
    assert T4 in chart and NEW not in chart  # nor a bar among the compared ones
    assert "gpubench-agent inventory" in page[heading:]
    status, body, _ = site.get("/compare/B0?format=csv")
    frame = pd.read_csv(io.StringIO(body))
    assert frame[["gpu_name", "in_catalogue"]].values.tolist() == [[T4, True], [NEW, False]]
    status, body, _ = site.get("/compare/B0?format=json")
    document = json.loads(body)
    assert [g["gpu_name"] for g in document["groups"]] == [T4]
    assert [(g["gpu_name"], g["in_catalogue"]) for g in document["uncatalogued"]] == [
        (NEW, False)]
