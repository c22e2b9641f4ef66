"""The demo's "where you stand" (scripts/demo_standing.py) against a real collector: a
speedup only as a ratio of rates, and only between runs alike in every dimension of the
comparison key; an unlike run (a 64 px CPU smoke run beside a 224 px GPU run) gets the
dimensions it differs in and no number."""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

from rich.console import Console

from gpubench.client import Client

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))

from demo_standing import standing_tables  # noqa: E402


def test_a_speedup_only_like_for_like_and_as_a_rate(collector: Any, make_run: Any) -> None:
    demo, reference = collector.make_token("demo"), collector.make_token("reference")
    with Client(collector.address, demo) as client:
        client.submit_run(make_run(gpu_name="NVIDIA A100-SXM4-80GB", image_size=64,
                                   epoch2_seconds=17.09, label="make demo"))
    with Client(collector.address, reference) as client:
        client.submit_run(make_run(gpu_name="NVIDIA H200", image_size=224,
                                   epoch2_seconds=0.42725, label="h200 default"))
        client.submit_run(make_run(gpu_name="NVIDIA H100 80GB HBM3", image_size=64,
                                   epoch2_seconds=6.836, label="h100 small"))
    with Client(collector.address, collector.admin_token) as client:
        frame = client.list_runs(model="B0", limit=100)
    console = Console(width=80, record=True, highlight=False)
    for shown in standing_tables(frame, you="demo"):
        console.print(shown)
    said = " ".join(console.export_text().split())
    assert re.search(r"you: \d+ img/s in epoch 2 on 1x NVIDIA A100", said), said
    assert "h100 small (1x NVIDIA H100 80GB HBM3): speedup 2.50x" in said, said
    assert "h200 default (1x NVIDIA H200): not like yours in image size: no speedup" in said
    assert "40.0x" not in said and "40x" not in said
