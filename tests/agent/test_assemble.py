"""Building the run record from events, inventory and telemetry; the collector's own
validation must accept what the agent builds."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from gpubench.agent.assemble import RunBuilder
from gpubench.agent.inventory import take_inventory
from gpubench.agent.nvml import GpuSample
from gpubench.agent.nvml_replay import FakeNvml
from gpubench.agent.runners.base import Outcome, WorkloadRequest
from gpubench.agent.telemetry import IdleReport, Tick
from gpubench.collector.validation import problems
from gpubench.events import (
    BatchChosen,
    BatchTrial,
    Dataset,
    EpochFinished,
    ErrorEvent,
    GpuPeak,
    Result,
    SearchSummary,
    Started,
)
from gpubench.v1 import run_pb2

GIB = 1 << 30
REQUEST = WorkloadRequest("B0", settings={"gpus": 1})

STARTED = Started(
    t=0.0, backend="tensorflow", backend_version="2.21.0", keras_version="3.15.1",
    python_version="3.11.7", cuda_runtime_version="12.5", cudnn_version="9.3", model="B0",
    image_size=224, batch_per_gpu=128, global_batch=128, batch_choice="searched", batch_rule="",
    memory_limit_bytes=0, precision="float32", gpu_count=1, epochs=2, pipeline="cached",
    weights="none", jit_compile=False, cuda_graphs=False, data_on_device=False,
    batched_augmentation=False, fused_batchnorm=False, channels_first=False,
    dataset=Dataset(name="synthetic-rps", image_count=2136, fingerprint="sha256:ab",
                    train_images=1709, validation_images=427, validation_split=0.2, seed=12,
                    skipped_files=0),
)
EPOCHS = [
    EpochFinished(epoch=1, wall_seconds=20.0, train_seconds=18.0,
                  validation_seconds=2.0, loss=1.0, accuracy=0.4, val_loss=1.1, val_accuracy=0.35,
                  t_start=100.0, t_end=120.0, steps=14),
    EpochFinished(epoch=2, wall_seconds=5.0, train_seconds=4.5, validation_seconds=0.5,
                  loss=0.5, accuracy=0.8, val_loss=0.6, val_accuracy=0.75, t_start=120.0,
                  t_end=125.0, steps=14),
]
RESULT = Result(measured_epoch=2, train_images_per_second=339.0,
                step_time_median_seconds=0.37, step_time_cv=0.04,
                memory=(GpuPeak(gpu_index=0, allocator_peak_bytes=19 * GIB,
                                memory_total_bytes=140 * GIB),),
                warnings=("step times vary by 12%",))
SEARCH = SearchSummary(largest=128, capped=False, search_seconds=0.0, capacity_bytes=0,
                       fixed_bytes=0, per_image_bytes=0)


def ticks_every_second(start: float, end: float, watts: float) -> list[Tick]:
    """A GPU drawing `watts` steadily, its counter agreeing, the workload holding 20 GiB."""
    ticks = []
    for n in range(int(end - start) + 1):
        t = start + n
        sample = GpuSample(index=0, t=t, power_watts=watts,
                           energy_millijoules=int(1_000_000 + watts * 1000 * n),
                           temperature_c=55.0, sm_clock_mhz=1980.0, gpu_utilization=90.0,
                           memory_used_bytes=21 * GIB, throttle_reasons=0x4,
                           processes={4242: 20 * GIB})
        ticks.append(Tick(t, (sample,), (20 * GIB,)))
    return ticks


@pytest.fixture
def builder(trace_path: Path) -> RunBuilder:
    inventory = take_inventory(FakeNvml.from_trace(trace_path))
    built = RunBuilder(REQUEST, inventory, label="lab", gpu_indices=(0,))
    for item in (BatchTrial(batch=256, fits=False, message="OOM"),
                 BatchTrial(batch=128, fits=True, peak_memory_bytes=19 * GIB, seconds=30.0),
                 BatchChosen(batch=128, rule="steps", fallbacks=(), search=SEARCH), STARTED,
                 *EPOCHS, RESULT):
        built.add(item)
    return built


def test_an_ok_run_has_every_figure(builder: RunBuilder) -> None:
    idle = IdleReport(reached=True, waited_seconds=3.5, temperature_c=38.0, utilization=0.0)
    run = builder.build(Outcome(exit_code=0), ticks_every_second(95.0, 130.0, 400.0), idle)
    assert problems(run) == []
    result = run.result
    assert result.status == run_pb2.RUN_STATUS_OK and result.error_message == ""
    assert result.measured_epoch == 2
    assert result.epoch2_seconds == 5.0
    assert result.startup_seconds == pytest.approx(15.0)
    assert result.energy_per_epoch_joules == pytest.approx(400.0 * 5.0)
    assert result.mean_power_watts == pytest.approx(400.0)
    assert [e.energy_joules for e in result.epochs] == pytest.approx([8000.0, 2000.0])
    assert {e.energy_source for e in result.epochs} == {"counter"}
    # Each epoch says how its maximum was read, and it is never under its mean.
    assert {e.max_power_source for e in result.epochs} <= {"samples", "mean"}
    assert all(e.max_power_watts >= e.mean_power_watts for e in result.epochs)
    assert result.max_power_watts >= result.mean_power_watts
    assert result.epochs[1].samples == 6  # t = 120 ... 125
    [memory] = result.memory
    assert memory.allocator_peak_bytes == 19 * GIB
    assert memory.process_peak_bytes == 20 * GIB and memory.device_peak_bytes == 21 * GIB
    assert memory.memory_total_bytes == run.gpus[0].memory_total_bytes
    assert list(result.throttle_reasons) == ["sw_power_cap"]
    assert [t.batch for t in result.batch_trials] == [256, 128]
    assert result.idle_wait_seconds == 3.5 and result.idle_temperature_c == 38.0
    assert list(result.warnings) == ["step times vary by 12%"]
    assert run.config.batch_per_gpu == 128 and run.config.global_batch == 128
    assert run.config.batch_choice == run_pb2.BATCH_CHOICE_SEARCHED
    assert run.config.train_images == 1709
    assert run.config.dataset_fingerprint == "ab"  # the bare digest
    assert run.software.cudnn_version == "9.3" and run.label == "lab"
    assert len(run.gpus) == 1 and run.gpus[0].name == "NVIDIA H200"


def test_interrupted_run_keeps_what_was_measured(builder: RunBuilder) -> None:
    builder.result = None
    del builder.epochs[2]
    run = builder.build(Outcome(exit_code=None, signal=2, interrupted=True))
    assert problems(run) == []
    assert run.result.status == run_pb2.RUN_STATUS_INTERRUPTED
    assert run.result.error_message == "stopped by the user (Ctrl-C)"
    assert [e.number for e in run.result.epochs] == [1]
    assert run.result.epoch2_seconds == 0.0


def test_crash_before_the_workload_started_still_builds_a_record(trace_path: Path) -> None:
    inventory = take_inventory(FakeNvml.from_trace(trace_path))
    builder = RunBuilder(WorkloadRequest("B3", batch=40, settings={"gpus": 1}), inventory,
                         gpu_indices=(0,))
    run = builder.build(Outcome(exit_code=1, output_tail=["ImportError: no module named keras"]))
    assert problems(run) == []
    assert run.result.status == run_pb2.RUN_STATUS_ERROR
    assert "ImportError: no module named keras" in run.result.error_message
    assert run.config.model == "B3" and run.config.batch_per_gpu == 40
    assert run.config.image_size == 300  # B3's native size


def test_cpu_only_run_lists_no_gpu() -> None:
    from gpubench.agent.inventory import take_inventory as cpu_inventory

    builder = RunBuilder(WorkloadRequest("B0", batch=8, settings={"gpus": 0}), cpu_inventory(None))
    builder.add(replace(STARTED, model="B0", gpu_count=0, batch_per_gpu=8, global_batch=8,
                        backend="tensorflow", image_size=32))
    for item in EPOCHS:
        builder.add(item)
    builder.add(Result(measured_epoch=2, memory=(),
                       memory_notes=("CPU run: there is no GPU allocator peak to report",)))
    run = builder.build(Outcome(exit_code=0))
    assert problems(run) == []
    assert run.config.gpu_count == 0 and not run.gpus and not run.result.memory
    assert run.result.energy_per_epoch_joules == 0.0 and run.result.epochs[1].energy_source == ""
    # What the workload says of its memory figures is the record's.
    assert list(run.result.memory_notes) == ["CPU run: there is no GPU allocator peak to report"]


def test_long_messages_fit_the_collector(builder: RunBuilder) -> None:
    builder.add(ErrorEvent(status="error", message="x" * 10_000))
    builder.add(replace(RESULT, memory_notes=tuple(f"note {n} " + "z" * 2000
                                                   for n in range(100))))
    for n in range(100):
        builder.warn(f"warning {n} " + "y" * 2000)
    run = builder.build(Outcome(exit_code=1))
    assert problems(run) == []
    assert run.result.status == run_pb2.RUN_STATUS_ERROR


@pytest.mark.parametrize(("asked", "ran"), [(True, True), (True, False), (False, None)])
def test_the_record_says_whether_cuda_graphs_ran(trace_path: Path, asked: bool,
                                                 ran: bool | None) -> None:
    # Asked-for graphs fall back to Keras's own steps on an untested Keras: the result
    # event says what ran, and the record follows it.
    built = RunBuilder(REQUEST, take_inventory(FakeNvml.from_trace(trace_path)),
                       gpu_indices=(0,))
    result = RESULT if ran is None else replace(RESULT, cuda_graphs=ran)
    for item in (replace(STARTED, cuda_graphs=asked), *EPOCHS, result):
        built.add(item)
    run = built.build(Outcome(exit_code=0), ticks_every_second(95.0, 130.0, 400.0), None)
    assert run.config.cuda_graphs is (asked if ran is None else ran)
