"""The largest batch that trains without running out of memory (--batch auto).

Each trial is a fresh `python -m gpubench.agent.workload trial` process that
builds the model and trains a few steps at one batch size: TensorFlow cannot
recover from an out-of-memory error in-process, and a fresh process starts from
an empty allocator every time. The search doubles until a batch does not fit,
then bisects between the largest that fit and the smallest that did not, within
a budget of trials. Every trial is kept and reported.

No framework is imported here: the search runs before the run's own process
imports one, so it never holds GPU memory while its trials run.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

from gpubench.agent.events import parse_line
from gpubench.agent.workload.backend import is_out_of_memory
from gpubench.agent.workload.options import (
    EXIT_OUT_OF_MEMORY,
    STEP_SWITCHES,
    TORCH_KERNELS,
    RunSettings,
)

from gpubench.errors import GpubenchError

# Where doubling starts: small enough for an 8 GB card (the protocol's GTX 1070
# ran 60 / 16 / 1), large enough not to waste trials on a big one.
START_BATCH = {"B0": 32, "B3": 16, "B7": 4}
# Bisection stops once the gap between "fits" and "does not" is this share of
# the batch or less (1/8: within 12.5%).
GAP_SHARE = 8
TRIAL_TIMEOUT_SECONDS = 1200.0


@dataclass(frozen=True)
class Trial:
    """One batch size tried."""

    batch: int
    fits: bool
    peak_memory_bytes: int = 0
    seconds: float = 0.0
    message: str = ""

    def as_event(self) -> dict[str, object]:
        """The fields of a batch_trial event."""
        return {
            "batch": self.batch,
            "fits": self.fits,
            "peak_memory_bytes": self.peak_memory_bytes,
            "seconds": round(self.seconds, 3),
            "message": self.message,
        }


class NoBatchFits(GpubenchError):
    """Even the smallest batch tried ran out of memory."""

    exit_code = EXIT_OUT_OF_MEMORY


class TrialFailed(GpubenchError):
    """A trial failed for a reason other than memory: the search cannot go on."""


def search(
    try_batch: Callable[[int], Trial],
    *,
    start: int,
    largest: int,
    max_trials: int,
    on_trial: Callable[[Trial], None] = lambda trial: None,
) -> tuple[int, list[Trial]]:
    """The largest batch up to `largest` that fits, and every trial made to find it."""
    fits_up_to, fails_from = 0, None  # the largest batch that fit, the smallest that did not
    candidate = max(1, min(start, largest))
    trials: list[Trial] = []
    while len(trials) < max_trials:
        trial = try_batch(candidate)
        trials.append(trial)
        on_trial(trial)
        if trial.fits:
            fits_up_to = candidate
        else:
            fails_from = candidate
        if fails_from is None:
            if candidate >= largest:
                break
            candidate = min(candidate * 2, largest)
            continue
        if fails_from - fits_up_to <= max(1, fits_up_to // GAP_SHARE):
            break
        candidate = _between(fits_up_to, fails_from)
    if fits_up_to == 0:
        smallest = min(t.batch for t in trials)
        raise NoBatchFits(
            f"--batch auto: even batch {smallest} runs out of memory "
            f"({trials[-1].message or 'no message'})"
        )
    return fits_up_to, trials


def _between(low: int, high: int) -> int:
    """A batch between low (fits) and high (does not), a multiple of 8 when large."""
    middle = (low + high) // 2
    rounded = middle - middle % 8
    return rounded if middle >= 64 and rounded > low else middle


def trial_command(settings: RunSettings, batch: int) -> list[str]:
    """The command line of one trial process."""
    command = [
        sys.executable, "-m", "gpubench.agent.workload", "trial",
        "--model", settings.model,
        "--batch", str(batch),
        "--precision", settings.precision,
        "--backend", settings.backend,
        "--gpus", str(min(settings.gpus, 1)),
        "--image-size", str(settings.size),
        "--trial-steps", str(settings.trial_steps),
        "--seed", str(settings.seed),
    ] + [on if getattr(settings, name) else off
         for on, off, name in (*STEP_SWITCHES, *TORCH_KERNELS)]
    if settings.memory_limit_bytes:
        command += ["--memory-limit-bytes", str(settings.memory_limit_bytes)]
    return command


def run_trial(
    settings: RunSettings, batch: int, *, timeout: float = TRIAL_TIMEOUT_SECONDS
) -> Trial:
    """Run one trial process and read its verdict."""
    started = time.monotonic()
    try:
        done = subprocess.run(
            trial_command(settings, batch), capture_output=True, text=True, timeout=timeout,
            env=dict(os.environ), check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise TrialFailed(
            f"--batch auto: the trial at batch {batch} ran over {timeout:.0f} s"
        ) from exc
    seconds = time.monotonic() - started
    events = [e for e in map(parse_line, done.stdout.splitlines()) if e is not None]
    verdicts = [e for e in events if e.kind == "batch_trial"]
    if verdicts:
        found = verdicts[-1]
        return Trial(batch, bool(found.get("fits")), int(found.get("peak_memory_bytes") or 0),
                     seconds, str(found.get("message") or ""))
    errors = [str(e.get("message")) for e in events if e.kind == "error"]
    last_lines = errors[-1] if errors else " | ".join(done.stderr.strip().splitlines()[-3:])
    if done.returncode == -signal.SIGKILL:
        return Trial(batch, False, 0, seconds, "killed (SIGKILL), most likely out of memory")
    if is_out_of_memory(RuntimeError(done.stderr[-4000:])):
        return Trial(batch, False, 0, seconds, last_lines[-300:])
    raise TrialFailed(
        f"--batch auto: the trial at batch {batch} failed (exit {done.returncode}): "
        f"{last_lines[-500:]}"
    )
