"""A Keras callback that times every epoch and step and reports them as events.

Timestamps are time.monotonic(), the clock of the event stream and of the
agent's GPU sampler. Validation is timed from on_test_begin to on_test_end, and
an epoch ends in on_epoch_end, after Keras has read the epoch's metrics back
from the device. A step's end is taken one of two ways:

- on the host (`HostTimedEpochs`): in on_train_batch_end, which Keras calls after
  it has turned the step's loss and accuracy into Python numbers. That waits for
  the device to finish the step, so the times are the device's, but the host
  cannot queue step n+1 while the device runs step n.
- on the device (`DeviceTimedEpochs`, torch on a GPU): a CUDA event queued at
  the start of every step marks when the device finished the step before it, and
  the events are read once the epoch is over. Nothing waits during the epoch, so
  Keras dispatches its per-step bookkeeping asynchronously and the host queues
  the next step while the device runs this one, as in any training loop that
  does not print every step's loss.

Imports Keras: import this module only after the backend has been selected.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import keras

from gpubench.agent.workload import frameworks
from gpubench.agent.workload.measure import StepStats, step_stats
from gpubench.events import EpochFinished, EpochStarted, Event, EventSink, Step

PROGRESS_INTERVAL_SECONDS = 0.5  # step events at most about twice a second


@dataclass
class EpochRecord:
    """What was measured of one epoch."""

    epoch: int  # 1-based
    t_start: float
    t_end: float = 0.0
    train_seconds: float = 0.0
    validation_seconds: float = 0.0
    step_ends: list[float] = field(default_factory=list)
    step_images: list[int] = field(default_factory=list)
    metrics: dict[str, float] = field(default_factory=dict)
    stats: StepStats | None = None

    @property
    def wall_seconds(self) -> float:
        """Training and validation, as the protocol's epoch time."""
        return self.t_end - self.t_start


class EpochTimer(keras.callbacks.Callback):
    """Times epochs and steps; emits epoch_started, step and epoch_finished events.

    `before_epoch` / `after_epoch` get the 1-based epoch number (the run resets
    and reads the memory peaks around the measured epoch there). Subclasses say
    how a step's end is taken; `epoch_timer` picks one.
    """

    def __init__(
        self,
        events: EventSink | None,
        images_in_step: Callable[[int], int],
        steps: int,
        *,
        before_epoch: Callable[[int], None] = lambda epoch: None,
        after_epoch: Callable[[int], None] = lambda epoch: None,
    ) -> None:
        super().__init__()
        self._events = events
        self._images_in_step = images_in_step
        self._steps = steps
        self._before_epoch = before_epoch
        self._after_epoch = after_epoch
        self._last_progress = 0.0
        self._validation_start = 0.0
        self._validation_end = 0.0
        self.epochs: list[EpochRecord] = []

    def _emit(self, event: Event) -> None:
        if self._events is not None:  # replicas other than the first stay silent
            self._events.emit(event)

    def on_epoch_begin(self, epoch: int, logs: dict | None = None) -> None:
        self._before_epoch(epoch + 1)
        self._emit(EpochStarted(epoch=epoch + 1, steps=self._steps))
        self.epochs.append(EpochRecord(epoch=epoch + 1, t_start=self._epoch_start()))

    def _epoch_start(self) -> float:
        return time.monotonic()

    def _step_done(self, step: int, now: float) -> None:
        """Step `step` (0-based) of the current epoch ended at `now`."""
        record = self.epochs[-1]
        record.step_ends.append(now)
        record.step_images.append(self._images_in_step(step))

    def _progress(self, done: int) -> None:
        """Tell the agent how many steps of the epoch are done (about twice a second)."""
        now = time.monotonic()
        if now - self._last_progress >= PROGRESS_INTERVAL_SECONDS or done == self._steps:
            self._last_progress = now
            self._emit(Step(epoch=self.epochs[-1].epoch, step=done, steps=self._steps))

    def on_test_begin(self, logs: dict | None = None) -> None:
        self._validation_start = time.monotonic()

    def on_test_end(self, logs: dict | None = None) -> None:
        self._validation_end = time.monotonic()
        self.epochs[-1].validation_seconds = self._validation_end - self._validation_start

    def on_epoch_end(self, epoch: int, logs: dict | None = None) -> None:
        record = self.epochs[-1]
        record.t_end = time.monotonic()
        self._collect_steps(record)
        self._after_epoch(record.epoch)
        last_step = record.step_ends[-1] if record.step_ends else record.t_start
        record.train_seconds = last_step - record.t_start
        record.metrics = {k: float(v) for k, v in (logs or {}).items() if _is_number(v)}
        record.stats = step_stats(record.t_start, record.step_ends, record.step_images,
                                  label=f"epoch {record.epoch}: ")
        self._emit(EpochFinished(
            epoch=record.epoch,
            wall_seconds=round(record.wall_seconds, 6),
            train_seconds=round(record.train_seconds, 6),
            validation_seconds=round(record.validation_seconds, 6),
            loss=record.metrics.get("loss"),
            accuracy=record.metrics.get("accuracy"),
            val_loss=record.metrics.get("val_loss"),
            val_accuracy=record.metrics.get("val_accuracy"),
            t_start=record.t_start,
            t_end=record.t_end,
            steps=len(record.step_ends),
        ))

    def _collect_steps(self, record: EpochRecord) -> None:
        """Fill in the epoch's step ends if they are known only now."""


class HostTimedEpochs(EpochTimer):
    """Takes each step's end on the host, once Keras has the step's metrics."""

    def on_train_batch_end(self, batch: int, logs: dict | None = None) -> None:
        self._step_done(batch, time.monotonic())
        self._progress(batch + 1)


class DeviceTimedEpochs(EpochTimer):
    """Takes each step's end on the device with CUDA events (torch on a GPU).

    Defines no on_train_batch_end, so Keras need not wait for each step's metrics.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        import torch

        self._torch = torch
        self._anchor: tuple[Any, float] | None = None  # (a torch.cuda.Event, its time)
        self._marks: list[Any] = []  # torch.cuda.Event
        self._step_running = False  # a step began and no mark has ended it yet

    def _mark(self) -> None:
        event = self._torch.cuda.Event(enable_timing=True)
        event.record()
        self._marks.append(event)

    def _epoch_start(self) -> float:
        # The device is idle here (the last epoch ended with its metrics read
        # back): an event recorded now is timestamped at this monotonic time.
        self._torch.cuda.synchronize()
        started = time.monotonic()
        self._marks = []
        self._mark()
        self._anchor = (self._marks[0], started)
        return started

    def on_train_batch_begin(self, batch: int, logs: dict | None = None) -> None:
        if batch:
            self._mark()  # the device has finished step batch - 1 when it gets here
            self._progress(batch)
        self._step_running = True

    def on_test_begin(self, logs: dict | None = None) -> None:
        self._mark()  # the last training step's end
        self._step_running = False
        self._progress(self._steps)
        super().on_test_begin(logs)

    def _collect_steps(self, record: EpochRecord) -> None:
        if self._anchor is None:
            return
        if self._step_running:  # no validation pass marked the last step's end
            self._mark()
            self._step_running = False
        self._torch.cuda.synchronize()
        anchor, started = self._anchor
        for step, event in enumerate(self._marks[1:]):
            self._step_done(step, started + anchor.elapsed_time(event) / 1000)
        if record.validation_seconds:
            # Validation began on the device when the last training step ended.
            record.validation_seconds = self._validation_end - record.step_ends[-1]
        self._anchor = None


def epoch_timer(backend: str, on_gpu: bool, *args: Any, **kwargs: Any) -> EpochTimer:
    """The epoch timer for a run: on the device where the framework can time steps
    there (torch on a GPU: CUDA events), else on the host's clock."""
    if frameworks.get(backend).times_steps_on_device(on_gpu):
        return DeviceTimedEpochs(*args, **kwargs)
    return HostTimedEpochs(*args, **kwargs)


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and value == value  # NaN would break strict JSON
