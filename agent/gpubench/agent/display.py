"""What the person at the terminal sees while a benchmark runs (rich, on stderr).

Live progress (model, epoch, step, power and memory from the sampler) where
stderr is a terminal; one line per milestone everywhere, so logs and CI output
show the run too, and where stderr is not a terminal (a log, `make demo` piped) a
line every half minute of a long step, so that a silent minute never looks hung.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from rich.console import Console
from rich.progress import BarColumn, Progress, ProgressColumn, Task, TextColumn, TimeElapsedColumn
from rich.text import Text

from gpubench import figures
from gpubench.agent.eta import SuiteClock
from gpubench.agent.signals_main import threads_leave_signals
from gpubench.agent.telemetry import Tick
from gpubench.events import (
    BatchChosen,
    BatchTrial,
    EpochFinished,
    EpochStarted,
    Event,
    LogEvent,
    Phase,
    Result,
    Started,
    Step,
    WarningEvent,
    XlaPrograms,
)

GIB = 1 << 30
# Seconds between "still ..." lines where stderr is not a terminal.
HEARTBEAT_S = 30.0


def live_figures(tick: Tick | None) -> str:
    """'412 W · 18.3 GiB': power of the run's GPUs and the workload's memory, now."""
    if tick is None or not tick.gpus:
        return ""
    parts = []
    power = [s.power_watts for s in tick.gpus if s.power_watts is not None]
    if power:
        parts.append(f"{sum(power):.0f} W")
    held = [m for m in tick.workload_memory if m is not None]
    if held and sum(held):
        parts.append(f"{sum(held) / GIB:.1f} GiB")
    else:
        used = [s.memory_used_bytes for s in tick.gpus if s.memory_used_bytes is not None]
        if used:
            parts.append(f"{sum(used) / GIB:.1f} GiB on the GPU")
    temperature = [s.temperature_c for s in tick.gpus if s.temperature_c is not None]
    if temperature:
        parts.append(f"{max(temperature):.0f} C")
    return " · ".join(parts)


def fed_with(image_size: int, input_spec: str) -> str:
    """What a model is fed, in a few words: "224 px" for photos, else how it is fed
    ("tokens 1024 of 50257"), never "0 px"."""
    return f"{image_size} px" if image_size else (input_spec or "no images")


def xla_words(programs: XlaPrograms) -> str:
    """A JAX run's XLA programs in a few words: "XLA: 3 programs compiled, 12 from the
    cache (4.1 s)", or "... compiled in 95.2 s (no compilation cache)"."""
    compiled = f"XLA: {programs.compiled} program{'' if programs.compiled == 1 else 's'} compiled"
    if not programs.cache:
        return f"{compiled} in {programs.seconds:.1f} s (no compilation cache)"
    return f"{compiled}, {programs.loaded} from the cache ({programs.seconds:.1f} s)"


class _LiveColumn(ProgressColumn):
    """Asks the sampler for its newest figures at every refresh (the model's row)."""

    def __init__(self, latest: Callable[[], Tick | None]) -> None:
        super().__init__()
        self._latest = latest

    def render(self, task: Task) -> Text:
        if not task.fields.get("live"):
            return Text("")
        return Text(live_figures(self._latest()), style="cyan")


class _StepsColumn(ProgressColumn):
    """'12/14 steps' once the epoch's step count is known."""

    def render(self, task: Task) -> Text:
        if task.total is None or not task.fields.get("live"):
            return Text("")
        return Text(f"{task.completed:.0f}/{task.total:.0f} steps")


class _SuiteColumn(ProgressColumn):
    """The suite's row: where it is and about how long is left, computed at each refresh."""

    def __init__(self, clock: Callable[[], SuiteClock | None]) -> None:
        super().__init__()
        self._clock = clock

    def render(self, task: Task) -> Text:
        clock = self._clock()
        if task.fields.get("live") or clock is None:
            return Text("")
        return Text(clock.describe(time.monotonic()), style="bold")


class RunDisplay:
    """Progress of one `gpubench-agent run`: a row for the suite of models (where it
    is, about how long is left) and one for the running model (its phase or epoch,
    steps, elapsed time, power and memory)."""

    def __init__(self, console: Console | None = None, *, quiet: bool = False,
                 heartbeat_s: float = HEARTBEAT_S) -> None:
        self.console = console or Console(stderr=True)
        self.quiet = quiet
        self.clock: SuiteClock | None = None
        self._progress: Progress | None = None
        self._task: int | None = None
        self._model = ""
        self._epochs = 0
        # Without a live display: what the model is doing, since when, said again every
        # heartbeat_s by a thread while nothing else is printed.
        self.heartbeat_s = heartbeat_s
        self._doing = self._step = ""
        self._last_line = time.monotonic()
        self._started = time.monotonic()
        self._stop_heartbeat: threading.Event | None = None

    def note(self, message: str, style: str = "") -> None:
        """One line, above the live progress."""
        if not self.quiet:
            self._last_line = time.monotonic()
            # The text as it is: a message quoting "[torch]" or a path is not markup.
            self.console.print(message, style=style or None, highlight=False, markup=False)

    def _heartbeat(self, stop: threading.Event) -> None:
        """Say what the model is doing when nothing was printed for heartbeat_s."""
        while not stop.wait(self.heartbeat_s / 4):
            now = time.monotonic()
            if self._doing and now - self._last_line >= self.heartbeat_s:
                left = self.clock.seconds_left(now) if self.clock is not None else None
                self.note(f"{self._doing}{self._step}: still running, "
                          f"{now - self._started:.0f} s since {self._model} started"
                          + (f"; about {figures.rough_duration(left)} left" if left is not None
                             else ""), style="dim")

    def suite_started(self, models: list[str], epochs: int) -> None:
        """The run's models, in order: the suite row follows them."""
        self.clock = SuiteClock(models, epochs)

    def model_started(self, model: str, epochs: int, latest: Callable[[], Tick | None],
                      index: int | None = None) -> None:
        """A model's run begins (the `index`-th of the suite, 0-based): show its rows."""
        self._model, self._epochs = model, epochs
        if self.clock is None:
            self.clock = SuiteClock([model], epochs)
        self.clock.model_started(index if index is not None else 0, time.monotonic())
        if self.quiet:
            return
        self._started = self._last_line = time.monotonic()
        self._doing = f"{model}: starting"
        if not self.console.is_terminal:
            # No live rows where they cannot be redrawn (rich would end them with an
            # empty line): a line every heartbeat instead.
            self._stop_heartbeat = threading.Event()
            with threads_leave_signals():
                threading.Thread(target=self._heartbeat, args=(self._stop_heartbeat,),
                                 name="display-heartbeat", daemon=True).start()
            return
        self._progress = Progress(
            _SuiteColumn(lambda: self.clock),
            TextColumn("[bold]{task.description}"),
            BarColumn(bar_width=20),
            _StepsColumn(),
            TimeElapsedColumn(),
            _LiveColumn(latest),
            console=self.console,
            transient=True,
        )
        with threads_leave_signals():  # its refresh thread
            self._progress.start()
        self._progress.add_task("", total=None, live=False)  # the suite: time left
        self._task = self._progress.add_task(f"{model}: starting", total=None, live=True)

    def _update(self, **fields: object) -> None:
        if isinstance(fields.get("description"), str):
            self._doing, self._step = str(fields["description"]), ""
        if self._progress is not None and self._task is not None:
            self._progress.update(self._task, **fields)  # type: ignore[arg-type]

    def event(self, event: Event) -> None:
        """Reflect one workload event."""
        model = self._model
        if isinstance(event, Started):
            batch = event.global_batch or event.batch_per_gpu
            self.note(f"{model}: {event.backend} {event.backend_version}, "
                      f"{fed_with(event.image_size, event.input_spec)}, batch {batch}")
            self._update(description=f"{model}: loading the images")
        elif isinstance(event, Phase):
            self._phase(event)
        elif isinstance(event, BatchTrial):
            self._trial(event)
        elif isinstance(event, BatchChosen):
            self._chosen(event)
        elif isinstance(event, EpochStarted):
            epoch = event.epoch
            if self.clock is not None:
                self.clock.epoch_started(event.steps)
            self._update(
                description=f"{model} epoch {epoch}/{self._epochs}"
                + (" (set-up)" if epoch == 1 else ""),
                total=event.steps or None,
                completed=0,
            )
        elif isinstance(event, Step):
            if self.clock is not None:
                self.clock.step(event.step, time.monotonic())
            self._update(completed=event.step, total=event.steps or None)
            if event.steps:
                self._step = f", step {event.step}/{event.steps}"
        elif isinstance(event, EpochFinished):
            if self.clock is not None:
                self.clock.epoch(event.wall_seconds)
            self.note(f"{model} epoch {event.epoch}: {event.wall_seconds:.1f} s")
        elif isinstance(event, WarningEvent):
            self.note(f"{model}: warning: {event.message}", style="yellow")
        elif isinstance(event, LogEvent) and event.message:
            self.note(f"{model}: {event.message}", style="dim")
        elif isinstance(event, Result) and event.xla_programs is not None:
            self.note(f"{model}: {xla_words(event.xla_programs)}", style="dim")
        # An ErrorEvent is said once, by whoever ends the model: the run's status line
        # ("B0: error (...); saved ...") or, for a refusal, the agent's own error.

    def _phase(self, event: Phase) -> None:
        model, phase = self._model, event.phase
        message = event.message or phase
        self.note(f"{model}: {message}", style="dim")
        short = {"search": "searching the batch", "build": "building the model",
                 "first_step": "first steps (set-up)"}.get(phase, phase)
        self._update(description=f"{model}: {short}")

    def _trial(self, event: BatchTrial) -> None:
        model = self._model
        batch = event.batch
        if self.clock is not None:
            self.clock.trial(batch, event.step_seconds)
        verdict = "fits" if event.fits else "does not fit"
        used = event.reserved_peak_bytes or event.peak_memory_bytes
        figure = f" ({used / GIB:.1f} GiB)" if used and event.fits else ""
        self.note(f"{model}: {event.trial_kind or 'trial'} batch {batch} {verdict}{figure}, "
                  f"{event.seconds:.0f} s")
        self._update(description=f"{model}: trial {batch}")

    def _chosen(self, event: BatchChosen) -> None:
        search = event.search
        capped = "+ (every image)" if search.capped else ""
        self.note(f"{self._model}: fits batch {search.largest}{capped}; timed at {event.batch} "
                  f"(search {search.search_seconds:.0f} s)")

    def model_finished(self) -> None:
        """The model's run ended: remove its rows."""
        if self.clock is not None:
            self.clock.model_finished(time.monotonic())
        self._doing = ""
        if self._stop_heartbeat is not None:
            self._stop_heartbeat.set()
            self._stop_heartbeat = None
        if self._progress is not None:
            self._progress.stop()
            self._progress = None
            self._task = None
