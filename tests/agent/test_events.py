"""The event stream contract as the agent reads it."""

from __future__ import annotations

import dataclasses
import io
import json

import pytest

from gpubench import events
from gpubench.events import (
    STREAM_VERSION,
    EpochFinished,
    EventWriter,
    GpuPeak,
    Result,
    StreamError,
    parse_line,
)
from gpubench.settings import switches


def written(event: events.Event) -> str:
    out = io.StringIO()
    EventWriter(out).emit(event)
    return out.getvalue()


def test_written_events_parse_back() -> None:
    sent = EpochFinished(epoch=2, wall_seconds=5.0, train_seconds=4.0, validation_seconds=1.0,
                         t_start=1.0, t_end=6.0, steps=3)
    event = parse_line(written(sent))
    assert isinstance(event, EpochFinished) and event.kind == "epoch_finished"
    assert event.wall_seconds == 5.0 and event.t > 0 and event.loss is None
    assert event == sent


def test_nested_events_parse_back_as_dataclasses() -> None:
    sent = Result(measured_epoch=2, memory=(GpuPeak(gpu_index=0, allocator_peak_bytes=5,
                                                    memory_total_bytes=9),),
                  memory_notes=("the peak covers the whole run",), train_images_per_second=12)
    event = parse_line(written(sent))
    assert isinstance(event, Result) and event == dataclasses.replace(
        sent, train_images_per_second=12.0)
    assert event.memory[0].allocator_peak_bytes == 5


def test_every_kind_has_its_own_name_and_the_started_event_every_switch() -> None:
    assert set(events.KINDS) == {cls.kind for cls in events.KINDS.values()}
    assert set(switches()) <= {f.name for f in dataclasses.fields(events.Started)}


def test_texts_arrive_plain() -> None:
    line = json.dumps({"event": "error", "v": STREAM_VERSION, "status": "error",
                       "message": "\x1b[1mValueError\x1b[0m: bad"})
    event = parse_line(line)
    assert isinstance(event, events.ErrorEvent) and event.message == "ValueError: bad"
    assert "\\u001b" not in written(events.LogEvent(message="\x1b[31mred\x1b[0m"))


def test_other_lines_are_not_events() -> None:
    for line in ("Epoch 1/2", "", "{not json", "[1, 2]", json.dumps({"no": "event"})):
        assert parse_line(line) is None


def test_another_stream_version_is_refused() -> None:
    with pytest.raises(StreamError, match="version 1, and this side reads version 2"):
        parse_line(json.dumps({"event": "result", "v": 1, "t": 1.0}))
    with pytest.raises(StreamError, match="version None"):
        parse_line(json.dumps({"event": "result", "t": 1.0}))


@pytest.mark.parametrize(("fields", "named"), [
    ({"event": "teleport"}, "unknown event kind 'teleport'"),
    ({"event": "step", "epoch": 1, "step": 2}, "step event: field 'steps' is missing"),
    ({"event": "step", "epoch": 1, "step": "2", "steps": 3},
     "step event, field 'step': expected an integer, got \"2\""),
    ({"event": "step", "epoch": 1, "step": 2, "steps": 3, "speed": 9},
     "step event: unknown field 'speed'"),
    ({"event": "result", "measured_epoch": 2, "memory": [{"gpu_index": 0}]},
     "result event, field 'memory'[0]: field 'allocator_peak_bytes' is missing"),
    ({"event": "result", "measured_epoch": 2, "cuda_graphs": 1},
     "field 'cuda_graphs': expected true or false, got 1"),
    ({"event": "result", "measured_epoch": 2, "warnings": "one"},
     "field 'warnings': expected a list"),
])
def test_a_malformed_event_is_an_error_naming_the_field(fields: dict, named: str) -> None:
    with pytest.raises(StreamError) as raised:
        parse_line(json.dumps({"v": STREAM_VERSION, "t": 1.0, **fields}))
    assert named in str(raised.value)
