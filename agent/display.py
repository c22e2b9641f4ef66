"""What the person at the terminal sees while a benchmark runs (rich, on stderr).

Live progress (model, epoch, step, power and memory from the sampler) where
stderr is a terminal; one line per milestone everywhere, so logs and CI output
show the run too.
"""

from __future__ import annotations

from collections.abc import Callable

from gpubench.agent.events import Event
from gpubench.agent.telemetry import Tick
from rich.console import Console
from rich.progress import BarColumn, Progress, ProgressColumn, Task, TextColumn, TimeElapsedColumn
from rich.text import Text

GIB = 1 << 30


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


class _LiveColumn(ProgressColumn):
    """Asks the sampler for its newest figures at every refresh."""

    def __init__(self, latest: Callable[[], Tick | None]) -> None:
        super().__init__()
        self._latest = latest

    def render(self, task: Task) -> Text:
        return Text(live_figures(self._latest()), style="cyan")


class _StepsColumn(ProgressColumn):
    """'12/14 steps' once the epoch's step count is known."""

    def render(self, task: Task) -> Text:
        if task.total is None:
            return Text("")
        return Text(f"{task.completed:.0f}/{task.total:.0f} steps")


class RunDisplay:
    """Progress of one `gpubench-agent run`."""

    def __init__(self, console: Console | None = None, *, quiet: bool = False) -> None:
        self.console = console or Console(stderr=True)
        self.quiet = quiet
        self._progress: Progress | None = None
        self._task: int | None = None
        self._model = ""
        self._epochs = 0

    def note(self, message: str, style: str = "") -> None:
        """One line, above the live progress."""
        if not self.quiet:
            self.console.print(message, style=style or None, highlight=False)

    def model_started(self, model: str, epochs: int, latest: Callable[[], Tick | None]) -> None:
        """A model's run begins: show a live line for it."""
        self._model, self._epochs = model, epochs
        if self.quiet:
            return
        self._progress = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(bar_width=30),
            _StepsColumn(),
            TimeElapsedColumn(),
            _LiveColumn(latest),
            console=self.console,
            transient=True,
        )
        self._progress.start()
        self._task = self._progress.add_task(f"{model}: starting", total=None)

    def _update(self, **fields: object) -> None:
        if self._progress is not None and self._task is not None:
            self._progress.update(self._task, **fields)  # type: ignore[arg-type]

    def event(self, event: Event) -> None:
        """Reflect one workload event."""
        model = self._model
        if event.kind == "started":
            batch = event.get("global_batch") or event.get("batch_per_gpu")
            what = f"batch {batch}" if batch else "searching the largest batch"
            self.note(f"{model}: {event.get('backend', '')} {event.get('backend_version', '')}, "
                      f"{event.get('image_size', '')} px, {what}")
            self._update(description=f"{model}: loading")
        elif event.kind == "batch_trial":
            fits = "fits" if event.get("fits") else "does not fit"
            self.note(f"{model}: batch {event.get('batch')} {fits}")
        elif event.kind == "batch_chosen":
            self.note(f"{model}: batch {event.get('batch')} chosen")
        elif event.kind == "epoch_started":
            self._update(
                description=f"{model} epoch {event.get('epoch')}/{self._epochs}",
                total=event.get("steps") or None,
                completed=0,
            )
        elif event.kind == "step":
            self._update(completed=event.get("step", 0), total=event.get("steps") or None)
        elif event.kind == "epoch_finished":
            seconds = float(event.get("wall_seconds", 0))
            self.note(f"{model} epoch {event.get('epoch')}: {seconds:.1f} s")
        elif event.kind == "warning":
            self.note(f"{model}: warning: {event.get('message')}", style="yellow")
        elif event.kind == "log" and event.get("message"):
            self.note(f"{model}: {event.get('message')}", style="dim")
        elif event.kind == "error":
            status = event.get("status", "error")
            self.note(f"{model}: {status}: {event.get('message')}", style="red")

    def model_finished(self) -> None:
        """The model's run ended: remove its live line."""
        if self._progress is not None:
            self._progress.stop()
            self._progress = None
            self._task = None
