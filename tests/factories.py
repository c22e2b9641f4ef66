"""Realistic run records for tests.

`make_run(**overrides)` builds a complete, valid `gpubench.v1.Run` the way an agent
would submit it, with figures taken from the benchmark's published measurements
(docs: seed-benchmark) for a GTX 1070, a Tesla T4, an RTX 6000 Ada and an H200.

Tests import it as `from factories import make_run` (pytest puts tests/ on the
path through tests/conftest.py), or use the `make_run` fixture.
"""

from __future__ import annotations

import subprocess
import sys
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from gpubench import record
from gpubench.v1 import run_pb2
from gpubench.versions import BENCHMARK_VERSION, SCHEMA_VERSION

MIB = 1 << 20
TRAIN_IMAGES = 1709
VALIDATION_IMAGES = 427
# The reference runs README and the demo compare with (published ones included).
REFERENCE_RUNS = Path(__file__).resolve().parents[1] / "docs" / "results" / "runs"


def import_reference_runs(db: Path) -> None:
    """Load the reference runs into the database `db` with `gpubench-collector import`,
    as their submitter "reference"."""
    runs = sorted(REFERENCE_RUNS.glob("*.json"))
    subprocess.run([str(Path(sys.executable).with_name("gpubench-collector")), "import",
                    "--db", str(db), "--submitter", "reference", *map(str, runs)],
                   check=True, capture_output=True)


@dataclass(frozen=True)
class Card:
    """What NVML reports for a GPU model, and how fast the benchmark ran on one."""

    name: str
    memory_total_bytes: int
    compute_capability: str
    power_limit_watts: float
    pcie_generation: int
    mean_power_watts: float
    epoch2_seconds: dict[str, float]  # per model, one GPU
    batch_per_gpu: dict[str, int]
    peak_share: dict[str, float]  # allocator peak / card memory


CARDS = {
    "NVIDIA GeForce GTX 1070": Card(
        "NVIDIA GeForce GTX 1070", 8192 * MIB, "6.1", 151.0, 3, 140.0,
        {"B0": 34.0, "B3": 112.0, "B7": 905.0}, {"B0": 60, "B3": 16, "B7": 1},
        {"B0": 0.86, "B3": 0.88, "B7": 0.71},
    ),
    "Tesla T4": Card(
        "Tesla T4", 15360 * MIB, "7.5", 70.0, 3, 68.5,
        {"B0": 17.0, "B3": 55.0, "B7": 678.0}, {"B0": 128, "B3": 40, "B7": 2},
        # 13.17, 13.67 and 9.88 GB of 16.1 GB, as published
        {"B0": 0.8177, "B3": 0.8487, "B7": 0.6134},
    ),
    "NVIDIA RTX 6000 Ada Generation": Card(
        "NVIDIA RTX 6000 Ada Generation", 49140 * MIB, "8.9", 300.0, 4, 262.0,
        {"B0": 3.9, "B3": 26.5, "B7": 151.0}, {"B0": 512, "B3": 128, "B7": 10},
        {"B0": 0.83, "B3": 0.86, "B7": 0.79},
    ),
    "NVIDIA H200": Card(
        "NVIDIA H200", 143771 * MIB, "9.0", 700.0, 5, 410.0,
        {"B0": 5.0, "B3": 11.7, "B7": 90.0}, {"B0": 128, "B3": 64, "B7": 16},
        # 18.9 and 31.5 GiB of 140 GiB, as measured through Keras on torch
        {"B0": 0.1346, "B3": 0.2244, "B7": 0.55},
    ),
}
# Two cards do not train twice as fast: the all-reduce and the input pipeline cost.
MULTI_GPU_SCALING = 0.85

_STATUS = {
    "ok": run_pb2.RUN_STATUS_OK,
    "out_of_memory": run_pb2.RUN_STATUS_OUT_OF_MEMORY,
    "error": run_pb2.RUN_STATUS_ERROR,
    "interrupted": run_pb2.RUN_STATUS_INTERRUPTED,
}


def make_run(
    *,
    gpu_name: str = "Tesla T4",
    gpu_count: int = 1,
    model: str = "B0",
    backend: str = "tensorflow",
    precision: str = "float32",
    image_size: int | None = None,
    batch_per_gpu: int | None = None,
    epoch2_seconds: float | None = None,
    train_images_per_second: float | None = None,
    peak_memory_bytes: int | None = None,
    energy_per_epoch_joules: float | None = None,
    status: str | int = "ok",
    benchmark_version: str = BENCHMARK_VERSION,
    run_id: str | None = None,
    created_at: datetime | None = None,
    label: str = "",
    **paths: Any,
) -> run_pb2.Run:
    """A complete, valid run record; keyword arguments override the realistic defaults.

    Any other field can be set with a double-underscore path, e.g.
    `make_run(config__epochs=3, host__cpu_cores=64)`. Figures left out follow from the
    card, model and GPU count (published figures where there are some).
    """
    card = CARDS.get(gpu_name) or Card(
        gpu_name, 24576 * MIB, "8.6", 350.0, 4, 300.0,
        {"B0": 6.0, "B3": 30.0, "B7": 200.0}, {"B0": 256, "B3": 64, "B7": 4},
        {"B0": 0.8, "B3": 0.8, "B7": 0.8},
    )
    status_value = _STATUS[status] if isinstance(status, str) else status
    ok = status_value == run_pb2.RUN_STATUS_OK
    per_gpu_batch = batch_per_gpu if batch_per_gpu is not None else card.batch_per_gpu[model]
    count = max(gpu_count, 1)
    if epoch2_seconds is None:
        speedup = count * MULTI_GPU_SCALING if count > 1 else 1.0
        epoch2_seconds = card.epoch2_seconds[model] / speedup
    train_seconds = epoch2_seconds * 0.82
    if train_images_per_second is None:
        train_images_per_second = TRAIN_IMAGES / train_seconds
    if peak_memory_bytes is None:
        peak_memory_bytes = int(card.memory_total_bytes * card.peak_share[model])
    power = card.mean_power_watts * count
    if energy_per_epoch_joules is None:
        energy_per_epoch_joules = power * epoch2_seconds

    run = run_pb2.Run(
        schema_version=SCHEMA_VERSION,
        run_id=run_id if run_id is not None else str(uuid.uuid4()),
        benchmark_version=benchmark_version,
        label=label,
    )
    run.created_at.FromDatetime(
        created_at or datetime.now(timezone.utc) - timedelta(hours=1)
    )
    run.host.MergeFrom(
        run_pb2.Host(
            cpu_model="AMD EPYC 7763 64-Core Processor",
            cpu_cores=32,
            ram_bytes=256 << 30,
            os="Linux 6.8.0-49-generic (Ubuntu 24.04.1 LTS)",
            hostname_hash="3f" * 32,
            agent_version="0.1.0",
        )
    )
    for index in range(gpu_count):
        run.gpus.append(
            run_pb2.Gpu(
                index=index,
                name=card.name,
                memory_total_bytes=card.memory_total_bytes,
                driver_version="550.127.05",
                cuda_version="12.4",
                compute_capability=card.compute_capability,
                ecc_mode="on" if card.name in ("Tesla T4", "NVIDIA H200") else "off",
                power_limit_watts=card.power_limit_watts,
                pcie_generation=card.pcie_generation,
                pcie_width=16,
                persistence_mode="on",
                uuid_hash=f"{index:02x}" * 32,
            )
        )
    run.software.MergeFrom(
        run_pb2.Software(
            backend=backend,
            backend_version={"tensorflow": "2.21.0", "torch": "2.11.0", "jax": "0.11.0"}[backend]
            if backend in ("tensorflow", "torch", "jax") else "1.0",
            keras_version="3.15.0",
            python_version="3.11.7",
            cuda_runtime_version="12.4",
            cudnn_version="9.1.0",
        )
    )
    run.config.MergeFrom(
        run_pb2.Config(
            model=model,
            image_size=(
                image_size if image_size is not None else record.NATIVE_IMAGE_SIZE.get(model, 224)
            ),
            batch_per_gpu=per_gpu_batch,
            global_batch=per_gpu_batch * count,
            batch_choice=run_pb2.BATCH_CHOICE_GIVEN,
            precision=precision,
            gpu_count=gpu_count,
            epochs=2,
            dataset_name="rps",
            image_count=TRAIN_IMAGES + VALIDATION_IMAGES,
            dataset_fingerprint="a1" * 32,
            validation_split=0.2,
            pipeline="seed",
            weights="imagenet",
            train_images=TRAIN_IMAGES,
            validation_images=VALIDATION_IMAGES,
            seed=12,
        )
    )
    res = run.result
    res.status = status_value
    if ok:
        epoch1 = epoch2_seconds * 3.9
        for number, wall in ((1, epoch1), (2, epoch2_seconds)):
            res.epochs.append(
                run_pb2.Epoch(
                    number=number,
                    wall_seconds=wall,
                    train_seconds=wall * 0.82,
                    validation_seconds=wall * 0.18,
                    energy_joules=power * wall if number == 1 else energy_per_epoch_joules,
                    mean_power_watts=power,
                    max_power_watts=card.power_limit_watts * count,
                    max_temperature_c=71.0,
                    mean_sm_clock_mhz=1590.0,
                    mean_gpu_utilization=93.5,
                    loss=0.61 if number == 1 else 0.23,
                    accuracy=0.74 if number == 1 else 0.92,
                    val_loss=0.48 if number == 1 else 0.19,
                    val_accuracy=0.81 if number == 1 else 0.94,
                    samples=int(wall * 10),
                    energy_source="counter",
                )
            )
        res.measured_epoch = 2
        res.epoch2_seconds = epoch2_seconds
        res.startup_seconds = epoch1 - epoch2_seconds
        res.train_images_per_second = train_images_per_second
        res.step_time_median_seconds = per_gpu_batch * count / train_images_per_second
        res.step_time_cv = 0.04
        res.energy_per_epoch_joules = energy_per_epoch_joules
        res.mean_power_watts = power
        res.max_power_watts = card.power_limit_watts * count
        res.max_temperature_c = 71.0
        res.mean_sm_clock_mhz = 1590.0
        for gpu in run.gpus:
            res.memory.append(
                run_pb2.GpuMemory(
                    gpu_index=gpu.index,
                    allocator_peak_bytes=peak_memory_bytes,
                    process_peak_bytes=min(peak_memory_bytes + (600 * MIB), gpu.memory_total_bytes),
                    device_peak_bytes=min(peak_memory_bytes + (900 * MIB), gpu.memory_total_bytes),
                    memory_total_bytes=gpu.memory_total_bytes,
                )
            )
        res.idle_temperature_c = 38.0
        res.idle_wait_seconds = 4.5
    else:
        res.error_message = {
            run_pb2.RUN_STATUS_OUT_OF_MEMORY: "OOM allocating tensor [128,32,112,112]",
            run_pb2.RUN_STATUS_ERROR: "workload exited with code 1",
            run_pb2.RUN_STATUS_INTERRUPTED: "interrupted by the user",
        }.get(status_value, "")
    for path, value in paths.items():
        _set_path(run, path.split("__"), value)
    return run


def _set_path(message: Any, parts: list[str], value: Any) -> None:
    for part in parts[:-1]:
        message = getattr(message, part)
    field = parts[-1]
    target = getattr(message, field)
    if hasattr(target, "CopyFrom") and not isinstance(value, (int, float, str, bytes)):
        target.CopyFrom(value)
    elif isinstance(value, (list, tuple)):
        del target[:]
        target.extend(value)
    else:
        setattr(message, field, value)
