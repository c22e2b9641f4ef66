"""The workload's event stream: versioned JSON lines from the workload to the agent.

The workload (a child process or a container) writes one JSON object per line
on its stdout; the agent reads them. One frozen dataclass per kind of event,
below, is the schema both sides use: the workload builds them where it measures
(`EventWriter.emit`), the agent gets them back from `parse_line` and reads them
by attribute. On the wire every event is

    {"event": KIND, "v": STREAM_VERSION, "t": <time.monotonic()>, "wall": <time.time()>, ...}

with its dataclass's fields after the envelope (nested dataclasses as objects,
tuples as lists). `t` is CLOCK_MONOTONIC when the event was made, which the
agent's telemetry sampler uses too (it is the same clock in a container, which
shares the host's kernel, and in the workload's own children), so epochs and GPU
samples line up without wall-clock jumps.

`parse_line` checks a line against its kind's dataclass: a missing, unknown or
mistyped field, an unknown kind, or another stream version is a `StreamError`
that names it; a line that is not a JSON object with an "event" (a framework's
stray print) is not an event, and the caller keeps it as log output.

Only what a reader uses is sent; the kinds, in the order a run tells them:

- `Started`: what runs (the record's software and config), before the first epoch
- `BatchTrial`: one batch size tried by the search
- `BatchChosen`: the batch the run trains at, and the search's summary
- `SearchDone`: the `search` command's answer (no training follows)
- `Phase`: what the workload does before its first epoch ends (the console)
- `EpochStarted`, `Step` (throttled), `EpochFinished`: an epoch's course and times
- `Result`: the measured epoch's figures and memory, once training has ended
- `WarningEvent`, `LogEvent`: words for the record and for the console
- `ErrorEvent`: the workload failed (and how), just before it exits

Version 1 also sent what no reader used; version 2 leaves it out. The record
takes epoch 2's time and the start-up from the epochs, the batch, weights and
data set from `Started`; the decode time is a `LogEvent`, a network other than
the protocol's a `WarningEvent`; the workload's pid is the runner's to know.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import re
import sys
import threading
import time
import types
import typing
from dataclasses import dataclass, field
from typing import IO, Any, ClassVar, Protocol

from gpubench.errors import GpubenchError

# 2: typed events (one dataclass a kind, every field checked); 1: untyped dicts.
STREAM_VERSION = 2
# Characters of an error message an event (error, batch_trial) carries at most.
MESSAGE_LIMIT = 2000


class StreamError(GpubenchError):
    """A line of the workload's event stream that this side cannot read: another stream
    version, an unknown kind, or a field missing, unknown or of the wrong type."""


# --- the events --------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class Event:
    """What every event carries: its kind (the class's), and when it was made."""

    kind: ClassVar[str] = ""
    t: float = field(default_factory=time.monotonic)  # CLOCK_MONOTONIC, the sampler's clock
    wall: float = field(default_factory=time.time)


@dataclass(frozen=True, kw_only=True)
class Dataset:
    """The data set of a run, as the record's config keeps it."""

    name: str
    image_count: int
    fingerprint: str  # "sha256:<hex>" over file names, sizes and contents
    train_images: int
    validation_images: int
    validation_split: float
    seed: int
    skipped_files: int  # files in the folder that are not images


@dataclass(frozen=True, kw_only=True)
class Started(Event):
    """The run's software and what it runs, once the framework is loaded."""

    kind: ClassVar[str] = "started"
    backend: str
    backend_version: str  # '' where the framework does not say
    keras_version: str
    python_version: str
    cuda_runtime_version: str
    cudnn_version: str
    model: str
    image_size: int
    batch_per_gpu: int
    global_batch: int
    batch_choice: str  # "given" or "searched"
    batch_rule: str
    memory_limit_bytes: int  # 0: the whole card
    precision: str
    gpu_count: int
    epochs: int
    pipeline: str  # as asked; Result.pipeline_mode says how it ran
    weights: str
    # The run's switches (gpubench.settings.switches), as asked.
    jit_compile: bool
    cuda_graphs: bool
    data_on_device: bool
    batched_augmentation: bool
    fused_batchnorm: bool
    channels_first: bool
    dataset: Dataset
    # A model other than the EfficientNets (gpubench.models): its identity, never its
    # architecture; "" and 0 for the EfficientNets.
    model_fingerprint: str = ""  # SHA-256 of its canonical architecture config
    parameter_count: int = 0
    input_spec: str = ""  # how it is fed: "photos 224x224x3", "tokens 1024 of 50257"
    unit: str = ""  # what its speed counts: "images" or "tokens" ("": images)


@dataclass(frozen=True, kw_only=True)
class BatchTrial(Event):
    """One batch size tried: whether it fit, and what it took."""

    kind: ClassVar[str] = "batch_trial"
    batch: int
    fits: bool
    trial_kind: str = "probe"  # why it was made: "probe" or "confirm" (the record's kind)
    peak_memory_bytes: int = 0  # the allocator's allocated peak (address space on a CPU)
    reserved_peak_bytes: int = 0  # what the allocator held at its peak (0: not known)
    capacity_bytes: int = 0  # what the trial could use in all (0: not known)
    seconds: float = 0.0
    step_seconds: float = 0.0  # median training step after the first (0: not timed)
    message: str = ""  # why it did not fit
    # The `trial` command's peak of its address space, which --trial-address-space caps
    # (the tests calibrate that cap from it); 0 elsewhere.
    address_space_peak_bytes: int = 0


@dataclass(frozen=True, kw_only=True)
class SearchSummary:
    """What the batch search found, besides its trials."""

    largest: int  # the largest batch a trial confirmed
    capped: bool  # the training set, not memory, bounded it
    search_seconds: float
    capacity_bytes: int  # what the trials could use (0: not known)
    fixed_bytes: int  # the memory line through the trials' peaks (0, 0: no line)
    per_image_bytes: int
    stopped_by: str = ""  # "", "trials" or "time": the budget that ended it early


@dataclass(frozen=True, kw_only=True)
class BatchChosen(Event):
    """The batch the run trains at, chosen by `rule` from the search."""

    kind: ClassVar[str] = "batch_chosen"
    batch: int
    rule: str
    fallbacks: tuple[int, ...]  # the batches to run again at after running out of memory
    search: SearchSummary


@dataclass(frozen=True, kw_only=True)
class SearchDone(Event):
    """The `search` command's answer for one model and memory limit."""

    kind: ClassVar[str] = "search_done"
    model: str
    batch: int  # the batch the speed run would train at
    rule: str
    memory_limit_bytes: int  # 0: the whole card
    search: SearchSummary


@dataclass(frozen=True, kw_only=True)
class Phase(Event):
    """What the workload does before its first epoch ends."""

    kind: ClassVar[str] = "phase"
    phase: str  # "search", "build" or "first_step"
    message: str


@dataclass(frozen=True, kw_only=True)
class EpochStarted(Event):
    """An epoch begins: `steps` training steps."""

    kind: ClassVar[str] = "epoch_started"
    epoch: int  # 1-based
    steps: int


@dataclass(frozen=True, kw_only=True)
class Step(Event):
    """Progress: `step` of the epoch's `steps` training steps are done (throttled)."""

    kind: ClassVar[str] = "step"
    epoch: int
    step: int
    steps: int


@dataclass(frozen=True, kw_only=True)
class EpochFinished(Event):
    """An epoch ended: its times (on the stream's clock) and metrics."""

    kind: ClassVar[str] = "epoch_finished"
    epoch: int
    wall_seconds: float  # training + validation
    train_seconds: float
    validation_seconds: float
    t_start: float
    t_end: float
    steps: int  # training steps the epoch ran
    loss: float | None = None  # None: Keras did not report it
    accuracy: float | None = None
    val_loss: float | None = None
    val_accuracy: float | None = None


@dataclass(frozen=True, kw_only=True)
class GpuPeak:
    """One GPU's allocator peak in the measured epoch."""

    gpu_index: int
    allocator_peak_bytes: int
    memory_total_bytes: int  # the card's memory as the framework reports it
    reserved_peak_bytes: int = 0  # what the allocator held at its peak (torch), 0 if unknown


@dataclass(frozen=True, kw_only=True)
class XlaPrograms:
    """The XLA programs a run on JAX needed: compiled, or loaded from JAX's persistent
    compilation cache (run.proto's XlaPrograms)."""

    compiled: int
    loaded: int
    seconds: float  # compiling and loading them, all told
    cache: bool  # whether the persistent compilation cache was on


@dataclass(frozen=True, kw_only=True)
class Result(Event):
    """The measured epoch's figures, once training has ended."""

    kind: ClassVar[str] = "result"
    measured_epoch: int
    # From the measured epoch's steps after warm-up (None: no step was timed).
    train_images_per_second: float | None = None
    step_time_median_seconds: float | None = None
    step_time_cv: float | None = None
    memory: tuple[GpuPeak, ...] = ()
    # What to know about the memory figures (a CPU run has none; under CUDA graphs the
    # allocator peak covers the whole run): the record keeps them.
    memory_notes: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()
    pipeline_mode: str = ""  # the pipeline as it ran
    cuda_graphs: bool = False  # whether graphs ran (asked-for graphs may not)
    jit_compile: bool = False  # whether Keras compiled the step
    math_mode: str = ""  # how float32 convolutions and matrix products ran (settings)
    xla_programs: XlaPrograms | None = None  # JAX: compiled or from the cache (None: other)


@dataclass(frozen=True, kw_only=True)
class WarningEvent(Event):
    """Something the record and the console should say."""

    kind: ClassVar[str] = "warning"
    message: str


@dataclass(frozen=True, kw_only=True)
class LogEvent(Event):
    """Something the console shows, dimmed."""

    kind: ClassVar[str] = "log"
    message: str


@dataclass(frozen=True, kw_only=True)
class ErrorEvent(Event):
    """The workload failed; it exits next."""

    kind: ClassVar[str] = "error"
    status: str  # "out_of_memory", "error" or "interrupted"
    message: str


KINDS: dict[str, type[Event]] = {
    cls.kind: cls
    for cls in (Started, BatchTrial, BatchChosen, SearchDone, Phase, EpochStarted, Step,
                EpochFinished, Result, WarningEvent, LogEvent, ErrorEvent)
}


# --- writing ------------------------------------------------------------------------------


class EventSink(Protocol):
    """Where a part of the workload sends its events (an EventWriter, or a replica's queue)."""

    def emit(self, event: Event) -> None:
        """Send one event."""


class EventWriter:
    """Writes events as JSON lines to a stream (the workload's real stdout)."""

    def __init__(self, stream: IO[str] | None = None) -> None:
        self._stream = stream if stream is not None else sys.stdout
        # Events may come from two threads (a relayed child's and the run's own).
        self._lock = threading.Lock()

    def emit(self, event: Event) -> None:
        """Write one event and flush, so the agent sees it at once."""
        line = to_json(event) + "\n"
        with self._lock:
            self._stream.write(line)
            self._stream.flush()


def to_json(event: Event) -> str:
    """One event as its line of the stream (without the newline); its texts plain."""
    fields = dataclasses.asdict(event)
    record = {"event": event.kind, "v": STREAM_VERSION, "t": fields.pop("t"),
              "wall": fields.pop("wall"), **fields}
    return json.dumps(_plain(record), allow_nan=False, default=_jsonable)


def _plain(value: Any) -> Any:
    """`value` with every text in it made plain_text."""
    if isinstance(value, str):
        return plain_text(value)
    if isinstance(value, dict):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(item) for item in value]
    return value


def _jsonable(value: Any) -> Any:
    # A numpy scalar may reach a field from the framework's figures.
    if hasattr(value, "item"):
        return value.item()
    raise TypeError(f"{type(value).__name__} is not a field type of an event")


# Terminal control sequences (CSI such as "\x1b[1m", OSC, and lone escapes) and the
# other control characters: a framework's coloured error text must reach the record
# and the console as plain words.
_ESCAPES = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?|\x1b.?")
_CONTROLS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def plain_text(text: str) -> str:
    """`text` without terminal escape sequences or control characters (tabs and
    newlines kept)."""
    return _CONTROLS.sub("", _ESCAPES.sub("", text))


# --- reading ------------------------------------------------------------------------------


def parse_line(line: str) -> Event | None:
    """The event on one line of the stream, or None for a line that is not one (a
    framework's stray print: the caller keeps it as log output).

    Raises StreamError for an event this side cannot read: of another stream
    version, of an unknown kind, or with a field missing, unknown or mistyped.
    Every text arrives as plain text (plain_text)."""
    line = line.strip()
    if not line.startswith("{"):
        return None
    try:
        record = json.loads(line)
    except ValueError:
        return None
    if not isinstance(record, dict) or "event" not in record:
        return None
    return from_json(record)


def from_json(record: dict[str, Any]) -> Event:
    """The event a decoded line holds (see parse_line)."""
    fields = dict(record)
    kind = fields.pop("event")
    version = fields.pop("v", None)
    if version != STREAM_VERSION:
        raise StreamError(
            f"the workload's event stream is version {version!r}, and this side reads "
            f"version {STREAM_VERSION} (a {kind!r} event): the workload (or its image) and "
            "the agent come from different versions of gpubench; run them from the same one")
    cls = KINDS.get(kind) if isinstance(kind, str) else None
    if cls is None:
        raise StreamError(f"the workload's event stream: unknown event kind {kind!r}")
    return _build(cls, fields, f"{kind} event")


def _build(cls: type, fields: Any, where: str) -> Any:
    """An instance of the dataclass `cls` from JSON `fields`, every field checked."""
    if not isinstance(fields, dict):
        raise StreamError(f"the workload's event stream: {where}: expected an object, "
                          f"got {fields!r:.80}")
    hints = _hints(cls)
    unknown = sorted(set(fields) - set(hints))
    if unknown:
        raise StreamError(f"the workload's event stream: {where}: unknown field {unknown[0]!r}")
    values = {}
    for item in dataclasses.fields(cls):
        if item.name in fields:
            values[item.name] = _value(fields[item.name], hints[item.name],
                                       f"{where}, field {item.name!r}")
        elif item.default is dataclasses.MISSING and item.default_factory is dataclasses.MISSING:
            raise StreamError(f"the workload's event stream: {where}: field {item.name!r} "
                              "is missing")
    return cls(**values)


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    """The field types of a dataclass (its annotations are strings here)."""
    return {name: hint for name, hint in typing.get_type_hints(cls).items()
            if name in {f.name for f in dataclasses.fields(cls)}}


def _value(value: Any, hint: Any, where: str) -> Any:
    """`value` checked against the type `hint` (and turned into it: a list into a
    tuple, an object into its dataclass, an int into a float)."""
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in typing.get_args(hint):
            return None
        (hint,) = (arg for arg in typing.get_args(hint) if arg is not type(None))
        origin = typing.get_origin(hint)
    if origin is tuple:
        if not isinstance(value, list):
            raise _mistyped(where, "a list", value)
        (item, _) = typing.get_args(hint)
        return tuple(_value(v, item, f"{where}[{i}]") for i, v in enumerate(value))
    if dataclasses.is_dataclass(hint):  # a hint: the dataclass itself, not an instance
        return _build(typing.cast(type, hint), value, where)
    if hint is bool:
        if not isinstance(value, bool):
            raise _mistyped(where, "true or false", value)
        return value
    if hint is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise _mistyped(where, "an integer", value)
        return value
    if hint is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise _mistyped(where, "a number", value)
        return float(value)
    if hint is str:
        if not isinstance(value, str):
            raise _mistyped(where, "a string", value)
        return plain_text(value)
    raise TypeError(f"{where}: no reader for the type {hint!r}")  # a schema this module lacks


def _mistyped(where: str, expected: str, value: Any) -> StreamError:
    return StreamError(f"the workload's event stream: {where}: expected {expected}, "
                       f"got {json.dumps(value)[:80]}")
