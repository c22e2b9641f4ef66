"""Building the run record: the workload's events + inventory + telemetry -> gpubench.v1.Run.

`RunBuilder` takes the events as they arrive (`add`), and `build` makes the
record once the workload has ended, whatever the way it ended: a crash, an
out-of-memory error or a Ctrl-C still give a complete record with that status.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from gpubench.agent.inventory import Inventory
from gpubench.agent.runners.base import Outcome, WorkloadRequest
from gpubench.agent.telemetry import IdleReport, Tick, WindowTelemetry, aggregate

from gpubench import gpu_busy, record
from gpubench.events import Event, plain_text
from gpubench.settings import EXIT_OUT_OF_MEMORY, MEASURED_EPOCH, switches
from gpubench.v1 import run_pb2

ERROR_TAIL_LINES = 12

Status = run_pb2.RunStatus


@dataclass(frozen=True)
class Ending:
    """How the run ended: its status and, for a failure, why."""

    status: int
    message: str = ""


def decide_ending(
    outcome: Outcome, error: Event | None, result: Event | None, has_measured_epoch: bool
) -> Ending:
    """The run's status from how the workload ended and what it said last."""
    tail = "\n".join(outcome.output_tail[-ERROR_TAIL_LINES:])
    detail = f"\n{tail}" if tail else ""
    if outcome.interrupted:
        return Ending(Status.RUN_STATUS_INTERRUPTED, "stopped by the user (Ctrl-C)")
    if error is not None:
        message = str(error.get("message", "")) or "the workload reported an error"
        if error.get("status") == "out_of_memory":
            return Ending(Status.RUN_STATUS_OUT_OF_MEMORY, message)
        return Ending(Status.RUN_STATUS_ERROR, message)
    if outcome.exit_code == EXIT_OUT_OF_MEMORY:
        return Ending(Status.RUN_STATUS_OUT_OF_MEMORY, f"the workload ran out of memory{detail}")
    if outcome.signal is not None:
        return Ending(Status.RUN_STATUS_INTERRUPTED, f"the workload {outcome.describe()}{detail}")
    if outcome.exit_code != 0:
        return Ending(Status.RUN_STATUS_ERROR, f"the workload {outcome.describe()}{detail}")
    if result is None:
        return Ending(Status.RUN_STATUS_ERROR, f"the workload ended without a result{detail}")
    if not has_measured_epoch:
        return Ending(Status.RUN_STATUS_ERROR, "the workload's result has no measured epoch")
    return Ending(Status.RUN_STATUS_OK)


def _clip(text: str, limit: int) -> str:
    text = plain_text(text)
    return text if len(text) <= limit else text[: limit - 1] + "…"


class RunBuilder:
    """Collects one model's events and builds its run record."""

    def __init__(
        self,
        request: WorkloadRequest,
        inventory: Inventory,
        *,
        label: str = "",
        gpu_indices: Sequence[int] = (),
    ) -> None:
        self.run = record.new_run(label=label)
        self.request = request
        self.inventory = inventory
        self.gpu_indices = tuple(gpu_indices)
        self.started: Event | None = None
        self.result: Event | None = None
        self.error: Event | None = None
        self.epochs: dict[int, Event] = {}
        self.trials: list[Event] = []
        self.chosen: Event | None = None  # the workload's batch_chosen event
        self.failed_runs: list[run_pb2.BatchTrial] = []  # real runs that ran out of memory
        self.warnings: list[str] = []
        # What the record's telemetry says of the measured epoch (gpubench.gpu_busy), for
        # the console: set by build.
        self.telemetry_notes: list[str] = []

    @property
    def run_id(self) -> str:
        """The run's id (known before the workload starts)."""
        return self.run.run_id

    def add(self, event: Event) -> None:
        """Take one event of the workload's stream."""
        if event.kind == "started":
            self.started = event
        elif event.kind == "batch_trial":
            self.trials.append(event)
        elif event.kind == "batch_chosen":
            self.chosen = event
        elif event.kind == "epoch_finished":
            self.epochs[int(event.get("epoch", 0))] = event
        elif event.kind == "result":
            self.result = event
        elif event.kind == "error":
            self.error = event
        elif event.kind == "warning" and event.get("message"):
            self.warnings.append(str(event.get("message")))

    def warn(self, message: str) -> None:
        """Add the agent's own warning to the record."""
        self.warnings.append(message)

    @property
    def started_batch(self) -> int:
        """The batch the current attempt trains at (0 before it started)."""
        return int(self.started.get("batch_per_gpu") or 0) if self.started else 0

    @property
    def chosen_batch(self) -> int | None:
        """The batch the workload chose from its search (None: given, or not yet)."""
        return int(self.chosen.get("batch") or 0) or None if self.chosen else None

    def retry_batch(self, ending: Ending) -> int | None:
        """The batch to run again at after the run ran out of memory at a batch the
        search chose (the next smaller confirmed one), or None: only a chosen batch is
        run again, never a given one."""
        if ending.status != Status.RUN_STATUS_OUT_OF_MEMORY or self.chosen is None:
            return None
        if self.started is None or self.result is not None:
            return None  # it failed in the search, not in the run
        failed = self.started.get("batch_per_gpu")
        return next((int(b) for b in self.chosen.get("fallbacks") or () if b < failed), None)

    def begin_retry(self, ending: Ending, batch: int) -> None:
        """Keep the search and the failure, forget the failed run's events: the workload
        runs again at `batch`."""
        failed = int(self.started.get("batch_per_gpu") or 0) if self.started else 0
        epochs = len(self.epochs)
        where = f"in epoch {epochs + 1}" if epochs < MEASURED_EPOCH else "after its epochs"
        self.failed_runs.append(run_pb2.BatchTrial(
            batch=failed, fits=False, kind="run",
            message=_clip(f"the run ran out of memory {where}: {ending.message}",
                          record.MAX_TEXT_CHARS)))
        self.warn(f"batch {failed} ran out of memory {where} of the real run although its "
                  f"trial fit; ran again at batch {batch}")
        self.started = self.result = self.error = None
        self.epochs = {}

    def ending(self, outcome: Outcome) -> Ending:
        """How the workload's run ended, from what it said and how it exited."""
        return decide_ending(outcome, self.error, self.result,
                             self.measured_epoch in self.epochs)

    @property
    def measured_epoch(self) -> int:
        """The headline epoch (the workload's result says; 2 by the protocol)."""
        if self.result is not None and self.result.get("measured_epoch"):
            return int(self.result.get("measured_epoch"))
        return MEASURED_EPOCH

    # -- building -------------------------------------------------------------------

    def build(
        self,
        outcome: Outcome,
        ticks: Sequence[Tick] = (),
        idle: IdleReport | None = None,
    ) -> run_pb2.Run:
        """The complete run record."""
        run = self.run
        self._host(run, outcome)
        self._software(run)
        self._config(run)
        gpu_count = run.config.gpu_count
        used = [gpu for gpu in self.inventory.gpus if gpu.index in self.gpu_indices[:gpu_count]]
        run.gpus.extend(used)

        result = run.result
        windows: dict[int, WindowTelemetry] = {}
        for number in sorted(self.epochs):
            event = self.epochs[number]
            window = WindowTelemetry()
            if ticks and event.get("t_start") is not None and event.get("t_end") is not None:
                window = aggregate(ticks, float(event.get("t_start")), float(event.get("t_end")))
            windows[number] = window
            result.epochs.append(_epoch(number, event, window))

        measured = self.measured_epoch
        ending = self.ending(outcome)
        result.status = ending.status
        result.error_message = _clip(ending.message, record.MAX_MESSAGE_CHARS)
        if measured in self.epochs:
            result.measured_epoch = measured
            result.epoch2_seconds = float(self.epochs[measured].get("wall_seconds", 0.0))
            if 1 in self.epochs and measured != 1:
                result.startup_seconds = (
                    float(self.epochs[1].get("wall_seconds", 0.0)) - result.epoch2_seconds
                )
            _telemetry(result, windows[measured])
            if result.startup_seconds < 0:
                self.warn(slower_second_epoch(result, windows.get(1), windows[measured]))
        if self.result is not None:
            for name in ("train_images_per_second", "step_time_median_seconds", "step_time_cv"):
                if self.result.get(name) is not None:
                    setattr(result, name, float(self.result.get(name)))
            self.warnings.extend(str(w) for w in self.result.get("warnings") or ())
        self._memory(run, windows.get(measured))
        for trial in self.trials:
            result.batch_trials.append(
                run_pb2.BatchTrial(
                    batch=int(trial.get("batch", 0)),
                    fits=bool(trial.get("fits", False)),
                    peak_memory_bytes=int(trial.get("peak_memory_bytes") or 0),
                    reserved_peak_bytes=int(trial.get("reserved_peak_bytes") or 0),
                    seconds=float(trial.get("seconds") or 0.0),
                    message=_clip(str(trial.get("message") or ""), record.MAX_TEXT_CHARS),
                    kind=str(trial.get("kind") or ""),
                )
            )
        result.batch_trials.extend(self.failed_runs)
        self._search(result)
        if idle is not None:
            result.idle_temperature_c = idle.temperature_c
            result.idle_wait_seconds = idle.waited_seconds
        # A GPU that mostly waited through the measured epoch: the figure times the host.
        self.telemetry_notes = [note for note in (gpu_busy.idle_gpu_warning(run),
                                                  gpu_busy.few_samples_note(run)) if note]
        for note in self.telemetry_notes:
            self.warn(note)
        seen: set[str] = set()
        for warning in self.warnings:
            if warning not in seen and len(result.warnings) < record.MAX_WARNINGS:
                seen.add(warning)
                result.warnings.append(_clip(warning, record.MAX_TEXT_CHARS))
        return run

    def _search(self, result: run_pb2.Result) -> None:
        """The memory answer: the largest batch the search confirmed, and its cost."""
        if self.chosen is None:
            return
        largest = int(self.chosen.get("largest") or 0)
        failed = [trial.batch for trial in self.failed_runs]
        if failed and largest >= min(failed) and self.started is not None:
            # A real run at a smaller batch failed: only the batch that trained counts.
            largest = int(self.started.get("batch_per_gpu") or 0)
        result.largest_batch_per_gpu = largest
        result.largest_batch_capped = bool(self.chosen.get("capped")) and not failed
        result.search_seconds = float(self.chosen.get("search_seconds") or 0.0)

    def _host(self, run: run_pb2.Run, outcome: Outcome) -> None:
        run.host.CopyFrom(self.inventory.host)
        run.host.container_image = outcome.image
        run.host.container_image_digest = outcome.image_digest

    def _software(self, run: run_pb2.Run) -> None:
        started = self.started.data if self.started is not None else {}
        software = run.software
        software.backend = str(started.get("backend") or self.request.setting("backend")
                               or "tensorflow")
        for name in ("backend_version", "keras_version", "python_version",
                     "cuda_runtime_version", "cudnn_version"):
            if started.get(name):
                setattr(software, name, str(started[name]))

    def _config(self, run: run_pb2.Run) -> None:
        # What the workload says it ran; what was asked where it never said.
        started: dict[str, Any] = self.started.data if self.started is not None else {}
        request = self.request
        config = run.config
        config.model = str(started.get("model") or request.model)
        config.precision = str(started.get("precision") or request.setting("precision")
                               or "float32")
        gpu_count = started.get("gpu_count")
        if gpu_count is None:
            gpu_count = request.setting("gpus")
            if gpu_count is None:
                gpu_count = len(self.gpu_indices)
        config.gpu_count = int(gpu_count)
        config.image_size = int(
            started.get("image_size")
            or request.setting("image_size")
            or record.NATIVE_IMAGE_SIZE.get(config.model, 0)
        )
        batch = started.get("batch_per_gpu") or self.chosen_batch or request.batch
        if batch:
            config.batch_per_gpu = int(batch)
            config.global_batch = int(
                started.get("global_batch") or config.batch_per_gpu * max(config.gpu_count, 1)
            )
        if self.chosen is not None:  # a retry runs at a given batch; the search chose it
            choice, rule = "searched", str(self.chosen.get("rule") or request.batch_rule)
        else:
            choice = started.get("batch_choice") or ("given" if request.batch else "searched")
            rule = str(started.get("batch_rule") or request.batch_rule)
        config.batch_choice = (
            run_pb2.BATCH_CHOICE_GIVEN if choice == "given" else run_pb2.BATCH_CHOICE_SEARCHED
        )
        config.batch_rule = rule
        config.memory_limit_bytes = int(started.get("memory_limit_bytes")
                                        or request.setting("memory_limit_bytes") or 0)
        config.epochs = int(started.get("epochs") or request.setting("epochs")
                            or MEASURED_EPOCH)
        config.pipeline = str(started.get("pipeline") or request.setting("pipeline") or "")
        # What ran, which the pipeline asked for may not be: a cached run whose images do
        # not fit the host streams them ("streaming"); --data-on-device keeps them on the GPU.
        if self.result is not None and self.result.get("pipeline_mode"):
            config.pipeline_mode = str(self.result.get("pipeline_mode"))
        config.weights = str(started.get("weights") or request.setting("weights") or "")
        for name in switches():
            setattr(config, name, bool(started.get(name, False)))
        for name in ("cuda_graphs", "jit_compile"):  # what ran, which may not be as asked
            if self.result is not None and self.result.get(name) is not None:
                setattr(config, name, bool(self.result.get(name)))
        dataset = started.get("dataset") or {}
        config.dataset_name = str(dataset.get("name") or "")
        config.image_count = int(dataset.get("image_count") or 0)
        # The record's hashes are bare hex digests (like hostname_hash and uuid_hash).
        fingerprint = str(dataset.get("fingerprint") or "")
        config.dataset_fingerprint = fingerprint.removeprefix("sha256:")
        config.validation_split = float(dataset.get("validation_split") or 0.0)
        config.train_images = int(dataset.get("train_images") or 0)
        config.validation_images = int(dataset.get("validation_images") or 0)
        config.seed = int(dataset.get("seed") or 0)
        skipped = dataset.get("skipped_files")
        if skipped:
            count = len(skipped) if isinstance(skipped, list) else int(skipped)
            self.warn(f"{count} file(s) in the dataset folder are not images and were skipped")

    def _memory(self, run: run_pb2.Run, window: WindowTelemetry | None) -> None:
        totals = {gpu.index: gpu.memory_total_bytes for gpu in run.gpus}
        allocator: dict[int, dict[str, Any]] = {}
        if self.result is not None:
            for entry in self.result.get("memory") or ():
                allocator[int(entry.get("gpu_index", 0))] = entry
        for index in sorted(set(totals) | set(allocator)):
            entry = allocator.get(index, {})
            memory = run_pb2.GpuMemory(
                gpu_index=index,
                allocator_peak_bytes=int(entry.get("allocator_peak_bytes") or 0),
                allocator_reserved_peak_bytes=int(entry.get("reserved_peak_bytes") or 0),
                memory_total_bytes=int(totals.get(index) or entry.get("memory_total_bytes") or 0),
            )
            if window is not None:
                memory.process_peak_bytes = window.process_peak_bytes.get(index, 0)
                memory.device_peak_bytes = window.device_peak_bytes.get(index, 0)
            if index not in totals:
                continue  # the record keeps memory of the GPUs it lists only
            run.result.memory.append(memory)


def _epoch(number: int, event: Event, window: WindowTelemetry) -> run_pb2.Epoch:
    epoch = run_pb2.Epoch(number=number, samples=window.samples)
    for name in ("wall_seconds", "train_seconds", "validation_seconds", "loss", "accuracy",
                 "val_loss", "val_accuracy"):
        value = event.get(name)
        if value is not None:
            setattr(epoch, name, float(value))
    if window.energy_source:
        epoch.energy_joules = window.energy_joules
        epoch.energy_source = window.energy_source
        epoch.mean_power_watts = window.mean_power_watts
    epoch.max_power_watts = window.max_power_watts
    epoch.max_temperature_c = window.max_temperature_c
    epoch.mean_sm_clock_mhz = window.mean_sm_clock_mhz
    epoch.mean_gpu_utilization = window.mean_gpu_utilization
    return epoch


# A clock this much lower in the measured epoch than in the first says the card slowed down.
CLOCK_DROP = 0.03


def slower_second_epoch(result: run_pb2.Result, first: WindowTelemetry | None,
                        measured: WindowTelemetry) -> str:
    """The warning for a run whose measured epoch was slower than its first (start-up below
    0): the card throttled, or lost clock speed as it warmed, or neither was seen."""
    lost = -result.startup_seconds
    head = (f"epoch {result.measured_epoch} took {lost:.3g} s longer than epoch 1 (start-up "
            f"{result.startup_seconds:.3g} s)")
    if measured.throttle_reasons:
        return f"{head}: the GPU throttled ({', '.join(measured.throttle_reasons)})"
    if first is not None and first.mean_sm_clock_mhz and measured.mean_sm_clock_mhz and (
            measured.mean_sm_clock_mhz < first.mean_sm_clock_mhz * (1 - CLOCK_DROP)):
        return (f"{head}: the GPU warmed up and slowed, its clock from "
                f"{first.mean_sm_clock_mhz:.0f} to {measured.mean_sm_clock_mhz:.0f} MHz")
    return (f"{head}: neither throttling nor a lower clock was seen; another process or the "
            "host may have slowed it")


def _telemetry(result: run_pb2.Result, window: WindowTelemetry) -> None:
    result.energy_per_epoch_joules = window.energy_joules
    result.mean_power_watts = window.mean_power_watts
    result.max_power_watts = window.max_power_watts
    result.max_temperature_c = window.max_temperature_c
    result.mean_sm_clock_mhz = window.mean_sm_clock_mhz
    result.throttle_reasons.extend(window.throttle_reasons)
