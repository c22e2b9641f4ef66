"""The fault campaign's cheapest parts (bench/chaos.py --short: poisoned records, the
token matrix and the tampered backups, about 15 s) against real collector processes; the
rest is `make chaos`."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

CHAOS = Path(__file__).resolve().parents[2] / "bench" / "chaos.py"


@pytest.mark.chaos
def test_the_short_campaigns_cheapest_parts_lose_nothing_and_answer_right() -> None:
    done = subprocess.run([sys.executable, str(CHAOS), "--short", "--parts", "poison,auth,tampered",
                           "--seed", "1"], capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "nothing lost, duplicated or wrong" in done.stdout
    table = done.stdout[done.stdout.index("part "):]
    assert all(len(line) <= 80 for line in table.splitlines())
    assert "poison" in table and "auth" in table and "tampered" in table

