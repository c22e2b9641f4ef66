"""A recorded NVML trace replayed as the driver: for machines without a GPU.

Development and tests only (GPUBENCH_NVML_TRACE, tests/data/): the agent reads
a real GPU through agent/gpubench/agent/nvml.py's RealNvml. Traces are written on a GPU by
bench/record_nvml_trace.py (agent/gpubench/agent/nvml.py's `write_trace`).
"""

from __future__ import annotations

import bisect
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from gpubench.agent.nvml import GpuSample, Nvml, read_trace

# A recorded GPU this busy is running the recorded training's steps (its first seconds
# in the "train" phase import the framework and build the model on the host).
STEPS_BUSY_PERCENT = 50.0


class FakeNvml(Nvml):
    """Replays a recorded trace: what the GPU reported `speed` x (now - start) into it.

    Replay begins `start_at` seconds into the trace. After the trace's end the
    last sample of each GPU is repeated. Processes the trace recorded for its
    workload (meta.workload_pid) are reported under `workload_pid` when given,
    so a live child process can stand in for it.
    """

    def __init__(
        self,
        trace: Mapping[str, Any],
        *,
        speed: float = 1.0,
        start_at: float = 0.0,
        clock: Callable[[], float] = time.monotonic,
        workload_pid: int | None = None,
    ) -> None:
        self.trace = trace
        self._speed = speed
        self._start_at = start_at
        self._clock = clock
        self._start = clock()
        self._recorded_pid = (trace.get("meta") or {}).get("workload_pid")
        self._workload_pid = workload_pid
        self._times: dict[int, list[float]] = {}
        self._samples: dict[int, list[dict[str, Any]]] = {}
        for data in trace["samples"]:
            index = int(data["index"])
            self._times.setdefault(index, []).append(float(data["t"]))
            self._samples.setdefault(index, []).append(data)

    @classmethod
    def from_trace(cls, path: str | Path, **options: Any) -> FakeNvml:
        """A fake replaying the trace file at `path` (see the class for options)."""
        return cls(read_trace(path), **options)

    def follow_workload(self, pid: int) -> None:
        """Report the recorded workload's GPU memory under this live process id, and
        replay the recorded workload's steps from now on (where the trace has a "train"
        phase): the live workload stands for the recorded one, so its epochs see the GPU
        it kept busy, not the idle seconds recorded before its steps began."""
        self._workload_pid = pid
        steps = self._steps_start()
        elapsed = self._start_at + (self._clock() - self._start) * self._speed
        if steps is not None and elapsed < steps:
            self._start_at += steps - elapsed

    def _steps_start(self) -> float | None:
        """Seconds into the trace at which the recorded training's steps kept the GPU
        busy (STEPS_BUSY_PERCENT) for the first time; None without a "train" phase."""
        try:
            start, end = self.phase("train")
        except KeyError:
            return None
        return next((float(s["t"]) for s in self.trace["samples"]
                     if start <= float(s["t"]) <= end
                     and (s.get("gpu_utilization") or 0) >= STEPS_BUSY_PERCENT), None)

    def system(self) -> dict[str, Any]:
        return {"missing": [], **self.trace["system"]}

    def gpu_count(self) -> int:
        return len(self.trace["gpus"])

    def gpu(self, index: int) -> dict[str, Any]:
        gpu = dict(self.trace["gpus"][index])
        gpu.setdefault("missing", [])
        return gpu

    def sample(self, index: int) -> GpuSample:
        now = self._clock()
        times = self._times[index]
        elapsed = self._start_at + (now - self._start) * self._speed
        position = max(0, bisect.bisect_right(times, elapsed) - 1)
        data = dict(self._samples[index][position])
        if self._workload_pid is not None and self._recorded_pid is not None:
            processes = dict(data.get("processes") or {})
            if str(self._recorded_pid) in processes:
                processes[str(self._workload_pid)] = processes.pop(str(self._recorded_pid))
            data["processes"] = processes
        return GpuSample.from_dict(data, t=now)

    def phase(self, name: str) -> tuple[float, float]:
        """A recorded phase's (start, end), in seconds into the trace."""
        for phase in self.trace.get("phases", ()):
            if phase["name"] == name:
                return float(phase["t_start"]), float(phase["t_end"])
        raise KeyError(name)
