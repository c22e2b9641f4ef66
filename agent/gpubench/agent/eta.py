"""How long the rest of a `gpubench-agent run` will take: the suite line's "about N min left".

An estimate from what the run has measured so far, refined as it goes:

- a model's epoch: from its own epochs once one has ended; before that from the
  training steps of its epoch under way (after STEPS_TIMED of them, the first left out:
  it carries the framework's set-up), or from its batch trials (a trial's step time per
  image); before that from the models already run, scaled by RELATIVE_IMAGE_COST;
- the time a model spends outside its epochs (process start, batch search, model
  build, the first steps' set-up): what the models already run spent, or
  FIRST_OVERHEAD_SECONDS before any has finished.

No figure is shown until something of this host has been measured.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gpubench import figures, record

# Training time per image relative to B0, from the H200's float32 runs with CUDA
# graphs (docs/results/h200.md: B0 2,637 img/s, B7 75 img/s; B3 from the bfloat16
# pair, 3,898 against 1,246 img/s). Larger cards and smaller ones differ; the
# estimate replaces the ratio by each model's own trials as soon as they end.
RELATIVE_IMAGE_COST = {"B0": 1.0, "B3": 3.1, "B7": 35.0}
# A model's time outside its epochs before any model has finished.
FIRST_OVERHEAD_SECONDS = 40.0
# Validation images cost about a third of a training image (no backward pass).
VALIDATION_SHARE = 1 / 3
# Steps of an epoch timed, after its first, before they give the epoch's length.
STEPS_TIMED = 2


@dataclass
class _Model:
    name: str
    started: float | None = None
    ended: float | None = None
    image_seconds: float | None = None  # training seconds per image, measured
    epoch_seconds: list[float] = field(default_factory=list)
    # The epoch under way: its training steps, how many have ended, when the first did.
    steps: int = 0
    steps_done: int = 0
    first_step_at: float | None = None


class SuiteClock:
    """Where a suite of models is and about how long is left."""

    def __init__(self, models: list[str], epochs: int,
                 train_images: int = record.STANDARD_TRAIN_IMAGES,
                 validation_images: int = 427) -> None:
        self.models = [_Model(name) for name in models]
        self.epochs = epochs
        self.train_images = train_images
        self.images = train_images + VALIDATION_SHARE * validation_images
        self.index = -1

    @property
    def current(self) -> _Model | None:
        """The model running now, if any."""
        return self.models[self.index] if 0 <= self.index < len(self.models) else None

    def model_started(self, index: int, now: float) -> None:
        """Model `index` (0-based) starts at `now` (monotonic seconds)."""
        self.index = index
        self.models[index].started = now

    def trial(self, batch: int, step_seconds: float) -> None:
        """A batch trial of the current model ended with this training step time."""
        model = self.current
        if model is not None and batch > 0 and step_seconds > 0 and not model.epoch_seconds:
            model.image_seconds = step_seconds / batch

    def epoch_started(self, steps: int) -> None:
        """An epoch of the current model starts: `steps` training steps (0: not said)."""
        model = self.current
        if model is not None:
            model.steps, model.steps_done, model.first_step_at = max(0, steps), 0, None

    def step(self, step: int, now: float) -> None:
        """Training step `step` (1-based) of the current epoch ended at `now`. Before any
        epoch has ended, the steps after the first time the epoch."""
        model = self.current
        if model is None or not model.steps:
            return
        model.steps_done = step
        if step <= 1 or model.first_step_at is None:
            model.first_step_at = now
            return
        timed = step - 1
        if timed >= STEPS_TIMED and not model.epoch_seconds:
            train_seconds = (now - model.first_step_at) / timed * model.steps
            model.image_seconds = train_seconds / self.train_images

    def epoch(self, wall_seconds: float) -> None:
        """An epoch of the current model ended."""
        model = self.current
        if model is not None:
            model.epoch_seconds.append(wall_seconds)
            model.image_seconds = min(wall_seconds for wall_seconds in model.epoch_seconds
                                      ) / self.images
            model.steps = model.steps_done = 0

    def model_finished(self, now: float) -> None:
        """The current model ended at `now`."""
        if self.current is not None:
            self.current.ended = now

    def _image_seconds(self, model: _Model) -> float | None:
        if model.image_seconds:
            return model.image_seconds
        known = [m for m in self.models if m.image_seconds]
        if not known:
            return None
        base = known[-1]
        cost = RELATIVE_IMAGE_COST.get(model.name, 1.0) / RELATIVE_IMAGE_COST.get(base.name, 1.0)
        return base.image_seconds * cost  # type: ignore[operator]

    def _overhead(self) -> float:
        spent = []
        for model in self.models:
            if model.started is not None and model.ended is not None and model.epoch_seconds:
                spent.append(max(0.0, model.ended - model.started - sum(model.epoch_seconds)))
        return sum(spent) / len(spent) if spent else FIRST_OVERHEAD_SECONDS

    def seconds_left(self, now: float) -> float | None:
        """About how many seconds the suite has left, or None before anything of this
        host was measured."""
        if self.index < 0:
            return None
        overhead = self._overhead()
        total = 0.0
        for i, model in enumerate(self.models):
            if i < self.index or model.ended is not None:
                continue
            image_seconds = self._image_seconds(model)
            if image_seconds is None:
                return None
            epoch = image_seconds * self.images
            if i == self.index and model.started is not None:
                done = len(model.epoch_seconds)
                elapsed = now - model.started - sum(model.epoch_seconds)
                outside = max(0.0, overhead - elapsed) if done == 0 else 0.0
                under_way = model.steps_done / model.steps if model.steps else 0.0
                total += outside + max(0.0, self.epochs - done - under_way) * epoch
            else:
                total += overhead + self.epochs * epoch
        return total

    def describe(self, now: float) -> str:
        """'model 2 of 3 (B3), about 2 min left' (no time before there is an estimate);
        for a run of one model only the time: 'about 6 min left'."""
        model = self.current
        if model is None:
            return ""
        where = f"model {self.index + 1} of {len(self.models)} ({model.name})"
        left = self.seconds_left(now)
        if left is None:
            return where if len(self.models) > 1 else ""
        about = f"about {figures.rough_duration(left)} left"
        return f"{where}, {about}" if len(self.models) > 1 else about
