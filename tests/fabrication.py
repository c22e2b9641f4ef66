"""Fabricated runs made from the project's own real H200 record, scaled consistently:
what a stranger with an ordinary token can submit to lead the leaderboard. The tests
of the collector's checks and the fault campaign's fabrication part
(tests/chaos/chaos_fabrication.py) submit these.

A scaled run claims `factor` times the real run's speed and keeps every figure in step
(epoch, training and validation times, step times, images/s, energy at the same power),
so no check of the record against itself can catch it; only the catalogue, the verified
runs and the aggregation can.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from pathlib import Path

from gpubench import record
from gpubench.collector import ceilings, plausibility
from gpubench.v1 import run_pb2

ROOT = Path(__file__).resolve().parents[1]
# The real float32 default run of B0 on the H200 (epoch 2 0.698 s, 2,739 images/s).
REAL_RECORD = ROOT / "docs" / "results" / "runs" / "h200-b0-default.json"
# The factors the fabricated cases claim over the real run.
SCALED_H200 = (1.3, 2.0, 4.0, 5.7)
# One card of each kind people train on, by the names NVML gives them: the fabrications
# that once led the default leaderboard. All but the H100 (its own verified runs) are
# held to another card's verified run scaled to them.
SPREAD = ("NVIDIA GeForce GTX 1070", "Tesla T4", "NVIDIA GeForce RTX 4090",
          "NVIDIA GeForce RTX 5090", "NVIDIA L4", "NVIDIA A100-SXM4-80GB",
          "NVIDIA H100 80GB HBM3", "NVIDIA H200 NVL", "NVIDIA B200")
# One token's flood: this many runs, each this much faster than the real one.
FLOOD_RUNS = 10
FLOOD_FACTOR = 1.5


def real_run() -> run_pb2.Run:
    """The real H200 default B0 run, with a fresh run id."""
    data = json.loads(REAL_RECORD.read_text())
    run = record.from_dict(data[0] if isinstance(data, list) else data)
    run.run_id = str(uuid.uuid4())
    return run


def scaled(factor: float, *, gpu_name: str = "", memory_bytes: int = 0,
           energy_joules: float | None = None, power_watts: float | None = None,
           base: run_pb2.Run | None = None) -> run_pb2.Run:
    """The real run (or `base`) claiming `factor` times its speed, every figure in step;
    optionally on a GPU of another name, with other memory, or with the measured epoch's
    energy and the run's mean power replaced (the rest left consistent)."""
    run = run_pb2.Run()
    run.CopyFrom(base or real_run())
    run.run_id = str(uuid.uuid4())
    res = run.result
    for epoch in res.epochs:
        for name in ("wall_seconds", "train_seconds", "validation_seconds", "energy_joules"):
            setattr(epoch, name, getattr(epoch, name) / factor)
    for name in ("epoch2_seconds", "startup_seconds", "step_time_median_seconds",
                 "energy_per_epoch_joules"):
        setattr(res, name, getattr(res, name) / factor)
    res.train_images_per_second *= factor
    for gpu in run.gpus:
        if gpu_name:
            gpu.name = gpu_name
        if memory_bytes:
            gpu.memory_total_bytes = memory_bytes
    measured = next(e for e in res.epochs if e.number == res.measured_epoch)
    if energy_joules is not None:
        measured.energy_joules = res.energy_per_epoch_joules = energy_joules
    if power_watts is not None:
        measured.mean_power_watts = res.mean_power_watts = power_watts
        measured.max_power_watts = res.max_power_watts = power_watts
    return run


def expected_rate(gpu_name: str, base: run_pb2.Run | None = None) -> float:
    """What the collector expects of the real run's configuration (or `base`'s) on the
    card of that name (ceilings.Specs.expectation), training images a second."""
    cfg = (base or real_run()).config
    specs = ceilings.specs()
    expected = specs.expectation(specs.spec_of(gpu_name), cfg.model, record.settings_label(cfg),
                                 cfg.precision, record.batch_rule(cfg))
    assert expected is not None, gpu_name
    return expected.rate


def on_card(gpu_name: str, times_expected: float) -> run_pb2.Run:
    """The real run moved to the card of that name, claiming `times_expected` times what
    the collector expects of that card, every figure in step and within the card: its
    memory and power limit the catalogue's, its memory peaks under them, its epochs at
    60% of its power limit."""
    base = real_run()
    run = scaled(times_expected * expected_rate(gpu_name, base) / plausibility.claimed_rate(base),
                 gpu_name=gpu_name, base=base)
    card = ceilings.specs().spec_of(gpu_name)
    total = int(card.memory_gib * 0.95 * (1 << 30))  # NVML reports a little less
    for gpu in run.gpus:
        gpu.memory_total_bytes, gpu.power_limit_watts = total, card.power_watts
    for memory in run.result.memory:
        memory.memory_total_bytes = total
        for name in ("allocator_peak_bytes", "process_peak_bytes", "device_peak_bytes",
                     "allocator_reserved_peak_bytes"):
            setattr(memory, name, min(getattr(memory, name), total // 2))
    watts = 0.6 * card.power_watts
    res = run.result
    for epoch in res.epochs:
        epoch.mean_power_watts = epoch.max_power_watts = watts
        epoch.energy_joules = watts * epoch.wall_seconds
    measured = next(e for e in res.epochs if e.number == res.measured_epoch)
    res.mean_power_watts = res.max_power_watts = watts
    res.energy_per_epoch_joules = measured.energy_joules
    return run


@dataclass(frozen=True)
class Case:
    """One fabricated submission: what it is, and the run."""

    name: str
    run: run_pb2.Run


TIB = 1 << 40


def cases() -> list[Case]:
    """Every fabrication that once led or passed: the H200 at 1.3x-5.7x, made-up names,
    look-alikes, a suffix of no catalogued card, energy of nothing at no power, the run
    claimed on the CPU alone, on an H200 NVL at 5.5x, and on each card of SPREAD at 3x
    what it is expected to reach."""
    found = [Case(f"NVIDIA H200 at {f:g}x", scaled(f)) for f in SCALED_H200]
    found += [
        Case("NVIDIA H300 at 10x", scaled(10.0, gpu_name="NVIDIA H300")),
        Case("NVIDIA H300 at 50x", scaled(50.0, gpu_name="NVIDIA H300")),
        Case("NVIDIA H300 with 1 TiB", scaled(2.0, gpu_name="NVIDIA H300", memory_bytes=TIB)),
        Case("Quantum Accelerator Q1 at 40x", scaled(40.0, gpu_name="Quantum Accelerator Q1")),
        Case("NVIDIA-H200 at 20x", scaled(20.0, gpu_name="NVIDIA-H200")),
        Case("NVIDIA H2OO at 20x", scaled(20.0, gpu_name="NVIDIA H2OO")),
        Case("NVIDlA H200 at 20x", scaled(20.0, gpu_name="NVIDlA H200")),
        Case("nvidia h200 at 20x", scaled(20.0, gpu_name="nvidia h200")),
        Case("NVIDIA H200 Ultra at 5.5x", scaled(5.5, gpu_name="NVIDIA H200 Ultra")),
        Case("1e-300 J at 0 W", scaled(1.0, energy_joules=1e-300, power_watts=0.0)),
        Case("CPU (no GPU) at 10x", on_the_cpu(scaled(10.0))),
    ]
    found.append(Case("NVIDIA H200 NVL at 5.5x", scaled(5.5, gpu_name="NVIDIA H200 NVL")))
    found += [Case(f"{_short(name)} at 3x expected", on_card(name, 3.0)) for name in SPREAD]
    return found


def _short(gpu_name: str) -> str:
    """A card's name without the maker's and the line's words, for a table's case."""
    return gpu_name.removeprefix("NVIDIA ").removeprefix("GeForce ")


def on_the_cpu(run: run_pb2.Run) -> run_pb2.Run:
    """The run as a CPU run: no GPU listed, none used, no GPU memory or energy."""
    del run.gpus[:]
    del run.result.memory[:]
    run.config.gpu_count = 0
    res = run.result
    res.energy_per_epoch_joules = res.mean_power_watts = res.max_power_watts = 0.0
    for epoch in res.epochs:
        epoch.energy_joules = epoch.mean_power_watts = epoch.max_power_watts = 0.0
    return run


def flood() -> list[run_pb2.Run]:
    """One token's flood: FLOOD_RUNS runs at FLOOD_FACTOR the real run's speed."""
    return [scaled(FLOOD_FACTOR) for _ in range(FLOOD_RUNS)]


def blank_named() -> run_pb2.Run:
    """The real run on a GPU whose name is three spaces (once listed as "CPU")."""
    return scaled(1.0, gpu_name="   ")
