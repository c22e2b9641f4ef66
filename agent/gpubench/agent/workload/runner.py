"""One benchmark run from start to result, told as events.

Order: find and check the data; search for the batch size unless one was
given (a trial process per batch before this process loads a framework, or, for
torch on one GPU, every trial in one `search` process that runs while this one
imports its framework: `trials`, `search_beside`); load the framework, emit
`started`, prepare the batches, build and train the
protocol's model, emit one `epoch_finished` per epoch and a `result`. Any
failure becomes one `error` event and an exit code: 3 out of memory, 6 bad
data, 1 anything else.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from gpubench import events as ev
from gpubench import models
from gpubench.agent.workload import (
    backend,
    batch_search,
    data,
    frameworks,
    model_check,
    search_beside,
    synthetic,
    trials,
)
from gpubench.agent.workload.failure import report_failure
from gpubench.agent.workload.frameworks.types import MemoryReport
from gpubench.agent.workload.network import prepare_network
from gpubench.events import EventSink
from gpubench.settings import (
    EXIT_OK,
    MEASURED_EPOCH,
    PROTOCOL_PARAMETERS,
    RULE_LARGEST,
    RUN_ADDRESS_SPACE_ENV,
    SYNTHETIC,
    VALIDATION_SPLIT,
    RunSettings,
)

GRAPH_MEMORY_NOTE = ("CUDA graphs: the allocator peak covers the whole run, not only the "
                     "measured epoch (a graph's replays do not pass through the allocator)")


class ReplicaHooks(Protocol):
    """What one replica of torch data parallelism adds to a run (see torch_ddp)."""

    def prepare(self, network: Any) -> None:
        """Called once the model is compiled."""

    def reset_peak(self) -> None:
        """Start this replica's GPU memory peak anew."""

    def read_peaks(self) -> MemoryReport:
        """Every replica's GPU peak (all replicas call it together)."""

    def finish(self, network: Any) -> list[str]:
        """After training: warnings about the replicas (all replicas call it together)."""


@dataclass(frozen=True)
class BatchChoice:
    """The batch a run trains at, and how it was chosen."""

    batch: int
    rule: str  # one of gpubench.settings.BATCH_RULES
    search: batch_search.SearchResult | None = None

    @property
    def choice(self) -> str:
        """The record's batch_choice: 'given' or 'searched'."""
        return "searched" if self.search is not None else "given"


def run(settings: RunSettings, events: EventSink) -> int:
    """Run the benchmark; returns the process's exit code."""
    try:
        identity = model_check.check(settings)  # refuses a model it cannot feed
        dataset = load_dataset(settings, identity)
        warm = trials.warm_applies(settings)
        choice = None
        if settings.batch is not None:
            choice = BatchChoice(settings.batch, settings.batch_rule)
        elif not warm:
            choice = choose_batch(settings, trials.ProcessTrials(settings), dataset.train_count,
                                  events)
        if frameworks.get(settings.backend).replicas_in_processes and settings.devices > 1:
            from gpubench.agent.workload import torch_ddp

            assert choice is not None  # several devices: never warm
            return torch_ddp.launch(train, settings, dataset, choice.batch, choice.choice, events,
                                    replicas=settings.replicas_on_cpu or None,
                                    identity=identity)
        if choice is None:  # warm trials, in a process beside this one's import
            choice = search_while_loading(settings, dataset, events, identity)
            notes = open_gpus(settings)
        else:
            notes = load_framework(settings)
        return train(settings, dataset, choice.batch, choice.choice, events, rule=choice.rule,
                     memory_notes=notes, identity=identity)
    except KeyboardInterrupt as exc:
        report_failure(events, exc)  # said on the stream, then Python's own Ctrl-C exit
        raise
    except Exception as exc:
        return report_failure(events, exc)


def load_framework(settings: RunSettings) -> list[str]:
    """Select and import the framework, and apply --memory-limit; returns notes for the
    record."""
    import_framework(settings)
    return open_gpus(settings)


def import_framework(settings: RunSettings) -> None:
    """Select and import the framework; no GPU is touched yet."""
    backend.select(settings.backend, settings.gpus)
    backend.import_keras(memory_growth=not settings.memory_limit_bytes)


def open_gpus(settings: RunSettings) -> list[str]:
    """Check the GPUs the framework sees and apply --memory-limit; returns notes for
    the record."""
    from gpubench.agent.workload import memory

    backend.check_gpus(settings.backend, settings.gpus)
    if not settings.memory_limit_bytes:
        return []
    return memory.limit_memory(settings.backend, settings.gpus, settings.memory_limit_bytes)


def search_while_loading(settings: RunSettings, dataset: data.Dataset,
                         events: EventSink, identity: dict[str, Any] | None = None
                         ) -> BatchChoice:
    """The batch search in a process beside this one (search_beside) while this one
    imports its framework and decodes the images (at the size the model takes, as its
    `identity` says for a model other than the EfficientNets; none for a model fed
    tokens or values); then the batch it chose."""
    identity = identity or {}
    size = identity.get("image_size") or settings.size
    photos = identity.get("feeding", "photos") == "photos"
    with search_beside.SearchBeside(settings, events) as beside:
        import_framework(settings)
        from gpubench.agent.workload import pipeline  # imports Keras: after the backend

        if photos:
            pipeline.decode_ahead(dataset, size, settings.pipeline,
                                  log=lambda message: events.emit(ev.LogEvent(message=message)))
        ready = beside.seconds
        batch, found = beside.result()
    waited = max(0.0, beside.seconds - ready)
    events.emit(ev.LogEvent(message="the batch search ran in its own process beside the "
                                    "framework's import and the decoding; the run waited "
                                    f"{waited:.1f} s for it"))
    return BatchChoice(batch, settings.batch_rule, found)


def search_only(settings: RunSettings, limits: Sequence[int], events: EventSink) -> int:
    """The `search` command: the largest batch for the whole card or each of `limits`
    (bytes), one search_done event each; no training."""
    from dataclasses import replace

    from gpubench.agent.workload import memory

    trials.use_trial_environment(settings)  # this process makes trials only
    try:
        plans = [replace(settings, memory_limit_bytes=limit) for limit in limits] or [settings]
        warm = trials.warm_applies(settings)
        make: Any = None
        identity: dict[str, Any] = {}
        if warm and not models.is_efficientnet(settings.model):
            # The trials' network, built here, says how the model is fed (or refuses it):
            # no check process of its own.
            load_framework(replace(settings, memory_limit_bytes=None))
            make = trials.WarmTrials(settings)
            identity = make.identity()
        elif not warm:
            identity = model_check.check(settings)
        dataset = load_dataset(settings, identity)
        if warm and make is None:
            load_framework(replace(settings, memory_limit_bytes=None))
            make = trials.WarmTrials(settings)
        for plan in plans:
            if warm:
                memory.limit_memory(plan.backend, plan.gpus, plan.memory_limit_bytes)
            else:
                make = trials.ProcessTrials(plan)
            choice = choose_batch(plan, make, dataset.train_count, events)
            assert choice.search is not None  # choose_batch searched
            events.emit(ev.SearchDone(model=plan.model, batch=choice.batch, rule=choice.rule,
                                      memory_limit_bytes=plan.memory_limit_bytes or 0,
                                      search=choice.search.summary()))
        if warm:
            events.emit(ev.LogEvent(message=f"the trials' network took "
                                            f"{make.build_seconds:.1f} s to build"))
        # The process ends here and its GPU memory goes with it: no teardown of the trial
        # network first (giving a card's worth of cached blocks back one by one took 4 s
        # of the 10.6 s a B0 run waited for its search on an H200:
        # docs/results/h200-default-run.md).
        return EXIT_OK
    except KeyboardInterrupt as exc:
        report_failure(events, exc)
        raise
    except Exception as exc:
        return report_failure(events, exc)


def load_dataset(settings: RunSettings, identity: dict[str, Any] | None = None
                 ) -> data.Dataset:
    """The run's images: the synthetic set (generated on first use) or the given folder;
    for a model fed synthetic tokens or values (its `identity` says), that many samples
    (--limit-images, else as many as the protocol's images)."""
    feeding = (identity or {}).get("feeding", "photos")
    if feeding != "photos":
        return data.synthetic_samples(feeding, settings.limit_images or synthetic.IMAGE_COUNT,
                                      settings.seed, VALIDATION_SPLIT)
    if settings.data == SYNTHETIC:
        count = min(settings.limit_images or synthetic.IMAGE_COUNT, synthetic.IMAGE_COUNT)
        folder = synthetic.ensure(count)

        def generated(name: str) -> bool:
            index = synthetic.image_index(name)
            return index is not None and index < count

        return data.read_dataset(folder, seed=settings.seed, validation_split=VALIDATION_SPLIT,
                                 name=synthetic.NAME, keep=generated)
    return data.read_dataset(Path(settings.data), seed=settings.seed,
                             validation_split=VALIDATION_SPLIT, limit=settings.limit_images)


def search(settings: RunSettings, make_trial: batch_search.TryBatch, train_images: int,
           events: EventSink) -> batch_search.SearchResult:
    """The largest per-GPU batch that fits, every trial reported as it ends."""
    events.emit(ev.Phase(phase="search",
                         message=f"searching the largest batch that fits ({settings.max_trials} "
                                 f"trials and {settings.search_budget:.0f} s at most)"))
    return batch_search.search(
        make_trial,
        probes=batch_search.probes_of(settings.model),
        largest_useful=max(1, train_images // settings.devices),
        speed_candidate=(batch_search.speed_batch(train_images, train_images, settings.devices)
                         if settings.batch_rule != RULE_LARGEST else 0),
        max_trials=settings.max_trials,
        budget_seconds=settings.search_budget,
        on_trial=lambda trial: events.emit(trial.as_event()),
    )


def choose_batch(settings: RunSettings, make_trial: batch_search.TryBatch,
                 train_images: int, events: EventSink) -> BatchChoice:
    """Search, then pick the run's batch by settings.batch_rule; one batch_chosen event."""
    found = search(settings, make_trial, train_images, events)
    if settings.batch_rule == RULE_LARGEST:
        batch = found.largest
    else:
        batch = batch_search.speed_batch(found.largest, train_images, settings.devices)
    events.emit(ev.BatchChosen(
        batch=batch, rule=settings.batch_rule,
        fallbacks=tuple(batch_search.fallbacks(settings.batch_rule, batch, found)),
        search=found.summary()))
    return BatchChoice(batch, settings.batch_rule, found)


def started_event(settings: RunSettings, dataset: data.Dataset, batch: int, choice: str,
                  rule: str = "", identity: dict[str, Any] | None = None) -> ev.Started:
    """The `started` event: the framework's versions and what the run runs."""
    from gpubench.agent.workload import model as net

    versions = backend.versions(settings.backend)
    identity = identity or {}
    return ev.Started(
        backend=versions["backend"],
        backend_version=versions["backend_version"],
        keras_version=versions["keras_version"],
        python_version=versions["python_version"],
        cuda_runtime_version=versions["cuda_runtime_version"],
        cudnn_version=versions["cudnn_version"],
        model=settings.model if models.is_standard(settings.model)
        else models.record_name(str(identity.get("name", "custom"))),
        image_size=identity.get("image_size", settings.size),
        batch_per_gpu=batch,
        global_batch=batch * settings.devices,
        batch_choice=choice,
        batch_rule=rule or settings.batch_rule,
        memory_limit_bytes=settings.memory_limit_bytes or 0,
        precision=settings.precision,
        gpu_count=settings.gpus,
        epochs=settings.epochs,
        pipeline=settings.pipeline,
        weights=net.weights_label(settings.weights),
        jit_compile=bool(settings.jit_compile),
        cuda_graphs=bool(settings.cuda_graphs),
        data_on_device=bool(settings.data_on_device),
        batched_augmentation=bool(settings.batched_augmentation),
        fused_batchnorm=bool(settings.fused_batchnorm),
        channels_first=bool(settings.channels_first),
        dataset=dataset.describe(),
        model_fingerprint=identity.get("model_fingerprint", ""),
        parameter_count=identity.get("parameter_count", 0),
        input_spec=identity.get("input_spec", ""),
        unit=identity.get("unit", ""),
    )


def train(
    settings: RunSettings,
    dataset: data.Dataset,
    batch: int,
    choice: str,
    events: EventSink | None,
    *,
    shard: tuple[int, int] = (0, 1),
    hooks: ReplicaHooks | None = None,
    rule: str = "",
    memory_notes: Sequence[str] = (),
    identity: dict[str, Any] | None = None,
) -> int:
    """Load the framework, train the protocol's model and report (one process).

    `shard` and `hooks` are set by torch_ddp for its replicas; `events` is None
    on all replicas but the first. `rule` is how the batch was chosen (the
    settings' rule if empty); `memory_notes` go with the measured peak.
    """
    keras = backend.import_keras()
    from gpubench.agent.workload import distribute, memory, pipeline, timing
    from gpubench.agent.workload import model as net

    if shard[1] == 1:
        backend.check_gpus(settings.backend, settings.gpus)
    keras.utils.set_random_seed(settings.seed + shard[0])

    def emit(event: ev.Event) -> None:
        if events is not None:  # replicas other than the first stay silent
            events.emit(event)

    def log(message: str) -> None:
        emit(ev.LogEvent(message=message))

    emit(started_event(settings, dataset, batch, choice, rule, identity))

    def build() -> tuple[Any, Any]:
        emit(ev.Phase(phase="build", message=f"building {_words(settings.model)}"))
        with distribute.replicas(settings):
            built = prepare_network(settings, weights=settings.weights,
                                    classes=len(dataset.class_names))
            if hooks is not None:
                hooks.prepare(built[0])
        return built

    assert settings.channels_first is not None  # settled by RunSettings.__post_init__
    other = not models.is_efficientnet(settings.model)
    if other:  # its network says how it is fed: built first
        began = time.monotonic()
        network, graphs = build()
        from gpubench.agent.workload import custom

        feed = custom.build_feed(network.gpubench_feeding, dataset,
                                 global_batch=batch * settings.devices,
                                 pipeline_name=settings.pipeline, seed=settings.seed,
                                 shard=shard, log=log)
    else:
        feed = pipeline.build_feed(
            dataset, size=settings.size, global_batch=batch * settings.devices,
            pipeline=settings.pipeline, seed=settings.seed, on_device=settings.data_on_device,
            channels_first=settings.channels_first,
            shard=shard, log=log,
        )
    for warning in feed.warnings:
        emit(ev.WarningEvent(message=warning))
    if feed.decode_seconds:
        log(f"decoded {dataset.image_count} images in {feed.decode_seconds:.1f} s")

    if shard[1] == 1:  # the batch search's trials may have run in this process
        memory.reset_peaks(settings.backend, settings.gpus)
    if not other:
        began = time.monotonic()
        network, graphs = build()
    counts = net.parameter_counts(network)
    log(f"built in {time.monotonic() - began:.1f} s")
    emit(ev.Phase(phase="first_step",
                  message="the first steps set up the framework's kernels"
                  + (" and record each step shape as a CUDA graph" if graphs is not None else "")
                  + " (once, in epoch 1)"))

    local_gpus = settings.gpus if shard[1] == 1 else 0  # a torch replica reads its own GPU
    peaks: list[MemoryReport] = []

    def before_epoch(epoch: int) -> None:
        if epoch == MEASURED_EPOCH:
            backend.synchronize(settings.backend)
            if graphs is None:  # a graph's replays bypass the allocator: keep the run's peak
                memory.reset_peaks(settings.backend, local_gpus)
            if hooks is not None:
                hooks.reset_peak()

    def after_epoch(epoch: int) -> None:
        if epoch == MEASURED_EPOCH:
            peaks.append(hooks.read_peaks() if hooks is not None
                         else memory.read_peaks(settings.backend, local_gpus))

    # What a step counts in the run's unit: its images or samples, or its tokens.
    per_sample = network.gpubench_feeding.unit_per_sample if other else 1
    timer = timing.epoch_timer(settings.backend, settings.gpus > 0, events,
                               lambda step: feed.train.images_in_step(step) * per_sample,
                               len(feed.train),
                               before_epoch=before_epoch, after_epoch=after_epoch)
    _cap_address_space_for_tests()
    network.fit(feed.train, validation_data=feed.validation, epochs=settings.epochs,
                verbose=0, callbacks=[timer])
    replica_warnings = hooks.finish(network) if hooks is not None else []
    if events is None:
        return EXIT_OK
    if graphs is not None:
        log(graphs.describe())

    report = peaks[0]
    report = MemoryReport(report.gpus, report.notes + list(memory_notes)
                                 + ([GRAPH_MEMORY_NOTE] if graphs is not None else []))
    measured = timer.epochs[MEASURED_EPOCH - 1]
    warnings = list(feed.warnings) + list(measured.stats.warnings if measured.stats else [])
    warnings += replica_warnings
    programs = frameworks.get(settings.backend).program_log()  # XLA's programs (JAX)
    if programs is not None:
        late = programs.epoch_warning(MEASURED_EPOCH, measured.t_start, measured.t_end)
        warnings += [late] if late else []
    expected = PROTOCOL_PARAMETERS.get(settings.model)
    if expected and len(dataset.class_names) == 3 and tuple(counts.values()) != expected:
        warnings.append(f"parameter counts {counts} differ from the protocol's {expected}")
    for warning in warnings[len(feed.warnings):]:
        emit(ev.WarningEvent(message=warning))
    stats = measured.stats
    emit(ev.Result(
        measured_epoch=MEASURED_EPOCH,
        train_images_per_second=round(stats.images_per_second, 3) if stats else None,
        step_time_median_seconds=round(stats.step_time_median_seconds, 6) if stats else None,
        step_time_cv=round(stats.step_time_cv, 4) if stats else None,
        memory=tuple(gpu.as_event() for gpu in report.gpus),
        memory_notes=tuple(report.notes),
        warnings=tuple(warnings),
        pipeline_mode=feed.mode,
        # What ran: asked-for graphs are not used where the Keras internals they patch
        # differ (agent/gpubench/agent/workload/keras_internals.py).
        cuda_graphs=graphs is not None,
        # Keras compiles the step only where every layer allows it (it warns otherwise).
        jit_compile=bool(network.jit_compile),
        math_mode=frameworks.get(settings.backend).math_mode(),
        xla_programs=programs.totals() if programs is not None else None,
    ))
    return EXIT_OK


def _words(model: str) -> str:
    """How the build phase names a model: EfficientNetB0, or as --model names it."""
    return f"EfficientNet{model}" if models.is_efficientnet(model) else model


def _cap_address_space_for_tests() -> None:
    """gpubench.settings.RUN_ADDRESS_SPACE_ENV: cap this process's address space from here on.

    Threads started from here on reserve 256 KiB of stack instead of 8 MiB, so that
    the cap is met by the training's own allocations (an out-of-memory error) rather
    than by a thread that could not start."""
    cap = os.environ.get(RUN_ADDRESS_SPACE_ENV)
    if cap:
        import resource
        import threading

        threading.stack_size(256 * 1024)
        resource.setrlimit(resource.RLIMIT_AS, (int(cap), resource.RLIM_INFINITY))
