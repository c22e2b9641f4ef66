"""What the agent prints while a model runs: the workload's events as lines."""

from __future__ import annotations

import io
import json

from gpubench.agent.display import RunDisplay
from gpubench.agent.events import parse_line
from rich.console import Console


def _printed(*events: dict) -> str:
    out = io.StringIO()
    display = RunDisplay(Console(file=out, width=200, color_system=None))
    display.model_started("B0", 2, lambda: None)
    for fields in events:
        event = parse_line(json.dumps({"v": 1, "t": 0.0, **fields}))
        assert event is not None
        display.event(event)
    display.model_finished()
    return out.getvalue()


def test_log_warning_and_epoch_lines_are_shown() -> None:
    text = _printed(
        {"event": "log", "message": "CUDA graphs: captured training 512x3x224x224; 6 replays"},
        {"event": "warning", "message": "step times vary by 44%"},
        {"event": "epoch_finished", "epoch": 2, "wall_seconds": 0.48},
        {"event": "log", "message": ""},  # nothing to say: no line
    )
    lines = [line for line in text.splitlines() if line.strip()]
    assert lines == [
        "B0: CUDA graphs: captured training 512x3x224x224; 6 replays",
        "B0: warning: step times vary by 44%",
        "B0 epoch 2: 0.5 s",
    ]


def test_quiet_prints_nothing() -> None:
    out = io.StringIO()
    display = RunDisplay(Console(file=out), quiet=True)
    display.note("anything")
    assert out.getvalue() == ""
