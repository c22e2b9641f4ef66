"""The event stream contract as the agent reads it."""

from __future__ import annotations

import io
import json

from gpubench.events import STREAM_VERSION, EventWriter, parse_line


def test_written_events_parse_back() -> None:
    out = io.StringIO()
    EventWriter(out).emit("epoch_finished", epoch=2, wall_seconds=5.0, t_start=1.0, t_end=6.0)
    event = parse_line(out.getvalue())
    assert event is not None and event.kind == "epoch_finished"
    assert event.get("wall_seconds") == 5.0 and event.t > 0


def test_other_lines_are_not_events() -> None:
    for line in ("Epoch 1/2", "", "{not json", "[1, 2]", json.dumps({"no": "event"})):
        assert parse_line(line) is None


def test_newer_or_unknown_events_become_warnings() -> None:
    newer = parse_line(json.dumps({"event": "result", "v": STREAM_VERSION + 1, "t": 1.0}))
    assert newer is not None and newer.kind == "warning"
    assert "ignored a 'result' event" in newer.get("message")
    unknown = parse_line(json.dumps({"event": "teleport", "v": STREAM_VERSION, "t": 1.0}))
    assert unknown is not None and unknown.kind == "warning"
    assert "teleport" in unknown.get("message")
