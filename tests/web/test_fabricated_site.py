"""The site ranks no made-up run: the real H200 run moved to cards without verified runs
at 3x what each is expected to reach (tests/fabrication.py) is on no leaderboard, in no
comparison and in no download, while the real run leads."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from pathlib import Path

import fabrication
import pandas as pd
import pytest
from live_site import LiveSite, _start

H200 = "NVIDIA H200"


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveSite]:
    runs = [fabrication.real_run()]
    runs += [fabrication.on_card(name, 3.0) for name in fabrication.SPREAD]
    tmp: Path = tmp_path_factory.mktemp("fabricated")
    for site, address, admin, _ in _start(tmp, runs, public_read=True):
        yield LiveSite(site.url, address, admin, "", "")


def test_the_leaderboard_page_and_its_downloads_rank_the_real_run_alone(
        site: LiveSite) -> None:
    status, page, _ = site.get("/leaderboard/B0")
    assert status == 200 and H200 in page
    assert [name for name in fabrication.SPREAD if name in page] == []
    status, body, _ = site.get("/leaderboard/B0?format=csv")
    assert status == 200
    assert pd.read_csv(io.StringIO(body))["gpu_name"].tolist() == [H200]
    status, body, _ = site.get("/leaderboard/B0?format=json")
    assert [row["gpu_name"] for row in json.loads(body)] == [H200]


def test_the_comparison_and_its_downloads_hold_the_real_run_alone(site: LiveSite) -> None:
    status, page, _ = site.get("/compare/B0")
    assert status == 200 and H200 in page
    assert [name for name in fabrication.SPREAD if name in page] == []
    status, body, _ = site.get("/compare/B0?format=csv")
    assert pd.read_csv(io.StringIO(body))["gpu_name"].tolist() == [H200]
    status, body, _ = site.get("/compare/B0?format=json")
    document = json.loads(body)
    assert [g["gpu_name"] for g in document["groups"]] == [H200]
    assert document["uncatalogued"] == []


def test_the_home_page_leads_with_the_real_run(site: LiveSite) -> None:
    status, page, _ = site.get("/")
    assert status == 200 and H200 in page
    assert [name for name in fabrication.SPREAD if name in page] == []
