"""A Keras callback that times every epoch and step and reports them as events.

Timestamps are time.monotonic(), the clock of the event stream and of the
agent's GPU sampler. A step's end is taken in on_train_batch_end, which Keras
calls after it has turned the step's loss and accuracy into Python numbers: that
waits for the GPU to finish the step, so the times are the device's, not the
moment the work was queued. Validation is timed from on_test_begin to on_test_end.

Imports Keras: import this module only after the backend has been selected.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import keras
from gpubench.agent.events import EventWriter
from gpubench.agent.workload.measure import StepStats, step_stats

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
    and reads the memory peaks around the measured epoch there).
    """

    def __init__(
        self,
        events: EventWriter | None,
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
        self.epochs: list[EpochRecord] = []

    def _emit(self, kind: str, **fields: object) -> None:
        if self._events is not None:  # replicas other than the first stay silent
            self._events.emit(kind, **fields)

    def on_epoch_begin(self, epoch: int, logs: dict | None = None) -> None:
        self._before_epoch(epoch + 1)
        self._emit("epoch_started", epoch=epoch + 1, steps=self._steps)
        self.epochs.append(EpochRecord(epoch=epoch + 1, t_start=time.monotonic()))

    def on_train_batch_end(self, batch: int, logs: dict | None = None) -> None:
        now = time.monotonic()
        record = self.epochs[-1]
        record.step_ends.append(now)
        record.step_images.append(self._images_in_step(batch))
        if now - self._last_progress >= PROGRESS_INTERVAL_SECONDS or batch + 1 == self._steps:
            self._last_progress = now
            self._emit("step", epoch=record.epoch, step=batch + 1, steps=self._steps)

    def on_test_begin(self, logs: dict | None = None) -> None:
        self._validation_start = time.monotonic()

    def on_test_end(self, logs: dict | None = None) -> None:
        self.epochs[-1].validation_seconds = time.monotonic() - self._validation_start

    def on_epoch_end(self, epoch: int, logs: dict | None = None) -> None:
        record = self.epochs[-1]
        record.t_end = time.monotonic()
        self._after_epoch(record.epoch)
        last_step = record.step_ends[-1] if record.step_ends else record.t_start
        record.train_seconds = last_step - record.t_start
        record.metrics = {k: float(v) for k, v in (logs or {}).items() if _is_number(v)}
        record.stats = step_stats(record.t_start, record.step_ends, record.step_images,
                                  label=f"epoch {record.epoch}: ")
        self._emit(
            "epoch_finished",
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
            **record.stats.as_event(),
        )


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and value == value  # NaN would break strict JSON
