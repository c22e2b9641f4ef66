"""The workload's event stream: versioned JSON lines from the workload to the agent.

The workload (a child process or a container) writes one JSON object per line
on its stdout; the agent reads them. Every event carries:

    {"event": KIND, "v": STREAM_VERSION, "t": <time.monotonic()>, "wall": <time.time()>, ...}

`t` is CLOCK_MONOTONIC, which the agent's telemetry sampler uses too (it is the
same clock in a container, which shares the host's kernel), so epochs and GPU
samples line up without wall-clock jumps.

Kinds and their fields (all optional fields may be absent):

- started: backend, backend_version, keras_version, python_version,
  cuda_runtime_version, cudnn_version, model, image_size, batch_per_gpu,
  global_batch, batch_choice ("given"|"searched"), batch_rule, memory_limit_bytes,
  precision, gpu_count, epochs,
  pipeline, weights, jit_compile, cuda_graphs, data_on_device, batched_augmentation,
  fused_batchnorm, channels_first,
  dataset {name, image_count, fingerprint, train_images, validation_images,
  validation_split, seed, skipped_files (count of non-image files), class_names}, pid
- batch_trial: batch, fits, kind ("probe"|"confirm"), peak_memory_bytes,
  reserved_peak_bytes, capacity_bytes, seconds, step_seconds, message
- batch_chosen: batch, rule, largest, capped, fallbacks [int], search_seconds,
  capacity_bytes, fixed_bytes, per_image_bytes, predicted_peak_bytes, stopped_by
- search_done: model, batch, rule, memory_limit_bytes and batch_chosen's search
  fields (the workload's `search` command: no training follows)
- phase: phase ("search"|"build"|"first_step"), model, message   (what the
  workload is doing before its first epoch ends, for the console)
- epoch_started: epoch, steps
- step: epoch, step, steps                       (progress; throttled)
- epoch_finished: epoch, wall_seconds, train_seconds, validation_seconds,
  loss, accuracy, val_loss, val_accuracy, t_start, t_end, steps,
  train_images_per_second, step_time_median_seconds, step_time_cv, timed_steps
- result: measured_epoch, epoch2_seconds, startup_seconds,
  train_images_per_second, step_time_median_seconds, step_time_cv, timed_steps,
  memory [{gpu_index, allocator_peak_bytes, memory_total_bytes, reserved_peak_bytes}],
  memory_notes [str],
  warnings [str], epochs [{epoch, wall_seconds, train_images_per_second, ...}],
  batch_per_gpu, global_batch, pipeline_mode, cuda_graphs (whether graphs ran),
  jit_compile (whether Keras compiled the step), decode_seconds, weights,
  parameters {total, trainable, non_trainable}
- warning: message
- log: message
- error: status ("out_of_memory"|"error"|"interrupted"), message
"""

from __future__ import annotations

import json
import re
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import IO, Any

STREAM_VERSION = 1
# Characters of an error message an event (error, batch_trial) carries at most.
MESSAGE_LIMIT = 2000

KINDS = frozenset(
    {
        "started",
        "batch_trial",
        "batch_chosen",
        "phase",
        "search_done",
        "epoch_started",
        "step",
        "epoch_finished",
        "result",
        "warning",
        "log",
        "error",
    }
)


@dataclass(frozen=True)
class Event:
    """One event of the stream."""

    kind: str
    t: float
    wall: float
    data: dict[str, Any] = field(default_factory=dict)

    def get(self, key: str, default: Any = None) -> Any:
        """A field of the event, or `default`."""
        return self.data.get(key, default)


class EventWriter:
    """Writes events as JSON lines to a stream (the workload's real stdout)."""

    def __init__(self, stream: IO[str] | None = None) -> None:
        self._stream = stream if stream is not None else sys.stdout
        # Events may come from two threads (a relayed child's and the run's own).
        self._lock = threading.Lock()

    def emit(self, kind: str, /, **fields: Any) -> None:
        """Write one event and flush, so the agent sees it at once."""
        if kind not in KINDS:
            raise ValueError(f"unknown event kind {kind!r}")
        record = {"event": kind, "v": STREAM_VERSION, "t": time.monotonic(), "wall": time.time()}
        record.update(_plain_fields(dict(fields)))
        line = json.dumps(record, allow_nan=False, default=_jsonable) + "\n"
        with self._lock:
            self._stream.write(line)
            self._stream.flush()


# Terminal control sequences (CSI such as "\x1b[1m", OSC, and lone escapes) and the
# other control characters: a framework's coloured error text must reach the record
# and the console as plain words.
_ESCAPES = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?|\x1b.?")
_CONTROLS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def plain_text(text: str) -> str:
    """`text` without terminal escape sequences or control characters (tabs and
    newlines kept)."""
    return _CONTROLS.sub("", _ESCAPES.sub("", text))


def _plain_fields(fields: dict[str, Any]) -> dict[str, Any]:
    """Messages and warnings as plain text; other fields as they are."""
    for key in ("message", "warnings", "memory_notes"):
        value = fields.get(key)
        if isinstance(value, str):
            fields[key] = plain_text(value)
        elif isinstance(value, list):
            fields[key] = [plain_text(v) if isinstance(v, str) else v for v in value]
    return fields


def _jsonable(value: Any) -> Any:
    # numpy scalars and paths reach the writer from the workload.
    if hasattr(value, "item"):
        return value.item()
    return str(value)


def parse_line(line: str) -> Event | None:
    """Parse one line of the stream.

    Returns None for a line that is not an event (a framework's stray print):
    the caller shows it as log output. A line that claims to be an event but is
    from a newer stream version, or of an unknown kind, is reported as a
    `warning` event rather than dropped silently.
    """
    line = line.strip()
    if not line.startswith("{"):
        return None
    try:
        record = json.loads(line)
    except ValueError:
        return None
    if not isinstance(record, dict) or "event" not in record:
        return None
    kind = record.pop("event")
    version = record.pop("v", None)
    t = float(record.pop("t", time.monotonic()))
    wall = float(record.pop("wall", time.time()))
    if version != STREAM_VERSION:
        message = (
            f"event stream version {version!r} is not {STREAM_VERSION}; ignored a {kind!r} event"
        )
        return Event("warning", t, wall, {"message": message})
    if kind not in KINDS:
        return Event("warning", t, wall, {"message": f"ignored an unknown event kind {kind!r}"})
    return Event(kind, t, wall, _plain_fields(record))
