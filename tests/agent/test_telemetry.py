"""Telemetry: per-epoch arithmetic on hand-made samples, the recorded trace, the sampler
thread and the idle wait (on the replaying fake NVML)."""

from __future__ import annotations

import io
import json
import time
from pathlib import Path

import pytest

from gpubench.agent import nvml
from gpubench.agent.nvml import GpuSample
from gpubench.agent.nvml_replay import FakeNvml
from gpubench.agent.telemetry import (
    Sampler,
    Tick,
    aggregate,
    counter_delta,
    integrate,
    wait_for_idle,
)


def tick(t: float, *samples: dict, held: tuple[int | None, ...] = ()) -> Tick:
    gpus = tuple(GpuSample(index=i, t=t, **s) for i, s in enumerate(samples))
    return Tick(t=t, gpus=gpus, workload_memory=held or tuple(None for _ in gpus))


# Power 100, 200, 200, 100 W at t = 0, 1, 2, 3 s; the counter agrees with it
# (trapezoids: 150 J, 200 J, 150 J).
ONE_GPU = [
    tick(0.0, {"power_watts": 100.0, "energy_millijoules": 0, "temperature_c": 40.0,
               "sm_clock_mhz": 1000.0, "gpu_utilization": 0.0, "memory_used_bytes": 1 << 30,
               "throttle_reasons": 0x1}, held=(0,)),
    tick(1.0, {"power_watts": 200.0, "energy_millijoules": 150_000, "temperature_c": 60.0,
               "sm_clock_mhz": 1800.0, "gpu_utilization": 90.0, "memory_used_bytes": 9 << 30,
               "throttle_reasons": 0x4}, held=(8 << 30,)),
    tick(2.0, {"power_watts": 200.0, "energy_millijoules": 350_000, "temperature_c": 65.0,
               "sm_clock_mhz": 1700.0, "gpu_utilization": 100.0, "memory_used_bytes": 10 << 30,
               "throttle_reasons": 0x1}, held=(9 << 30,)),
    tick(3.0, {"power_watts": 100.0, "energy_millijoules": 500_000, "temperature_c": 50.0,
               "sm_clock_mhz": 1000.0, "gpu_utilization": 0.0, "memory_used_bytes": 2 << 30,
               "throttle_reasons": 0}, held=(1 << 30,)),
]


def test_trapezoid_integral_with_interpolated_edges() -> None:
    points = [(0.0, 100.0), (1.0, 200.0), (2.0, 200.0), (3.0, 100.0)]
    assert integrate(points, 0.0, 3.0) == pytest.approx(500.0)
    # [0.5, 2.5]: 150 at the edges -> 0.5*(150+200)/2 + 200 + 0.5*(200+150)/2
    assert integrate(points, 0.5, 2.5) == pytest.approx(375.0)
    # Outside the samples the value is held: 100 W for one more second.
    assert integrate(points, 3.0, 4.0) == pytest.approx(100.0)
    assert integrate(points, 2.0, 2.0) == 0.0


def test_counter_delta_interpolates_and_refuses_resets() -> None:
    points = [(0.0, 0.0), (1.0, 150_000.0), (2.0, 350_000.0), (3.0, 500_000.0)]
    # c(0.5) = 75 000, c(2.5) = 425 000
    assert counter_delta(points, 0.5, 2.5) == pytest.approx(350_000.0)
    assert counter_delta([(0.0, 10.0), (1.0, 5.0)], 0.0, 1.0) is None


def test_epoch_figures_from_the_counter() -> None:
    window = aggregate(ONE_GPU, 0.5, 2.5)
    assert window.energy_source == "counter"
    assert window.energy_joules == pytest.approx(350.0)
    assert window.mean_power_watts == pytest.approx(350.0 / 2.0)
    assert window.samples == 2  # t = 1 and t = 2
    assert window.max_power_watts == 200.0
    assert window.max_temperature_c == 65.0
    assert window.mean_sm_clock_mhz == pytest.approx(1750.0)
    assert window.mean_gpu_utilization == pytest.approx(95.0)
    assert window.throttle_reasons == ("sw_power_cap",)  # gpu_idle says nothing
    assert window.process_peak_bytes == {0: 9 << 30}
    assert window.device_peak_bytes == {0: 10 << 30}


def test_the_maximum_is_the_highest_sample_and_says_so() -> None:
    window = aggregate(ONE_GPU, 0.5, 2.5)
    assert (window.max_power_watts, window.max_power_source) == (200.0, "samples")
    assert window.max_power_watts >= window.mean_power_watts


def test_a_short_epoch_whose_readings_trail_the_counter_has_the_mean_as_its_maximum() -> None:
    # An H100's 0.8 s B0 epoch as its record had it: the counter grew by 350 J (437 W),
    # while each power reading, the driver's average over up to a second, still held
    # part of the idle time before it (no reading over 390 W).
    ticks = [
        tick(0.0, {"power_watts": 150.0, "energy_millijoules": 0}),
        tick(0.4, {"power_watts": 330.0, "energy_millijoules": 175_000}),
        tick(0.8, {"power_watts": 390.0, "energy_millijoules": 350_000}),
    ]
    window = aggregate(ticks, 0.0, 0.8)
    assert window.energy_source == "counter"
    assert window.mean_power_watts == pytest.approx(437.5)
    assert window.max_power_watts == pytest.approx(437.5)  # never under the mean
    assert window.max_power_source == "mean"


def test_energy_falls_back_to_the_power_integral() -> None:
    no_counter = [
        Tick(t.t, (GpuSample(**{**t.gpus[0].__dict__, "energy_millijoules": None}),),
             t.workload_memory)
        for t in ONE_GPU
    ]
    window = aggregate(no_counter, 0.5, 2.5)
    assert window.energy_source == "power-integral"
    assert window.energy_joules == pytest.approx(375.0)


def test_two_gpus_one_without_counter_use_the_integral_for_both() -> None:
    ticks = [
        tick(0.0, {"power_watts": 100.0, "energy_millijoules": 0}, {"power_watts": 50.0},
             held=(1 << 30, 2 << 30)),
        tick(1.0, {"power_watts": 300.0, "energy_millijoules": 200_000}, {"power_watts": 150.0},
             held=(3 << 30, None)),
    ]
    window = aggregate(ticks, 0.0, 1.0)
    assert window.energy_source == "power-integral"
    assert window.energy_joules == pytest.approx(200.0 + 100.0)
    assert window.max_power_watts == pytest.approx(450.0)  # both GPUs at t = 1
    assert window.process_peak_bytes == {0: 3 << 30, 1: 2 << 30}


def test_no_power_no_energy() -> None:
    ticks = [tick(0.0, {"temperature_c": 30.0}), tick(1.0, {"temperature_c": 31.0})]
    window = aggregate(ticks, 0.0, 1.0)
    assert (window.energy_source, window.energy_joules, window.mean_power_watts) == ("", 0.0, 0.0)
    assert (window.max_power_watts, window.max_power_source) == (0.0, "")
    assert window.max_temperature_c == 31.0
    assert aggregate([], 0.0, 1.0).samples == 0


def _recorded_ticks(trace: dict, drop_counter: bool = False) -> list[Tick]:
    ticks = []
    for data in trace["samples"]:
        if drop_counter:
            data = {k: v for k, v in data.items() if k != "energy_millijoules"}
        ticks.append(Tick(data["t"], (GpuSample.from_dict(data),), (None,)))
    return ticks


def test_counter_and_power_integral_agree_on_the_recorded_training(trace_path: Path) -> None:
    trace = nvml.read_trace(trace_path)
    phases = {p["name"]: (p["t_start"], p["t_end"]) for p in trace["phases"]}
    counter = aggregate(_recorded_ticks(trace), *phases["train"])
    integral = aggregate(_recorded_ticks(trace, drop_counter=True), *phases["train"])
    assert counter.energy_source == "counter"
    assert integral.energy_source == "power-integral"
    assert integral.energy_joules == pytest.approx(counter.energy_joules, rel=0.05)
    idle = aggregate(_recorded_ticks(trace), *phases["idle"])
    assert counter.mean_power_watts > 1.5 * idle.mean_power_watts
    assert counter.device_peak_bytes[0] > idle.device_peak_bytes[0]


def test_sampler_thread_on_the_replayed_trace(trace_path: Path) -> None:
    fake = FakeNvml.from_trace(trace_path, speed=20, workload_pid=999_999)
    out = io.StringIO()
    sampler = Sampler(fake, [0], hz=20, workload_pids=lambda: {999_999}, trace=out,
                      trace_fields={"model": "B0"})
    began = time.monotonic()
    with sampler:
        time.sleep(1.0)
    elapsed = time.monotonic() - began
    ticks = sampler.ticks
    assert 0.6 * 20 * elapsed <= len(ticks) <= 20 * elapsed + 2
    assert all(a.t < b.t for a, b in zip(ticks, ticks[1:], strict=False))
    assert sampler.error == ""
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    assert len(lines) == len(ticks)
    assert lines[0]["model"] == "B0" and "power_watts" in lines[0]
    # 20 s of the trace went by: the workload's memory was seen, and it matches NVML's.
    assert max(t.workload_memory[0] or 0 for t in ticks) > 0
    window = aggregate(ticks, ticks[0].t, ticks[-1].t)
    assert window.energy_source == "counter" and window.energy_joules > 0


def test_sampler_records_why_it_stopped() -> None:
    class Broken(nvml.Nvml):
        def sample(self, index: int) -> GpuSample:
            raise RuntimeError("GPU has fallen off the bus")

    sampler = Sampler(Broken(), [0], hz=50).start()
    time.sleep(0.1)
    sampler.stop()
    assert "fallen off the bus" in sampler.error


def test_idle_wait_returns_once_the_recorded_gpu_cools_down(trace_path: Path) -> None:
    fake = FakeNvml.from_trace(trace_path)
    train_start, train_end = fake.phase("train")
    speed = 20.0
    fake = FakeNvml.from_trace(trace_path, speed=speed, start_at=train_end - 4.0)
    report = wait_for_idle(fake, [0], timeout=10, poll=0.05)
    assert report.reached
    assert report.utilization < 5 and report.temperature_c < 50
    # It had to wait for the end of the recorded training (4 s of trace = 0.2 s here).
    assert report.waited_seconds >= 4.0 / speed * 0.8
    assert report.warning(5, 50) == ""


def test_idle_wait_gives_up_and_says_what_it_found(trace_path: Path) -> None:
    fake = FakeNvml.from_trace(trace_path)
    train_start, train_end = fake.phase("train")
    # Held (almost) still in the middle of the recorded training, under a limit
    # no GPU meets (0 C).
    busy = FakeNvml.from_trace(trace_path, speed=0.001,
                                    start_at=(train_start + train_end) / 2)
    found = busy.sample(0)
    report = wait_for_idle(busy, [0], timeout=0.3, poll=0.05, max_temperature=0.0)
    assert not report.reached
    assert report.waited_seconds >= 0.3
    assert report.temperature_c == found.temperature_c > 0
    assert report.utilization == found.gpu_utilization
    assert "measured anyway" in report.warning(5, 0)
