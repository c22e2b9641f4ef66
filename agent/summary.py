"""The end of a run: one table of what was measured, and how this host compares."""

from __future__ import annotations

from collections.abc import Sequence

from rich.table import Table

from gpubench import record
from gpubench.tables import narrow_table
from gpubench.v1 import run_pb2

GIB = 1 << 30
MISSING = "-"


def _seconds(value: float) -> str:
    return f"{value:.1f} s" if value else MISSING


def _memory(run: run_pb2.Run) -> str:
    # The allocator's peak is the protocol's figure; NVML's process peak (what
    # the card really gave the process) follows it where it was measured.
    if not run.result.memory:
        return MISSING
    allocator = sum(m.allocator_peak_bytes for m in run.result.memory)
    process = sum(m.process_peak_bytes for m in run.result.memory)
    total = sum(m.memory_total_bytes for m in run.result.memory)
    parts = []
    if allocator:
        share = f" ({allocator / total:.0%})" if total else ""
        parts.append(f"{allocator / GIB:.1f} GiB{share}")
    if process:
        parts.append(f"NVML {process / GIB:.1f} GiB")
    return "\n".join(parts) or MISSING


def _energy(joules: float) -> str:
    # 0 means "not measured" in the record; the query CLI's formatter does the rest,
    # so the agent's summary and `gpubench compare` show energy alike.
    from gpubench.tables import format_energy

    return format_energy(joules) if joules else MISSING


def summary_table(runs: Sequence[run_pb2.Run]) -> Table:
    """Per model: status, epoch 1 / epoch 2 time, images/s, batch, peak memory and
    share of the card, energy per epoch, mean power."""
    first = runs[0] if runs else None
    where = (record.gpu_config_name(first.gpus[0].name, first.config.gpu_count)
             if first is not None and first.gpus else "CPU only")
    searched_any = any(r.result.largest_batch_per_gpu for r in runs)
    # The query CLI's narrow layout: fits 80 columns, wraps rather than cuts.
    table = narrow_table(
        f"gpubench on {where}",
        "epoch 1, epoch 2: wall time; img/s: training images a second in epoch 2; "
        "energy and power: the measured epoch, all GPUs"
        + ("; fits: the largest batch per GPU that fits (+: every training image)"
           if searched_any else ""),
    )
    table.add_column("model")
    table.add_column("status")
    table.add_column("epoch 1", justify="right")
    table.add_column("epoch 2", justify="right")
    table.add_column("img/s", justify="right")
    table.add_column("batch", justify="right")
    if searched_any:
        table.add_column("fits", justify="right")
    table.add_column("peak memory", justify="right")
    table.add_column("energy", justify="right")
    table.add_column("power", justify="right")
    for run in runs:
        result = run.result
        epochs = {epoch.number: epoch for epoch in result.epochs}
        status = record.status_name(result.status)
        batch = run.config.global_batch or run.config.batch_per_gpu
        largest = result.largest_batch_per_gpu
        table.add_row(
            run.config.model,
            status if status == "ok" else f"[red]{status}[/red]",
            _seconds(epochs[1].wall_seconds if 1 in epochs else 0.0),
            _seconds(result.epoch2_seconds),
            f"{result.train_images_per_second:.0f}" if result.train_images_per_second else MISSING,
            str(batch) if batch else MISSING,
            *([f"{largest}{'+' if result.largest_batch_capped else ''}" if largest else MISSING]
              if searched_any else []),
            _memory(run),
            _energy(result.energy_per_epoch_joules),
            f"{result.mean_power_watts:.0f} W" if result.mean_power_watts else MISSING,
        )
    return table
