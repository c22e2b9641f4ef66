"""`models --json`: the three networks have exactly the protocol's parameter counts."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.slow


def test_parameter_counts_equal_the_protocols() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "gpubench.agent.workload", "models", "--json", "--backend", "torch",
         "--image-size", "64"],
        capture_output=True, text=True, check=False, timeout=300, env=dict(os.environ),
    )
    assert done.returncode == 0, done.stderr[-2000:]
    found = json.loads(done.stdout)
    # The protocol's model.summary() figures (seed-benchmark.md), total / trainable / frozen.
    assert {name: (row["total"], row["trainable"], row["non_trainable"])
            for name, row in found.items()} == {
        "B0": (4_053_414, 4_011_391, 42_023),
        "B3": (10_788_146, 10_700_843, 87_303),
        "B7": (64_105_370, 63_794_643, 310_727),
    }
    assert all(row["matches_protocol"] and row["image_size"] == 64 for row in found.values())
