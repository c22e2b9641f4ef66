"""GPU telemetry while the workload runs: a background sampler and per-epoch figures.

The sampler reads every GPU of the run through `Nvml` at a fixed rate on
time.monotonic(), the clock the workload's events carry, so an epoch's samples
are those between its `t_start` and `t_end`. `aggregate` turns the samples of a
window into the epoch's figures; it is plain arithmetic on recorded values, so
it is tested on hand-made samples.

Energy: the driver's total-energy counter where every GPU has one (interpolated
at the window's edges), otherwise the time integral of sampled power
(trapezoids, with power interpolated at the edges). The mean power is that energy
over the window's time. The maximum is the highest power sampled, unless no sample
read as high as the mean: NVML's power readings are the driver's average over up to a
second, so over a short epoch they trail the counter (an H100's 0.8 s B0 epoch: a
mean of 437 W from the counter, no reading over 390 W); the maximum is then the
mean, and `max_power_source` says which.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from typing import IO, Any, cast

from gpubench.agent.nvml import GpuSample, Nvml, throttle_names
from gpubench.agent.signals_main import threads_leave_signals

DEFAULT_SAMPLE_HZ = 10.0

# Throttle reasons that say nothing about the run's speed: the GPU reports
# "idle" between steps and before the first one.
IGNORED_THROTTLE_REASONS = frozenset({"gpu_idle"})


@dataclass(frozen=True)
class Tick:
    """One round of samples: every GPU of the run, and the workload's memory on each."""

    t: float
    gpus: tuple[GpuSample, ...]
    # Memory the workload's processes held on each GPU (same order as `gpus`);
    # None where NVML did not report process memory.
    workload_memory: tuple[int | None, ...] = ()


def workload_memory(sample: GpuSample, pids: Collection[int]) -> int | None:
    """Bytes the given processes hold on the sample's GPU (None if not reported)."""
    if "processes" in sample.missing:
        return None
    used = [sample.processes.get(pid) for pid in pids if pid in sample.processes]
    if any(value is None for value in used):
        return None
    return sum(value for value in used if value is not None)


# --- aggregation --------------------------------------------------------------------


@dataclass(frozen=True)
class WindowTelemetry:
    """What the GPUs did during one window (an epoch): all GPUs of the run together."""

    samples: int = 0  # ticks inside the window
    energy_joules: float = 0.0
    energy_source: str = ""  # "counter", "power-integral", or "" when not measured
    mean_power_watts: float = 0.0
    max_power_watts: float = 0.0
    # "samples" (the highest power sampled), "mean" (no sample read as high as the
    # mean: the maximum is the mean), or "" when no power was measured.
    max_power_source: str = ""
    max_temperature_c: float = 0.0
    mean_sm_clock_mhz: float = 0.0
    mean_gpu_utilization: float = 0.0
    throttle_reasons: tuple[str, ...] = ()
    process_peak_bytes: dict[int, int] = field(default_factory=dict)  # GPU index -> bytes
    device_peak_bytes: dict[int, int] = field(default_factory=dict)  # GPU index -> bytes


def _interpolate(points: Sequence[tuple[float, float]], t: float) -> float:
    # Linear between neighbours; held constant outside the sampled span.
    if t <= points[0][0]:
        return points[0][1]
    if t >= points[-1][0]:
        return points[-1][1]
    for (t0, v0), (t1, v1) in zip(points, points[1:], strict=False):
        if t0 <= t <= t1:
            return v0 if t1 == t0 else v0 + (v1 - v0) * (t - t0) / (t1 - t0)
    return points[-1][1]  # pragma: no cover - the span checks above cover every t


def integrate(points: Sequence[tuple[float, float]], t_start: float, t_end: float) -> float:
    """The trapezoid integral of sampled values over [t_start, t_end]."""
    if not points or t_end <= t_start:
        return 0.0
    inner = [(t, v) for t, v in points if t_start < t < t_end]
    edge = [(t_start, _interpolate(points, t_start)), *inner, (t_end, _interpolate(points, t_end))]
    pairs = zip(edge, edge[1:], strict=False)
    return sum((t1 - t0) * (v0 + v1) / 2 for (t0, v0), (t1, v1) in pairs)


def counter_delta(
    points: Sequence[tuple[float, float]], t_start: float, t_end: float
) -> float | None:
    """How much a cumulative counter grew over [t_start, t_end]; None if it went back."""
    if not points:
        return None
    if any(v1 < v0 for (_, v0), (_, v1) in zip(points, points[1:], strict=False)):
        return None  # reset or wrapped: the counter cannot be trusted here
    return _interpolate(points, t_end) - _interpolate(points, t_start)


def _power_integral(series: Sequence[GpuSample], t_start: float, t_end: float) -> float | None:
    power = [(s.t, s.power_watts) for s in series if s.power_watts is not None]
    return integrate(power, t_start, t_end) if power else None


def _counter_energy(series: Sequence[GpuSample], t_start: float, t_end: float) -> float | None:
    counter = [(s.t, float(s.energy_millijoules or 0)) for s in series]
    if not series or any(s.energy_millijoules is None for s in series):
        return None
    delta = counter_delta(counter, t_start, t_end)
    return None if delta is None else delta / 1000.0


def aggregate(ticks: Sequence[Tick], t_start: float, t_end: float) -> WindowTelemetry:
    """The figures of the window [t_start, t_end] (monotonic seconds) from `ticks`."""
    if not ticks or not ticks[0].gpus or t_end <= t_start:
        return WindowTelemetry()
    # Each GPU's series, with the samples just outside the window kept so that
    # the counter and power can be interpolated at its edges.
    gpu_count = len(ticks[0].gpus)
    before = max((i for i, tick in enumerate(ticks) if tick.t <= t_start), default=0)
    after = min((i for i, tick in enumerate(ticks) if tick.t >= t_end), default=len(ticks) - 1)
    span = ticks[before : after + 1]
    inside = [tick for tick in ticks if t_start <= tick.t <= t_end]

    series = [[tick.gpus[i] for tick in span] for i in range(gpu_count)]
    # One method for every GPU of the run: the counter only where all have one.
    counters = [_counter_energy(gpu, t_start, t_end) for gpu in series]
    integrals = [_power_integral(gpu, t_start, t_end) for gpu in series]
    if all(value is not None for value in counters):
        energy, source = sum(v for v in counters if v is not None), "counter"
    elif all(value is not None for value in integrals):
        energy, source = sum(v for v in integrals if v is not None), "power-integral"
    else:
        energy, source = 0.0, ""

    samples = [sample for tick in inside for sample in tick.gpus]

    def values(name: str) -> list[float]:
        return [getattr(s, name) for s in samples if getattr(s, name) is not None]

    tick_power = [
        sum(cast(float, s.power_watts) for s in tick.gpus)  # none is None (below)
        for tick in inside
        if all(s.power_watts is not None for s in tick.gpus)
    ]
    reasons: set[str] = set()
    for mask in values("throttle_reasons"):
        reasons.update(throttle_names(int(mask)))
    process_peak: dict[int, int] = {}
    device_peak: dict[int, int] = {}
    for tick in inside:
        for position, sample in enumerate(tick.gpus):
            held = tick.workload_memory[position] if position < len(tick.workload_memory) else None
            if held is not None:
                process_peak[sample.index] = max(process_peak.get(sample.index, 0), held)
            if sample.memory_used_bytes is not None:
                device_peak[sample.index] = max(
                    device_peak.get(sample.index, 0), sample.memory_used_bytes
                )

    def mean(items: list[float]) -> float:
        return sum(items) / len(items) if items else 0.0

    mean_power = energy / (t_end - t_start) if source else 0.0
    sampled = max(tick_power, default=0.0)
    # A maximum under the mean is no maximum: the readings trail a short epoch (above).
    highest = "mean" if mean_power > sampled else ("samples" if tick_power else "")
    return WindowTelemetry(
        samples=len(inside),
        energy_joules=energy,
        energy_source=source,
        mean_power_watts=mean_power,
        max_power_watts=max(sampled, mean_power),
        max_power_source=highest,
        max_temperature_c=max(values("temperature_c"), default=0.0),
        mean_sm_clock_mhz=mean(values("sm_clock_mhz")),
        mean_gpu_utilization=mean(values("gpu_utilization")),
        throttle_reasons=tuple(sorted(reasons - IGNORED_THROTTLE_REASONS)),
        process_peak_bytes=process_peak,
        device_peak_bytes=device_peak,
    )


# --- the sampler ----------------------------------------------------------------------


class Sampler:
    """Samples the run's GPUs on a background thread at `hz`, on time.monotonic().

    `workload_pids` says which processes are the workload's at the moment (it
    is asked every tick: batch-search trials come and go). With `trace`, every
    sample is also written there as a JSON line, with `trace_fields` added.
    """

    def __init__(
        self,
        nvml: Nvml,
        gpu_indices: Sequence[int],
        *,
        hz: float = DEFAULT_SAMPLE_HZ,
        workload_pids: Callable[[], Collection[int]] = frozenset,
        trace: IO[str] | None = None,
        trace_fields: dict[str, Any] | None = None,
    ) -> None:
        if hz <= 0:
            raise ValueError(f"sample rate must be positive, not {hz}")
        self._nvml = nvml
        self._indices = tuple(gpu_indices)
        self._period = 1.0 / hz
        self._pids = workload_pids
        self._trace = trace
        self._trace_fields = dict(trace_fields or {})
        self._ticks: list[Tick] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.error: str = ""  # why sampling stopped early, if it did

    def start(self) -> Sampler:
        """Start sampling (returns self)."""
        if self._indices:
            self._thread = threading.Thread(target=self._run, name="gpu-sampler", daemon=True)
            with threads_leave_signals():
                self._thread.start()
        return self

    def stop(self) -> None:
        """Stop sampling and wait for the thread."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        if self._trace is not None:
            self._trace.flush()

    def __enter__(self) -> Sampler:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def ticks(self) -> list[Tick]:
        """The ticks so far (a copy)."""
        return list(self._ticks)

    def latest(self) -> Tick | None:
        """The newest tick, for live progress."""
        return self._ticks[-1] if self._ticks else None

    def sample_once(self) -> Tick:
        """Take one tick now (the thread's body; also usable without the thread)."""
        pids = frozenset(self._pids())
        samples = tuple(self._nvml.sample(index) for index in self._indices)
        tick = Tick(
            t=samples[0].t,
            gpus=samples,
            workload_memory=tuple(workload_memory(s, pids) for s in samples),
        )
        self._ticks.append(tick)
        if self._trace is not None:
            for sample, held in zip(samples, tick.workload_memory, strict=True):
                line = {**self._trace_fields, **sample.to_dict(), "workload_memory_bytes": held}
                self._trace.write(json.dumps(line) + "\n")
        return tick

    def _run(self) -> None:
        next_t = time.monotonic()
        while not self._stop.is_set():
            try:
                self.sample_once()
            except Exception as exc:  # noqa: BLE001 - a lost GPU must not end the run
                self.error = f"{type(exc).__name__}: {exc}"
                return
            next_t += self._period
            delay = next_t - time.monotonic()
            if delay < 0:  # fell behind (a slow call): skip the missed slots, no burst
                next_t = time.monotonic()
                delay = 0.0
            self._stop.wait(delay)


# --- waiting for an idle, cool GPU before the measured run --------------------------------


@dataclass(frozen=True)
class IdleReport:
    """What the pre-run wait found."""

    reached: bool  # the GPUs were idle and cool before the timeout
    waited_seconds: float
    temperature_c: float  # hottest GPU at the end of the wait (0 if unknown)
    utilization: float  # busiest GPU at the end of the wait (0 if unknown)

    def warning(self, max_utilization: float, max_temperature: float) -> str:
        """The run's warning when the wait timed out ('' when it did not)."""
        if self.reached:
            return ""
        return (
            f"the GPU was not idle and cool after {self.waited_seconds:.0f} s "
            f"(utilisation {self.utilization:.0f}%, {self.temperature_c:.0f} C; wanted under "
            f"{max_utilization:.0f}% and {max_temperature:.0f} C); measured anyway"
        )


def wait_for_idle(
    nvml: Nvml,
    gpu_indices: Sequence[int],
    *,
    timeout: float = 60.0,
    max_utilization: float = 5.0,
    max_temperature: float = 50.0,
    poll: float = 0.5,
    settle: int = 2,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> IdleReport:
    """Wait (at most `timeout` s) until every GPU is under both limits for `settle`
    polls in a row. A field the GPU cannot report does not hold the run up.
    """
    began = clock()
    calm = 0
    temperature = utilization = 0.0
    while True:
        samples = [nvml.sample(index) for index in gpu_indices]
        temperature = max((s.temperature_c or 0.0 for s in samples), default=0.0)
        utilization = max((s.gpu_utilization or 0.0 for s in samples), default=0.0)
        calm = calm + 1 if utilization < max_utilization and temperature < max_temperature else 0
        waited = clock() - began
        if calm >= settle or not gpu_indices:
            return IdleReport(True, waited, temperature, utilization)
        if waited >= timeout:
            return IdleReport(False, waited, temperature, utilization)
        sleep(min(poll, max(0.0, timeout - waited)))
