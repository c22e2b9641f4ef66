"""The fault campaign's cheapest parts (bench/chaos.py --short: poisoned records, the
token matrix, the tampered backups and the fabricated runs, about 20 s) against real
collector processes; the rest is `make chaos`."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

CHAOS = Path(__file__).resolve().parents[2] / "bench" / "chaos.py"


@pytest.mark.chaos
@pytest.mark.e2e
def test_the_short_campaigns_cheapest_parts_lose_nothing_and_answer_right() -> None:
    done = subprocess.run([sys.executable, str(CHAOS), "--short", "--parts",
                           "poison,auth,tampered,fabrication",
                           "--seed", "1"], capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "nothing lost, duplicated or wrong" in done.stdout
    table = done.stdout[done.stdout.index("part "):]
    assert all(len(line) <= 80 for line in table.splitlines())
    assert all(part in table for part in ("poison", "auth", "tampered", "fabrication"))
    # Every fabricated case answered, none leading.
    cases = done.stdout[done.stdout.index("case "):done.stdout.index("part ")]
    assert all(len(line) <= 80 for line in cases.splitlines())
    assert "STORED" not in cases and "NVIDIA H200 Ultra at 5.5x" in cases
    assert "none leads" in table

