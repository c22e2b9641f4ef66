"""NVML access: the replaying fake against the recorded trace, and the real driver's
failure modes (no driver here; a pynvml stand-in for per-field failures)."""

from __future__ import annotations

import json
import sys
import types
from pathlib import Path

import pytest

from gpubench.agent import nvml
from gpubench.agent.nvml_replay import FakeNvml


class Clock:
    """A clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_fake_reports_the_recorded_inventory(trace_path: Path) -> None:
    fake = FakeNvml.from_trace(trace_path)
    trace = json.loads(trace_path.read_text())
    assert fake.gpu_count() == len(trace["gpus"]) >= 1
    gpu = fake.gpu(0)
    for name in nvml.INVENTORY_FIELDS:
        assert gpu[name] == trace["gpus"][0][name]
    assert fake.system()["driver_version"] == trace["system"]["driver_version"]


def test_fake_replays_samples_by_elapsed_time(trace_path: Path) -> None:
    clock = Clock()
    fake = FakeNvml.from_trace(trace_path, clock=clock)
    recorded = [s for s in fake.trace["samples"] if s["index"] == 0]
    train_start, train_end = fake.phase("train")
    # Moving the clock to a recorded sample's time gives exactly that sample.
    for data in (recorded[0], recorded[len(recorded) // 2], recorded[-1]):
        clock.now = data["t"]
        sample = fake.sample(0)
        assert sample.t == clock.now
        assert sample.power_watts == data["power_watts"]
        assert sample.energy_millijoules == data["energy_millijoules"]
    # After the end the last sample holds.
    clock.now = recorded[-1]["t"] + 100
    assert fake.sample(0).energy_millijoules == recorded[-1]["energy_millijoules"]
    # The training phase draws more power than the idle start.
    clock.now = (train_start + train_end) / 2
    busy = fake.sample(0).power_watts
    clock.now = 0.0
    assert busy > fake.sample(0).power_watts


def test_fake_speed_and_start_position(trace_path: Path) -> None:
    clock = Clock()
    recorded = nvml.read_trace(trace_path)
    train_start, _ = next((p["t_start"], p["t_end"]) for p in recorded["phases"]
                          if p["name"] == "train")
    fake = FakeNvml(recorded, clock=clock, speed=10, start_at=train_start)
    first = fake.sample(0)
    clock.now += 1.0  # ten seconds of the trace
    later = fake.sample(0)
    expected = [s for s in recorded["samples"] if s["t"] <= train_start + 10.0][-1]
    assert later.energy_millijoules == expected["energy_millijoules"]
    assert later.energy_millijoules > first.energy_millijoules


def test_fake_maps_the_recorded_workload_to_a_live_pid(trace_path: Path) -> None:
    clock = Clock()
    fake = FakeNvml.from_trace(trace_path, clock=clock, workload_pid=4242)
    recorded_pid = fake.trace["meta"]["workload_pid"]
    clock.now += sum(fake.phase("train")) / 2
    sample = fake.sample(0)
    assert 4242 in sample.processes and recorded_pid not in sample.processes
    assert sample.processes[4242] > 1 << 30  # the training process held GiBs


def test_sample_round_trips_through_json() -> None:
    sample = nvml.GpuSample(index=1, t=5.0, power_watts=250.5, energy_millijoules=123,
                            processes={7: 1024, 8: None}, missing=("sm_clock_mhz",))
    again = nvml.GpuSample.from_dict(json.loads(json.dumps(sample.to_dict())))
    assert again == sample


@pytest.mark.parametrize("change, message", [
    (lambda t: t.update(format="other"), "not an NVML trace"),
    (lambda t: t.update(version=99), "version 99"),
    (lambda t: t.pop("samples"), "no 'samples'"),
])
def test_bad_trace_files_name_the_file(tmp_path: Path, trace_path: Path, change, message) -> None:
    trace = json.loads(trace_path.read_text())
    change(trace)
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(trace))
    with pytest.raises(ValueError, match=f"{path}.*{message}"):
        nvml.read_trace(path)


def test_throttle_names() -> None:
    assert nvml.throttle_names(0) == []
    assert nvml.throttle_names(0x4 | 0x40) == ["sw_power_cap", "hw_thermal_slowdown"]
    assert nvml.throttle_names(0x1 | 0x8000) == ["gpu_idle", "other_0x8000"]


def test_no_driver_raises_a_typed_error() -> None:
    try:
        real = nvml.open_nvml()
    except nvml.NvmlUnavailable as exc:
        assert str(exc)  # the reason NVML gave
    else:  # pragma: no cover - on a GPU machine
        real.close()
        pytest.skip("an NVIDIA driver is present")


def _stand_in_pynvml(unsupported: set[str]) -> types.ModuleType:
    """A pynvml module answering like a driver whose GPU lacks some calls."""
    module = types.ModuleType("pynvml")

    class NVMLError(Exception):
        pass

    class NVMLError_NotSupported(NVMLError):  # noqa: N801 - pynvml's name
        pass

    module.NVMLError = NVMLError
    module.NVML_TEMPERATURE_GPU = 0
    module.NVML_CLOCK_SM = 1
    answers = {
        "nvmlInit": None, "nvmlShutdown": None, "nvmlDeviceGetCount": 1,
        "nvmlDeviceGetHandleByIndex": "h0", "nvmlDeviceGetName": b"Tesla T4",
        "nvmlDeviceGetUUID": "GPU-1", "nvmlSystemGetDriverVersion": "525.85.12",
        "nvmlSystemGetCudaDriverVersion": 12000,
        "nvmlDeviceGetMemoryInfo": types.SimpleNamespace(total=16 << 30, used=5 << 30),
        "nvmlDeviceGetCudaComputeCapability": (7, 5), "nvmlDeviceGetEccMode": (1, 1),
        "nvmlDeviceGetEnforcedPowerLimit": 70000, "nvmlDeviceGetCurrPcieLinkGeneration": 3,
        "nvmlDeviceGetCurrPcieLinkWidth": 16, "nvmlDeviceGetPersistenceMode": 0,
        "nvmlDeviceGetPowerUsage": 68500, "nvmlDeviceGetTotalEnergyConsumption": 5_000_000,
        "nvmlDeviceGetUtilizationRates": types.SimpleNamespace(gpu=97, memory=60),
        "nvmlDeviceGetTemperature": 71, "nvmlDeviceGetClockInfo": 1590,
        "nvmlDeviceGetCurrentClocksEventReasons": 0x4,
        "nvmlDeviceGetComputeRunningProcesses": [
            types.SimpleNamespace(pid=11, usedGpuMemory=5 << 30)
        ],
    }
    for name, value in answers.items():
        def call(*args: object, _name: str = name, _value: object = value) -> object:
            if _name in unsupported:
                raise NVMLError_NotSupported("Not Supported")
            return _value
        setattr(module, name, call)
    return module


def test_one_unsupported_field_does_not_sink_the_others(monkeypatch: pytest.MonkeyPatch) -> None:
    stand_in = _stand_in_pynvml({"nvmlDeviceGetTotalEnergyConsumption", "nvmlDeviceGetEccMode"})
    monkeypatch.setitem(sys.modules, "pynvml", stand_in)
    with nvml.open_nvml() as real:
        sample = real.sample(0)
        gpu = real.gpu(0)
        system = real.system()
        errors = real.field_errors()
    assert sample.missing == ("energy_millijoules",)
    assert sample.energy_millijoules is None
    assert sample.power_watts == 68.5 and sample.gpu_utilization == 97.0
    assert sample.memory_utilization == 60.0 and sample.processes == {11: 5 << 30}
    assert sample.throttle_reasons == 0x4
    assert gpu["missing"] == ["ecc_mode"] and gpu["ecc_mode"] is None
    assert gpu["name"] == "Tesla T4" and gpu["compute_capability"] == "7.5"
    assert gpu["persistence_mode"] == "off" and gpu["power_limit_watts"] == 70.0
    assert system == {"missing": [], "driver_version": "525.85.12", "cuda_version": "12.0"}
    assert errors == {"energy_millijoules": "Not Supported", "ecc_mode": "Not Supported"}


def test_init_failure_is_nvml_unavailable(monkeypatch: pytest.MonkeyPatch) -> None:
    stand_in = _stand_in_pynvml(set())

    def refuse() -> None:
        raise stand_in.NVMLError("Driver Not Loaded")

    stand_in.nvmlInit = refuse
    monkeypatch.setitem(sys.modules, "pynvml", stand_in)
    with pytest.raises(nvml.NvmlUnavailable, match="Driver Not Loaded"):
        nvml.open_nvml()
