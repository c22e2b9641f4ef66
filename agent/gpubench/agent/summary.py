"""The end of a run: one table of what was measured, and how this run compares with the
collector's other runs like it (never with itself)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from rich.table import Table
from rich.text import Text

from gpubench import figures, models, record
from gpubench.agent.display import fed_with
from gpubench.comparison_key import key_of
from gpubench.figures import MISSING
from gpubench.tables import BATCH_LEGEND, narrow_table
from gpubench.v1 import collector_pb2, run_pb2

GIB = 1 << 30


def _memory(run: run_pb2.Run) -> str:
    # The allocator's peak is the protocol's figure; NVML's process peak (what
    # the card really gave the process) follows it where it was measured.
    if not run.result.memory:
        return MISSING
    allocator = sum(m.allocator_peak_bytes for m in run.result.memory)
    process = sum(m.process_peak_bytes for m in run.result.memory)
    # A run with --memory-limit is measured against its limit (on every GPU), not the card.
    limit = run.config.memory_limit_bytes * len(run.result.memory)
    total = limit or sum(m.memory_total_bytes for m in run.result.memory)
    parts = []
    if allocator:
        parts.append(figures.memory(allocator / GIB, allocator / total if total else None,
                                    of_limit=bool(limit)))
    if process:
        parts.append(f"NVML {figures.gib(process / GIB)}")
    return "\n".join(parts) or MISSING


def summary_table(runs: Sequence[run_pb2.Run]) -> Table:
    """Per model: status, epoch 1 / epoch 2 time, images/s, batch, peak memory and
    share of the card, energy per epoch, mean power."""
    first = runs[0] if runs else None
    where = (record.gpu_config_name(first.gpus[0].name, first.config.gpu_count,
                                    first.config.memory_limit_bytes)
             if first is not None and first.gpus else "CPU only")
    searched_any = any(r.result.largest_batch_per_gpu for r in runs)
    # What each run's speed counts (images, or a language model's tokens): one unit in the
    # heading, or each figure with its own.
    units = [models.unit_of(r.config.model, r.config.unit) for r in runs]
    one_unit = units[0] if len(set(units)) == 1 else ""
    rate = figures.rate_unit(one_unit) if one_unit else "speed"
    # The query CLI's narrow layout: fits 80 columns, wraps rather than cuts.
    table = narrow_table(
        f"gpubench on {where}",
        f"epoch 1, epoch 2: wall time; {rate}: "
        + (f"{figures.unit_words(one_unit)}" if one_unit else "training images or tokens")
        + " a second in epoch 2; "
        "energy and power: the measured epoch, all GPUs; "
        + (BATCH_LEGEND if searched_any else f"timed batch: {figures.TIMED_BATCH_MEANS}"),
    )
    table.add_column("model")
    table.add_column("status")
    table.add_column("epoch 1", justify="right")
    table.add_column("epoch 2", justify="right")
    table.add_column(rate, justify="right")
    table.add_column(figures.TIMED_BATCH, justify="right")
    if searched_any:
        table.add_column(figures.LARGEST_BATCH, justify="right")
    table.add_column("peak memory", justify="right")
    table.add_column("energy", justify="right")
    table.add_column("power", justify="right")
    for run, unit in zip(runs, units, strict=True):
        result = run.result
        epochs = {epoch.number: epoch for epoch in result.epochs}
        status = record.status_name(result.status)
        config = run.config
        table.add_row(
            config.model,
            status if status == "ok" else f"[red]{status}[/red]",
            figures.seconds(epochs[1].wall_seconds if 1 in epochs else 0.0),
            figures.seconds(result.epoch2_seconds),
            figures.three_digits(result.train_images_per_second or None)
            + ("" if one_unit else f" {figures.rate_unit(unit)}"),
            figures.batch(config.batch_per_gpu, config.global_batch, config.gpu_count),
            *([figures.largest_batch(result.largest_batch_per_gpu, result.largest_batch_capped)]
              if searched_any else []),
            _memory(run),
            figures.energy(result.energy_per_epoch_joules),
            figures.measured(result.mean_power_watts, "W"),
        )
    return table


# -- after the push: this run against the collector's others ------------------------------


def others_like(run: run_pb2.Run, stored: Iterable[collector_pb2.StoredRun]
                ) -> list[collector_pb2.StoredRun]:
    """The stored runs comparable with `run`: the same model and comparison key, finished
    and measured (not published, flagged or an outlier), and not `run` itself."""
    # The collector's own key (a record of schema 1 reads its batch rule from its
    # batch_choice, as `gpubench compare` does).
    key = key_of(run)
    return [s for s in stored
            if s.run.run_id != run.run_id and s.run.config.model == run.config.model
            and not (s.run.published or s.flagged or s.outlier)
            and s.run.result.status == run_pb2.RUN_STATUS_OK and s.run.result.epoch2_seconds
            and key_of(s.run) == key]


def standing(run: run_pb2.Run, others: Sequence[collector_pb2.StoredRun]) -> Table | str:
    """This run beside the others like it, grouped by GPU configuration (median epoch 2
    and images a second; the speedup: how many times faster each is than this run); or,
    with none, a sentence saying there is nothing to compare with."""
    from gpubench import frames

    config = run.config
    if not others:
        key = key_of(run)
        return (f"{config.model}: nothing to compare with yet: the collector holds no other "
                f"run of {config.model} like this one ({key.backend}, "
                f"{key.precision}, {fed_with(config.image_size, config.input_spec)}, "
                f"{key.train_images} training "
                f"{'sequences' if config.unit == models.TOKENS else 'images'}, "
                f"settings {key.settings}, batch "
                f"{key.batch_rule or 'unrecorded'}); `gpubench compare --model "
                f"{config.model} --allow-mixed` shows unlike ones")
    frame = frames.runs_frame(others)
    groups = frame.groupby("gpu_config", sort=False).agg(
        runs=("run_id", "size"), epoch2=("epoch2_s", "median"),
        per_second=("train_images_per_s", "median")).sort_values("epoch2")
    mine = frames.flat_run(collector_pb2.StoredRun(run=run))
    unit = models.unit_of(config.model, config.unit)
    table = narrow_table(
        f"{config.model}: this run beside the collector's others like it",
        f"{figures.SPEEDUP}: {figures.SPEEDUP_MEANS}, this run the baseline; "
        f"{figures.rate_unit(unit)}: {figures.unit_words(unit)} a second")
    for name, right in (("GPU config", False), ("runs", True), ("epoch 2 (s)", True),
                        (figures.rate_unit(unit), True), (figures.SPEEDUP, True)):
        table.add_column(name, justify="right" if right else "left")
    table.add_row(Text(f"{mine['gpu_config']} (this run)", style="bold"), "1",
                  figures.seconds(mine["epoch2_s"], unit=False),
                  figures.three_digits(mine["train_images_per_s"]), "1.00x")
    for name, group in groups.iterrows():
        table.add_row(Text(str(name)), str(int(group["runs"])),
                      figures.seconds(group["epoch2"], unit=False),
                      figures.three_digits(group["per_second"]),
                      figures.speedup(mine["epoch2_s"] / group["epoch2"]))
    return table
