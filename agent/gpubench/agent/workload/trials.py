"""Batch-size trials: train a few steps at one batch and say whether it fit and what it took.

Two ways to make them, one body of steps:

- `WarmTrials` (torch on a GPU): in this process, the network built once. An
  out-of-memory error is caught, the allocator's cache given back, and the next
  trial goes on: no process start, no framework import, no model build per trial.
- `ProcessTrials` (TensorFlow, JAX, the CPU, several GPUs): a fresh `trial`
  process per batch. TensorFlow cannot recover from an out-of-memory error in a
  process, and a fresh process leaves nothing of the trial behind.

A trial trains `trial_steps` steps at its batch (a probe and a confirm alike; the
kind says why it was made). Trials never replay CUDA graphs: a graph's
memory pool stays with the trial network (HEADROOM covers the run's graphs).
"""

from __future__ import annotations

import os
import signal
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, replace
from typing import Any

from gpubench.agent.workload import backend, error_text, frameworks
from gpubench.agent.workload.batch_search import Trial, TrialFailed
from gpubench.errors import GpubenchError
from gpubench.events import MESSAGE_LIMIT, BatchTrial, ErrorEvent, EventSink, parse_line
from gpubench.settings import (
    EXIT_OK,
    EXIT_OUT_OF_MEMORY,
    WORKLOAD_MODULE,
    RunSettings,
    arguments,
)

TRIAL_TIMEOUT_SECONDS = 1200.0


def warm_applies(settings: RunSettings) -> bool:
    """Whether trials can run in this process: one GPU, and a framework that goes on
    after an out-of-memory error (torch)."""
    return (frameworks.get(settings.backend).recovers_from_out_of_memory
            and settings.gpus == 1 and settings.devices == 1)


def use_trial_environment(settings: RunSettings) -> None:
    """Set the framework's trial environment (`Framework.trial_environment`) in this
    process, which makes trials only; before its first training step."""
    os.environ.update(frameworks.get(settings.backend).trial_environment())


def trial_settings(settings: RunSettings) -> RunSettings:
    """The run's settings as a trial computes them: one device, steps run eagerly."""
    return replace(settings, gpus=min(settings.gpus, 1), cuda_graphs=False, replicas_on_cpu=0)


class WarmTrials:
    """Trials in this process on one network, built on first use.

    The framework must be imported already (backend.select, backend.import_keras).
    The process makes trials only (the `search` and `trial` commands): the network
    and its memory go when it ends.
    """

    def __init__(self, settings: RunSettings) -> None:
        self.settings = trial_settings(settings)
        self._network: Any = None
        self._data: dict[int, tuple[Any, Any]] = {}
        self.build_seconds = 0.0  # building the trial network (in the first trial's time)

    def _prepare(self) -> Any:
        if self._network is None:
            import keras

            from gpubench.agent.workload.network import prepare_network

            began = time.monotonic()
            keras.utils.set_random_seed(self.settings.seed)
            self._network, _ = prepare_network(self.settings)
            self.build_seconds = time.monotonic() - began
        return self._network

    def identity(self) -> dict[str, Any]:
        """The model's identity (custom.identity; {} for an EfficientNet), its network
        built for the trials now: one gpubench cannot feed is refused here."""
        return dict(getattr(self._prepare(), "gpubench_identity", {}))

    def __call__(self, batch: int, kind: str) -> Trial:
        from gpubench.agent.workload import memory

        started = time.monotonic()
        settings = self.settings
        network = self._prepare()
        memory.start_trial(settings.backend, settings.gpus)
        message = ""
        try:
            step_seconds = self._steps(network, batch, settings.trial_steps)
        except Exception as exc:
            if isinstance(exc, GpubenchError) or not error_text.is_out_of_memory(exc):
                raise
            message = error_text.error_line(exc)[:MESSAGE_LIMIT] or "out of memory"
            step_seconds = 0.0
        # Outside the handler: the error's traceback no longer holds the step's tensors.
        found = memory.read_trial(settings.backend, settings.gpus,
                                  address_space_limit=settings.trial_address_space)
        if message:
            memory.release(settings.backend)
        return Trial(batch, not message, found.peak_bytes, found.reserved_bytes,
                     found.capacity_bytes, time.monotonic() - started, step_seconds, message,
                     kind)

    def _steps(self, network: Any, batch: int, steps: int) -> float:
        """Train `steps` steps at `batch`; the median time of those after the first.

        Only training: a validation step holds less than a training step, and each
        new shape costs seconds of kernel set-up on a GPU, so the epoch's other
        shapes (its short last batches, validation) are left to HEADROOM and, in the
        real run, to the run again at a smaller batch."""
        x, y = self._batch(batch, getattr(network, "gpubench_feeding", None))
        times = []
        for _ in range(steps):
            began = time.monotonic()
            network.train_on_batch(x, y)
            backend.synchronize(self.settings.backend)
            times.append(time.monotonic() - began)
        return statistics.median(times[1:]) if len(times) > 1 else 0.0

    def _batch(self, images: int, feeding: Any = None) -> tuple[Any, Any]:
        """Random uint8 images and one-hot labels of `images` (kept: trials repeat sizes);
        for a model other than the EfficientNets, samples as `feeding` makes them."""
        if feeding is not None and images not in self._data:
            from gpubench.agent.workload import custom

            self._data[images] = custom.samples(feeding, images, self.settings.seed + images)
        if images not in self._data:
            import numpy as np

            from gpubench.agent.workload import model as net

            rng = np.random.default_rng(self.settings.seed + images)
            pixels = rng.integers(0, 256, size=(images, *net.input_shape(self.settings.size)),
                                  dtype=np.uint8)
            labels = np.eye(3, dtype=np.float32)[rng.integers(0, 3, size=images)]
            self._data[images] = (pixels, labels)
        return self._data[images]


class ProcessTrials:
    """Each trial in a fresh `python -m gpubench.agent.workload trial` process."""

    def __init__(self, settings: RunSettings, *, timeout: float = TRIAL_TIMEOUT_SECONDS) -> None:
        self.settings = trial_settings(settings)
        self.timeout = timeout

    def command(self, batch: int, kind: str) -> list[str]:
        """The command line of one trial process."""
        return [sys.executable, "-m", WORKLOAD_MODULE, "trial", "--batch", str(batch),
                "--kind", kind, *arguments("trial", asdict(self.settings))]

    def __call__(self, batch: int, kind: str) -> Trial:
        started = time.monotonic()
        try:
            done = subprocess.run(
                self.command(batch, kind), capture_output=True, text=True, timeout=self.timeout,
                env=dict(os.environ), check=False,
            )
        except subprocess.TimeoutExpired as exc:
            raise TrialFailed(
                f"the batch search: the trial at batch {batch} ran over {self.timeout:.0f} s"
            ) from exc
        seconds = time.monotonic() - started
        events = [e for e in map(parse_line, done.stdout.splitlines()) if e is not None]
        verdicts = [e for e in events if isinstance(e, BatchTrial)]
        if verdicts:
            return replace(Trial.from_event(verdicts[-1]), seconds=seconds)
        errors = [e for e in events if isinstance(e, ErrorEvent)]
        last_lines = (errors[-1].message if errors
                      else " | ".join(done.stderr.strip().splitlines()[-3:]))
        if errors and errors[-1].status == "out_of_memory":
            return Trial(batch, False, seconds=seconds, kind=kind, message=last_lines[-300:])
        if done.returncode == -signal.SIGKILL:
            return Trial(batch, False, seconds=seconds, kind=kind,
                         message="killed (SIGKILL), most likely out of memory")
        if error_text.is_out_of_memory(RuntimeError(done.stderr[-4000:])):
            return Trial(batch, False, seconds=seconds, kind=kind, message=last_lines[-300:])
        raise TrialFailed(
            f"the batch search: the trial at batch {batch} failed (exit {done.returncode}): "
            f"{last_lines[-500:]}"
        )


def trial_main(settings: RunSettings, batch: int, kind: str, events: EventSink) -> int:
    """The `trial` command: one trial in this process, told as one batch_trial event."""
    from gpubench.agent.workload import memory
    from gpubench.agent.workload.failure import report_failure

    use_trial_environment(settings)
    try:
        if settings.trial_address_space:
            import resource

            # Tests cap the address space to make a CPU "run out of memory".
            resource.setrlimit(resource.RLIMIT_AS, (settings.trial_address_space,) * 2)
        backend.select(settings.backend, settings.gpus)
        backend.import_keras(memory_growth=not settings.memory_limit_bytes)
        if settings.memory_limit_bytes:
            memory.limit_memory(settings.backend, settings.gpus, settings.memory_limit_bytes)
        backend.check_gpus(settings.backend, settings.gpus)
        trial = WarmTrials(settings)(batch, kind)
    except Exception as exc:
        return report_failure(events, exc)
    # The address space's peak too: what --trial-address-space caps (tests calibrate it).
    events.emit(replace(trial.as_event(),
                        address_space_peak_bytes=memory.address_space_peak_bytes()))
    return EXIT_OK if trial.fits else EXIT_OUT_OF_MEMORY
