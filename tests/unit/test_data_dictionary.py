"""docs/data-dictionary.md describes every column gpubench's tables carry: the runs, a
comparison (with prices), published runs, a leaderboard and the site's downloads."""

from __future__ import annotations

import re
from pathlib import Path

from gpubench import frames, prices

DICTIONARY = Path(__file__).resolve().parents[2] / "docs" / "data-dictionary.md"


def test_every_column_is_described() -> None:
    text = DICTIONARY.read_text()
    described = set(re.findall(r"`([a-z0-9_]+)`", text))
    columns = {*frames.FLAT_RUN_COLUMNS, *frames.COMPARE_COLUMNS, *frames.PUBLISHED_COLUMNS,
               *frames.LEADERBOARD_COLUMNS}
    # A priced comparison's columns (prices.cost_frame).
    frame = frames.compare_frame(frames.collector_pb2.CompareResponse(model="B0"))
    columns |= set(prices.cost_frame(frame, prices.Prices()).columns)
    missing = sorted(columns - described)
    assert not missing, f"docs/data-dictionary.md does not describe {missing}"
    # The key is named as one list, as the frames define it.
    for name in frames.SHARED:
        assert f"`{name}`" in text.split("**The comparison key**")[1].split("\n- ")[0]
