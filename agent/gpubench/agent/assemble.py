"""Building the run record: the workload's events + inventory + telemetry -> gpubench.v1.Run.

`RunBuilder` takes the events as they arrive (`add`), and `build` makes the
record once the workload has ended, whatever the way it ended: a crash, an
out-of-memory error or a Ctrl-C still give a complete record with that status.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from gpubench import gpu_busy, models, record
from gpubench.agent.inventory import Inventory
from gpubench.agent.runners.base import Outcome, WorkloadRequest
from gpubench.agent.telemetry import IdleReport, Tick, WindowTelemetry, aggregate
from gpubench.events import (
    BatchChosen,
    BatchTrial,
    EpochFinished,
    ErrorEvent,
    Event,
    GpuPeak,
    Result,
    Started,
    WarningEvent,
    plain_text,
)
from gpubench.settings import (
    EXIT_OUT_OF_MEMORY,
    MEASURED_EPOCH,
    default_precision,
    switches,
)
from gpubench.v1 import run_pb2

ERROR_TAIL_LINES = 12

Status = run_pb2.RunStatus


@dataclass(frozen=True)
class Ending:
    """How the run ended: its status and, for a failure, why."""

    status: run_pb2.RunStatus
    message: str = ""


def decide_ending(
    outcome: Outcome, error: ErrorEvent | None, result: Result | None, has_measured_epoch: bool
) -> Ending:
    """The run's status from how the workload ended and what it said last."""
    tail = "\n".join(outcome.output_tail[-ERROR_TAIL_LINES:])
    detail = f"\n{tail}" if tail else ""
    if outcome.interrupted:
        return Ending(Status.RUN_STATUS_INTERRUPTED, "stopped by the user (Ctrl-C)")
    if error is not None:
        message = error.message or "the workload reported an error"
        if error.status == "out_of_memory":
            return Ending(Status.RUN_STATUS_OUT_OF_MEMORY, message)
        return Ending(Status.RUN_STATUS_ERROR, message)
    if outcome.exit_code == EXIT_OUT_OF_MEMORY:
        return Ending(Status.RUN_STATUS_OUT_OF_MEMORY, f"the workload ran out of memory{detail}")
    # Killed by a signal the agent did not send (that is `interrupted`): a crash, or the
    # kernel's out-of-memory killer (the runner names it), never an interruption.
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
        self.started: Started | None = None
        self.result: Result | None = None
        self.error: ErrorEvent | None = None
        self.epochs: dict[int, EpochFinished] = {}
        self.trials: list[BatchTrial] = []
        self.chosen: BatchChosen | None = None  # the workload's batch_chosen event
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
        if isinstance(event, Started):
            self.started = event
        elif isinstance(event, BatchTrial):
            self.trials.append(event)
        elif isinstance(event, BatchChosen):
            self.chosen = event
        elif isinstance(event, EpochFinished):
            self.epochs[event.epoch] = event
        elif isinstance(event, Result):
            self.result = event
        elif isinstance(event, ErrorEvent):
            self.error = event
        elif isinstance(event, WarningEvent) and event.message:
            self.warnings.append(event.message)

    def warn(self, message: str) -> None:
        """Add the agent's own warning to the record."""
        self.warnings.append(message)

    @property
    def started_batch(self) -> int:
        """The batch the current attempt trains at (0 before it started)."""
        return self.started.batch_per_gpu if self.started else 0

    @property
    def chosen_batch(self) -> int | None:
        """The batch the workload chose from its search (None: given, or not yet)."""
        return self.chosen.batch or None if self.chosen else None

    def retry_batch(self, ending: Ending) -> int | None:
        """The batch to run again at after the run ran out of memory at a batch the
        search chose (the next smaller confirmed one), or None: only a chosen batch is
        run again, never a given one."""
        if ending.status != Status.RUN_STATUS_OUT_OF_MEMORY or self.chosen is None:
            return None
        if self.started is None or self.result is not None:
            return None  # it failed in the search, not in the run
        failed = self.started.batch_per_gpu
        return next((b for b in self.chosen.fallbacks if b < failed), None)

    def begin_retry(self, ending: Ending, batch: int) -> None:
        """Keep the search and the failure, forget the failed run's events: the workload
        runs again at `batch`."""
        failed = self.started_batch
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
        if self.result is not None and self.result.measured_epoch:
            return self.result.measured_epoch
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
            window = aggregate(ticks, event.t_start, event.t_end) if ticks else WindowTelemetry()
            windows[number] = window
            result.epochs.append(_epoch(number, event, window))

        measured = self.measured_epoch
        ending = self.ending(outcome)
        result.status = ending.status
        result.error_message = _clip(ending.message, record.MAX_MESSAGE_CHARS)
        if measured in self.epochs:
            result.measured_epoch = measured
            result.epoch2_seconds = self.epochs[measured].wall_seconds
            if 1 in self.epochs and measured != 1:
                result.startup_seconds = self.epochs[1].wall_seconds - result.epoch2_seconds
            _telemetry(result, windows[measured])
            if result.startup_seconds < 0:
                self.warn(slower_second_epoch(result, windows.get(1), windows[measured]))
        if self.result is not None:
            for name in ("train_images_per_second", "step_time_median_seconds", "step_time_cv"):
                value = getattr(self.result, name)
                if value is not None:
                    setattr(result, name, value)
            programs = self.result.xla_programs
            if programs is not None:  # JAX: compiled, or loaded from the compilation cache
                result.xla_programs.CopyFrom(run_pb2.XlaPrograms(
                    compiled=programs.compiled, loaded=programs.loaded,
                    seconds=programs.seconds, cache=programs.cache))
            self.warnings.extend(self.result.warnings)
        self._memory(run, windows.get(measured))
        for trial in self.trials:
            result.batch_trials.append(
                run_pb2.BatchTrial(
                    batch=trial.batch,
                    fits=trial.fits,
                    peak_memory_bytes=trial.peak_memory_bytes,
                    reserved_peak_bytes=trial.reserved_peak_bytes,
                    seconds=trial.seconds,
                    message=_clip(trial.message, record.MAX_TEXT_CHARS),
                    kind=trial.trial_kind,
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
        search = self.chosen.search
        largest = search.largest
        failed = [trial.batch for trial in self.failed_runs]
        if failed and largest >= min(failed) and self.started is not None:
            # A real run at a smaller batch failed: only the batch that trained counts.
            largest = self.started.batch_per_gpu
        result.largest_batch_per_gpu = largest
        result.largest_batch_capped = search.capped and not failed
        result.search_seconds = search.search_seconds

    def _host(self, run: run_pb2.Run, outcome: Outcome) -> None:
        run.host.CopyFrom(self.inventory.host)
        run.host.container_image = outcome.image
        run.host.container_image_digest = outcome.image_digest

    def _software(self, run: run_pb2.Run) -> None:
        software = run.software
        started = self.started
        if started is None:  # what was asked: the workload never said
            software.backend = str(self.request.setting("backend") or "tensorflow")
            return
        software.backend = started.backend or str(self.request.setting("backend")
                                                  or "tensorflow")
        software.backend_version = started.backend_version
        software.keras_version = started.keras_version
        software.python_version = started.python_version
        software.cuda_runtime_version = started.cuda_runtime_version
        software.cudnn_version = started.cudnn_version

    def _config(self, run: run_pb2.Run) -> None:
        # What the workload says it ran; what was asked where it never said.
        started = self.started
        request = self.request
        config = run.config
        if started is not None:
            config.model = started.model
            config.precision = started.precision
            config.gpu_count = started.gpu_count
            config.image_size = started.image_size
            config.model_fingerprint = started.model_fingerprint
            config.parameter_count = started.parameter_count
            config.input_spec = started.input_spec
            config.unit = started.unit
        else:
            config.model = (request.model if models.is_standard(request.model) else
                            models.record_name(Path(request.model.split(":")[0]).stem))
            config.precision = str(request.setting("precision")
                                   or default_precision(config.model))
            gpu_count = request.setting("gpus")
            config.gpu_count = int(len(self.gpu_indices) if gpu_count is None else gpu_count)
            config.image_size = int(request.setting("image_size")
                                    or record.NATIVE_IMAGE_SIZE.get(config.model, 0))
        batch = (started.batch_per_gpu if started else 0) or self.chosen_batch or request.batch
        if batch:
            config.batch_per_gpu = int(batch)
            config.global_batch = ((started.global_batch if started else 0)
                                   or config.batch_per_gpu * max(config.gpu_count, 1))
        if self.chosen is not None:  # a retry runs at a given batch; the search chose it
            choice, rule = "searched", self.chosen.rule or request.batch_rule
        elif started is not None:
            choice, rule = started.batch_choice, started.batch_rule or request.batch_rule
        else:
            choice, rule = ("given" if request.batch else "searched"), request.batch_rule
        config.batch_choice = (
            run_pb2.BATCH_CHOICE_GIVEN if choice == "given" else run_pb2.BATCH_CHOICE_SEARCHED
        )
        config.batch_rule = rule
        config.memory_limit_bytes = int((started.memory_limit_bytes if started else 0)
                                        or request.setting("memory_limit_bytes") or 0)
        config.epochs = int((started.epochs if started else 0) or request.setting("epochs")
                            or MEASURED_EPOCH)
        config.pipeline = str((started.pipeline if started else "")
                              or request.setting("pipeline") or "")
        config.weights = str((started.weights if started else "")
                             or request.setting("weights") or "")
        if started is not None:
            for name in switches():
                setattr(config, name, getattr(started, name))
            self._dataset(config, started)
        # What ran, which the pipeline asked for may not be: a cached run whose images do
        # not fit the host streams them ("streaming"); --data-on-device keeps them on the GPU.
        if self.result is not None:
            if self.result.pipeline_mode:
                config.pipeline_mode = self.result.pipeline_mode
            # What ran, which may not be as asked.
            config.cuda_graphs = self.result.cuda_graphs
            config.jit_compile = self.result.jit_compile
        # The math mode the framework reported at the end; what was asked where it never did.
        config.math_mode = ((self.result.math_mode if self.result is not None else "")
                            or str(request.setting("math_mode") or ""))

    def _dataset(self, config: run_pb2.Config, started: Started) -> None:
        dataset = started.dataset
        config.dataset_name = dataset.name
        config.image_count = dataset.image_count
        # The record's hashes are bare hex digests (like hostname_hash and uuid_hash).
        config.dataset_fingerprint = dataset.fingerprint.removeprefix("sha256:")
        config.validation_split = dataset.validation_split
        config.train_images = dataset.train_images
        config.validation_images = dataset.validation_images
        config.seed = dataset.seed
        if dataset.skipped_files:
            self.warn(f"{dataset.skipped_files} file(s) in the dataset folder are not images "
                      "and were skipped")

    def _memory(self, run: run_pb2.Run, window: WindowTelemetry | None) -> None:
        totals = {gpu.index: gpu.memory_total_bytes for gpu in run.gpus}
        allocator: dict[int, GpuPeak] = {}
        entry: GpuPeak | None  # a GPU's peak, where the workload gave one
        if self.result is not None:
            for entry in self.result.memory:
                allocator[entry.gpu_index] = entry
            run.result.memory_notes.extend(
                _clip(note, record.MAX_TEXT_CHARS)
                for note in self.result.memory_notes[:record.MAX_WARNINGS])
        for index in sorted(set(totals) | set(allocator)):
            entry = allocator.get(index)
            memory = run_pb2.GpuMemory(
                gpu_index=index,
                allocator_peak_bytes=entry.allocator_peak_bytes if entry else 0,
                allocator_reserved_peak_bytes=entry.reserved_peak_bytes if entry else 0,
                memory_total_bytes=int(totals.get(index)
                                       or (entry.memory_total_bytes if entry else 0)),
            )
            if window is not None:
                memory.process_peak_bytes = window.process_peak_bytes.get(index, 0)
                memory.device_peak_bytes = window.device_peak_bytes.get(index, 0)
            if index not in totals:
                continue  # the record keeps memory of the GPUs it lists only
            run.result.memory.append(memory)


def _epoch(number: int, event: EpochFinished, window: WindowTelemetry) -> run_pb2.Epoch:
    epoch = run_pb2.Epoch(number=number, samples=window.samples, wall_seconds=event.wall_seconds,
                          train_seconds=event.train_seconds,
                          validation_seconds=event.validation_seconds)
    for name in ("loss", "accuracy", "val_loss", "val_accuracy"):
        value = getattr(event, name)
        if value is not None:
            setattr(epoch, name, value)
    if window.energy_source:
        epoch.energy_joules = window.energy_joules
        epoch.energy_source = window.energy_source
        epoch.mean_power_watts = window.mean_power_watts
    epoch.max_power_watts = window.max_power_watts
    epoch.max_power_source = window.max_power_source
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
