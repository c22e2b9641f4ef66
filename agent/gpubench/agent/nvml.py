"""The one module that talks to the NVIDIA driver (NVML, through pynvml).

Two implementations of one small interface (`Nvml`):

- `RealNvml`: the driver, through pynvml. Opening it without a driver raises
  `NvmlUnavailable`; callers say so in one line and carry on CPU-only.
- `FakeNvml` (agent/gpubench/agent/nvml_replay.py): replays a trace recorded on a real GPU
  (bench/record_nvml_trace.py writes them with `write_trace`; tests/data/ holds
  some) for machines without a GPU.

Which fields are read is data: `INVENTORY_FIELDS` and `SAMPLE_FIELDS` map each
field to the NVML call that reads it. Every field is read on its own, so one
that the GPU does not support (NVMLError_NotSupported) is recorded as missing
and the others are still read.

This file imports nothing from gpubench, so bench/record_nvml_trace.py can load
it by path on a GPU machine where the package is not installed.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

TRACE_FORMAT = "gpubench-nvml-trace"
TRACE_VERSION = 1

# NVML's clock-event (throttle) reason bits, by the names the run record uses.
THROTTLE_REASONS: dict[int, str] = {
    0x0001: "gpu_idle",
    0x0002: "applications_clocks_setting",
    0x0004: "sw_power_cap",
    0x0008: "hw_slowdown",
    0x0010: "sync_boost",
    0x0020: "sw_thermal_slowdown",
    0x0040: "hw_thermal_slowdown",
    0x0080: "hw_power_brake_slowdown",
    0x0100: "display_clock_setting",
}


class NvmlUnavailable(Exception):
    """NVML could not start (no NVIDIA driver, or no library); the run is CPU-only."""


def throttle_names(mask: int) -> list[str]:
    """The names of the reason bits set in an NVML clock-event mask."""
    names = [name for bit, name in THROTTLE_REASONS.items() if mask & bit]
    unknown = mask & ~sum(THROTTLE_REASONS)
    if unknown:
        names.append(f"other_0x{unknown:x}")
    return names


@dataclass(frozen=True)
class GpuSample:
    """What one GPU reported at one moment (`t`: time.monotonic()). None: not read."""

    index: int
    t: float
    power_watts: float | None = None
    energy_millijoules: int | None = None  # the driver's total-energy counter
    gpu_utilization: float | None = None  # percent
    memory_utilization: float | None = None  # percent (memory controller busy)
    memory_used_bytes: int | None = None  # on the whole device
    temperature_c: float | None = None
    sm_clock_mhz: float | None = None
    throttle_reasons: int | None = None  # NVML clock-event bit mask
    processes: Mapping[int, int | None] = field(default_factory=dict)  # pid -> bytes
    missing: tuple[str, ...] = ()  # fields that could not be read

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (the trace's and --trace's sample line)."""
        data: dict[str, Any] = {"index": self.index, "t": self.t}
        for name in SAMPLE_FIELD_NAMES:
            value = getattr(self, name)
            if name == "processes":
                value = {str(pid): used for pid, used in value.items()}
            if value is not None:
                data[name] = value
        if self.missing:
            data["missing"] = list(self.missing)
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, t: float | None = None) -> GpuSample:
        """Read a sample written by `to_dict` (optionally re-stamped at `t`)."""
        values: dict[str, Any] = {name: data.get(name) for name in SAMPLE_FIELD_NAMES}
        processes = data.get("processes") or {}
        values["processes"] = {int(pid): used for pid, used in processes.items()}
        return cls(
            index=int(data["index"]),
            t=float(data["t"] if t is None else t),
            missing=tuple(data.get("missing", ())),
            **values,
        )


# --- what is read, and how -------------------------------------------------------
# Each reader takes (pynvml module, device handle) and returns one value, or a
# tuple of values for a tuple of names (one NVML call that answers several fields).


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _on_off(value: Any) -> str:
    return "on" if int(value) else "off"


def _processes(nv: Any, handle: Any) -> dict[int, int | None]:
    used: dict[int, int | None] = {}
    for proc in nv.nvmlDeviceGetComputeRunningProcesses(handle):
        memory = getattr(proc, "usedGpuMemory", None)
        used[int(proc.pid)] = None if memory is None else int(memory)
    return used


def _throttle(nv: Any, handle: Any) -> int:
    reader = getattr(nv, "nvmlDeviceGetCurrentClocksEventReasons", None)
    if reader is None:  # older pynvml
        reader = nv.nvmlDeviceGetCurrentClocksThrottleReasons
    return int(reader(handle))


Reader = Callable[[Any, Any], Any]

SAMPLE_FIELDS: dict[str | tuple[str, ...], Reader] = {
    "power_watts": lambda nv, h: nv.nvmlDeviceGetPowerUsage(h) / 1000.0,
    "energy_millijoules": lambda nv, h: int(nv.nvmlDeviceGetTotalEnergyConsumption(h)),
    ("gpu_utilization", "memory_utilization"): lambda nv, h: (
        lambda u: (float(u.gpu), float(u.memory))
    )(nv.nvmlDeviceGetUtilizationRates(h)),
    "memory_used_bytes": lambda nv, h: int(nv.nvmlDeviceGetMemoryInfo(h).used),
    "temperature_c": lambda nv, h: float(nv.nvmlDeviceGetTemperature(h, nv.NVML_TEMPERATURE_GPU)),
    "sm_clock_mhz": lambda nv, h: float(nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM)),
    "throttle_reasons": _throttle,
    "processes": _processes,
}

INVENTORY_FIELDS: dict[str, Reader] = {
    "name": lambda nv, h: _text(nv.nvmlDeviceGetName(h)),
    "uuid": lambda nv, h: _text(nv.nvmlDeviceGetUUID(h)),
    "memory_total_bytes": lambda nv, h: int(nv.nvmlDeviceGetMemoryInfo(h).total),
    "compute_capability": lambda nv, h: "{}.{}".format(*nv.nvmlDeviceGetCudaComputeCapability(h)),
    "ecc_mode": lambda nv, h: _on_off(nv.nvmlDeviceGetEccMode(h)[0]),
    "power_limit_watts": lambda nv, h: nv.nvmlDeviceGetEnforcedPowerLimit(h) / 1000.0,
    "pcie_generation": lambda nv, h: int(nv.nvmlDeviceGetCurrPcieLinkGeneration(h)),
    "pcie_width": lambda nv, h: int(nv.nvmlDeviceGetCurrPcieLinkWidth(h)),
    "persistence_mode": lambda nv, h: _on_off(nv.nvmlDeviceGetPersistenceMode(h)),
}


def _cuda_version(nv: Any) -> str:
    version = int(nv.nvmlSystemGetCudaDriverVersion())  # e.g. 12040
    return f"{version // 1000}.{version % 1000 // 10}"


SYSTEM_FIELDS: dict[str, Callable[[Any], Any]] = {
    "driver_version": lambda nv: _text(nv.nvmlSystemGetDriverVersion()),
    "cuda_version": _cuda_version,
}

SAMPLE_FIELD_NAMES: tuple[str, ...] = tuple(
    name for key in SAMPLE_FIELDS for name in (key if isinstance(key, tuple) else (key,))
)


# --- the interface ----------------------------------------------------------------


class Nvml:
    """What the agent asks of the driver. Subclasses: RealNvml, FakeNvml (nvml_replay)."""

    def follow_workload(self, pid: int) -> None:
        """The workload's process is `pid` (a replayed trace reports its recorded
        workload's memory under it; the real driver sees the process itself)."""

    def system(self) -> dict[str, Any]:
        """driver_version, cuda_version (None where unreadable) and `missing`."""
        raise NotImplementedError

    def gpu_count(self) -> int:
        """How many GPUs the driver sees."""
        raise NotImplementedError

    def gpu(self, index: int) -> dict[str, Any]:
        """The inventory of one GPU: INVENTORY_FIELDS' names, `index`, `missing`."""
        raise NotImplementedError

    def gpus(self) -> list[dict[str, Any]]:
        """The inventory of every GPU."""
        return [self.gpu(index) for index in range(self.gpu_count())]

    def sample(self, index: int) -> GpuSample:
        """One reading of SAMPLE_FIELDS for one GPU, stamped with time.monotonic()."""
        raise NotImplementedError

    def field_errors(self) -> dict[str, str]:
        """Why each field that could not be read was missing (first reason seen)."""
        return {}

    def close(self) -> None:
        """Release the driver."""

    def __enter__(self) -> Nvml:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class RealNvml(Nvml):
    """The NVIDIA driver through pynvml."""

    def __init__(self) -> None:
        try:
            import pynvml
        except ImportError as exc:
            raise NvmlUnavailable(f"pynvml is not installed ({exc})") from exc
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as exc:
            raise NvmlUnavailable(str(exc) or type(exc).__name__) from exc
        except OSError as exc:  # a broken library on the path
            raise NvmlUnavailable(str(exc)) from exc
        self._nv = pynvml
        self._handles: dict[int, Any] = {}
        self._errors: dict[str, str] = {}
        self._closed = False

    def _handle(self, index: int) -> Any:
        if index not in self._handles:
            self._handles[index] = self._nv.nvmlDeviceGetHandleByIndex(index)
        return self._handles[index]

    # `reader` is called with no arguments; typed Callable[..., Any] because mypy cannot
    # infer a lambda whose argument has a default (the callers' `lambda r=reader: ...`).
    def _read(self, name: str, reader: Callable[..., Any]) -> tuple[bool, Any]:
        # One field's failure (not supported, no permission, GPU lost) must not
        # sink the others: it becomes a missing field with its reason kept.
        try:
            return True, reader()
        except self._nv.NVMLError as exc:
            self._errors.setdefault(name, str(exc) or type(exc).__name__)
            return False, None

    def system(self) -> dict[str, Any]:
        result: dict[str, Any] = {"missing": []}
        for name, reader in SYSTEM_FIELDS.items():
            ok, value = self._read(name, lambda r=reader: r(self._nv))
            result[name] = value
            if not ok:
                result["missing"].append(name)
        return result

    def gpu_count(self) -> int:
        try:
            return int(self._nv.nvmlDeviceGetCount())
        except self._nv.NVMLError as exc:
            raise NvmlUnavailable(f"cannot count GPUs ({exc})") from exc

    def gpu(self, index: int) -> dict[str, Any]:
        handle = self._handle(index)
        result: dict[str, Any] = {"index": index, "missing": []}
        for name, reader in INVENTORY_FIELDS.items():
            ok, value = self._read(name, lambda r=reader: r(self._nv, handle))
            result[name] = value
            if not ok:
                result["missing"].append(name)
        return result

    def sample(self, index: int) -> GpuSample:
        handle = self._handle(index)
        t = time.monotonic()
        values: dict[str, Any] = {}
        missing: list[str] = []
        for key, reader in SAMPLE_FIELDS.items():
            names = key if isinstance(key, tuple) else (key,)
            ok, value = self._read(names[0], lambda r=reader: r(self._nv, handle))
            if not ok:
                missing.extend(names)
                continue
            values.update(zip(names, value if isinstance(key, tuple) else (value,), strict=True))
        return GpuSample(index=index, t=t, missing=tuple(missing), **values)

    def field_errors(self) -> dict[str, str]:
        return dict(self._errors)

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            try:
                self._nv.nvmlShutdown()
            except self._nv.NVMLError:
                pass


def open_nvml() -> Nvml:
    """The real driver; raises NvmlUnavailable when there is none."""
    return RealNvml()


# --- traces: recorded on a GPU (replayed by gpubench.agent.nvml_replay) ---


def write_trace(
    path: str | Path,
    *,
    system: Mapping[str, Any],
    gpus: Iterable[Mapping[str, Any]],
    samples: Iterable[GpuSample],
    t0: float,
    phases: Iterable[Mapping[str, Any]] = (),
    meta: Mapping[str, Any] | None = None,
) -> None:
    """Write a trace: samples' times are stored relative to `t0` (monotonic)."""
    lines = []
    for sample in samples:
        data = sample.to_dict()
        data["t"] = round(sample.t - t0, 4)
        lines.append(data)
    trace = {
        "format": TRACE_FORMAT,
        "version": TRACE_VERSION,
        "meta": dict(meta or {}),
        "system": dict(system),
        "gpus": [dict(gpu) for gpu in gpus],
        "phases": [dict(phase) for phase in phases],
        "samples": lines,
    }
    Path(path).write_text(json.dumps(trace, indent=None, separators=(",", ":")) + "\n")


def read_trace(path: str | Path) -> dict[str, Any]:
    """Load and check a trace file; ValueError names the file and what is wrong."""
    try:
        trace = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise ValueError(f"{path}: cannot read the NVML trace ({exc})") from exc
    if not isinstance(trace, dict) or trace.get("format") != TRACE_FORMAT:
        raise ValueError(f"{path}: not an NVML trace (format is not {TRACE_FORMAT!r})")
    if trace.get("version") != TRACE_VERSION:
        raise ValueError(
            f"{path}: NVML trace version {trace.get('version')!r} is not {TRACE_VERSION}"
        )
    for key in ("system", "gpus", "samples"):
        if key not in trace:
            raise ValueError(f"{path}: NVML trace has no {key!r}")
    return trace
