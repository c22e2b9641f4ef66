"""JAX's persistent compilation cache: where a run keeps its XLA programs, and how many
it compiled or loaded from there.

Keras on JAX compiles its training and validation steps with XLA in epoch 1: minutes for
an EfficientNet on a GPU, every run (docs/results/h200-jax.md). JAX can keep each program
it compiles in a folder and load it the next time the same program is asked for, on the
same kind of device with the same software. `environment` says where (the agent's cache
folder, `$GPUBENCH_CACHE/jax-compilation`) and keeps every program, however small or
quick to compile; a person's own JAX_COMPILATION_CACHE_DIR, or any of these variables,
wins, and JAX_ENABLE_COMPILATION_CACHE=false turns the cache off. Where the cache is on,
JAX keeps XLA's per-fusion autotuning results (GPU) in the same folder itself
(jax_persistent_cache_enable_xla_caches).

`ProgramLog` listens to JAX's monitoring events and counts the programs the run needed:
compiled, or loaded from the cache. Imports no framework: the JAX framework (frameworks/
jax.py) registers it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from gpubench.events import XlaPrograms

FOLDER = "jax-compilation"  # under the agent's cache folder (synthetic.cache_root)

# jax.monitoring's events (jax/_src/dispatch.py, compiler.py): a program obtained,
# compiled or loaded (a duration, once a program), and one loaded from the cache.
PROGRAM_EVENT = "/jax/core/compile/backend_compile_duration"
CACHE_HIT_EVENT = "/jax/compilation_cache/cache_hits"


def environment(cache_root: Path, environ: Mapping[str, str]) -> dict[str, str]:
    """The variables JAX reads at import that put its persistent compilation cache in
    `cache_root`/jax-compilation and keep every program in it; those already set in
    `environ` are left out (the person's own win)."""
    wanted = {
        "JAX_COMPILATION_CACHE_DIR": str(cache_root / FOLDER),
        # JAX keeps by default only programs that took a second or more to compile; the
        # training step's are minutes, but every program of a run is kept so that a run
        # whose cache is warm compiles nothing.
        "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
        # -1: no smallest size, and none chosen by JAX for the file system.
        "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "-1",
    }
    return {name: value for name, value in wanted.items() if name not in environ}


class ProgramLog:
    """The XLA programs a process obtained, each compiled or loaded from the cache, and
    when each was ready (time.monotonic()). Register `on_event` and `on_duration` with
    jax.monitoring before the first compilation; `cache_on` says whether the persistent
    cache is on (JAX's configuration, read when the totals are)."""

    def __init__(self, cache_on: Callable[[], bool]) -> None:
        self._cache_on = cache_on
        self._lock = threading.Lock()  # JAX may compile in more than one thread
        self._ready: list[float] = []  # when each program was ready
        self._loaded = 0
        self._seconds = 0.0

    def on_event(self, event: str, **metadata: str | int) -> None:
        """jax.monitoring's event listener."""
        if event == CACHE_HIT_EVENT:
            with self._lock:
                self._loaded += 1

    def on_duration(self, event: str, duration: float, **metadata: str | int) -> None:
        """jax.monitoring's duration listener."""
        if event == PROGRAM_EVENT:
            with self._lock:
                self._ready.append(time.monotonic())
                self._seconds += duration

    def totals(self) -> XlaPrograms:
        """What the process needed so far (the record's XlaPrograms)."""
        with self._lock:
            programs, loaded, seconds = len(self._ready), self._loaded, self._seconds
        # Every program loaded from the cache was also one obtained (PROGRAM_EVENT wraps
        # the cache's look-up); max() keeps a JAX that renamed an event from going below 0.
        return XlaPrograms(compiled=max(0, programs - loaded), loaded=loaded,
                           seconds=round(seconds, 3), cache=self._cache_on())

    def epoch_warning(self, epoch: int, start: float, end: float) -> str | None:
        """A warning where `epoch` (from `start` to `end`, time.monotonic()) waited for
        XLA programs: its time then holds XLA's work, not only the training's. None where
        it did not (every batch shape, the short last ones too, is compiled in epoch 1)."""
        with self._lock:
            late = sum(1 for ready in self._ready if start <= ready <= end)
        if not late:
            return None
        return (f"epoch {epoch} compiled or loaded {late} XLA program(s): its time "
                "includes XLA's work, not only the training's")

