"""One benchmark run from start to result, told as events.

Order: find and check the data, search for the batch size if asked (trial
processes, before this process loads a framework), load the framework, emit
`started`, prepare the batches, build and train the protocol's model, emit one
`epoch_finished` per epoch and a `result`. Any failure becomes one `error`
event and an exit code: 3 out of memory, 6 bad data, 1 anything else.
"""

from __future__ import annotations

import os
import time
import traceback
from pathlib import Path
from typing import Any, Protocol

from gpubench.agent.events import EventWriter
from gpubench.agent.workload import backend, batch_search, data, synthetic
from gpubench.agent.workload.memory import MemoryReport
from gpubench.agent.workload.options import (
    EXIT_ERROR,
    EXIT_OK,
    EXIT_OUT_OF_MEMORY,
    MEASURED_EPOCH,
    PROTOCOL_PARAMETERS,
    SYNTHETIC,
    VALIDATION_SPLIT,
    RunSettings,
)

from gpubench.errors import GpubenchError

MESSAGE_LIMIT = 2000  # characters of an error message put in the event
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


def run(settings: RunSettings, events: EventWriter) -> int:
    """Run the benchmark; returns the process's exit code."""
    try:
        dataset = load_dataset(settings)
        batch, choice = settings.batch, "given"
        if batch is None:
            batch = search_batch(settings, dataset.train_count, events)
            choice = "searched"
        if settings.backend == "torch" and settings.devices > 1:
            from gpubench.agent.workload import torch_ddp

            return torch_ddp.launch(settings, dataset, batch, choice, events,
                                    replicas=settings.replicas_on_cpu or None)
        backend.select(settings.backend, settings.gpus)
        return train(settings, dataset, batch, choice, events)
    except KeyboardInterrupt as exc:
        report_failure(events, exc)  # said on the stream, then Python's own Ctrl-C exit
        raise
    except Exception as exc:
        return report_failure(events, exc)


def load_dataset(settings: RunSettings) -> data.Dataset:
    """The run's images: the synthetic set (generated on first use) or the given folder."""
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


def search_batch(settings: RunSettings, train_images: int, events: EventWriter) -> int:
    """--batch auto: the largest per-GPU batch that fits, every trial reported."""
    largest = max(1, train_images // settings.devices)
    chosen, _ = batch_search.search(
        lambda batch: batch_search.run_trial(settings, batch),
        start=batch_search.START_BATCH[settings.model],
        largest=largest,
        max_trials=settings.max_trials,
        on_trial=lambda trial: events.emit("batch_trial", **trial.as_event()),
    )
    events.emit("batch_chosen", batch=chosen)
    return chosen


def started_fields(settings: RunSettings, dataset: data.Dataset, batch: int, choice: str) -> dict:
    """The `started` event's fields other than the versions."""
    from gpubench.agent.workload import model as net

    return {
        "model": settings.model,
        "image_size": settings.size,
        "batch_per_gpu": batch,
        "global_batch": batch * settings.devices,
        "batch_choice": choice,
        "precision": settings.precision,
        "gpu_count": settings.gpus,
        "epochs": settings.epochs,
        "pipeline": settings.pipeline,
        "weights": net.weights_label(settings.weights),
        "jit_compile": settings.jit_compile,
        "cuda_graphs": settings.cuda_graphs,
        "data_on_device": settings.data_on_device,
        "batched_augmentation": settings.batched_augmentation,
        "fused_batchnorm": settings.fused_batchnorm,
        "channels_first": settings.channels_first,
        "dataset": dataset.describe(),
        "pid": os.getpid(),
    }


def train(
    settings: RunSettings,
    dataset: data.Dataset,
    batch: int,
    choice: str,
    events: EventWriter | None,
    *,
    shard: tuple[int, int] = (0, 1),
    hooks: ReplicaHooks | None = None,
) -> int:
    """Load the framework, train the protocol's model and report (one process).

    `shard` and `hooks` are set by torch_ddp for its replicas; `events` is None
    on all replicas but the first.
    """
    keras = backend.import_keras()
    from gpubench.agent.workload import distribute, memory, pipeline, timing
    from gpubench.agent.workload import model as net

    if shard[1] == 1:
        backend.check_gpus(settings.backend, settings.gpus)
    keras.utils.set_random_seed(settings.seed + shard[0])
    emit = events.emit if events is not None else (lambda kind, **fields: None)
    emit("started", **backend.versions(settings.backend),
         **started_fields(settings, dataset, batch, choice))

    feed = pipeline.build_feed(
        dataset, size=settings.size, global_batch=batch * settings.devices,
        pipeline=settings.pipeline, seed=settings.seed, on_device=settings.data_on_device,
        channels_first=settings.channels_first,
        shard=shard, log=lambda message: emit("log", message=message),
    )
    for warning in feed.warnings:
        emit("warning", message=warning)
    if feed.decode_seconds:
        emit("log", message=f"decoded {dataset.image_count} images in {feed.decode_seconds:.1f} s")

    with distribute.replicas(settings):
        network, graphs = prepare_network(settings, weights=settings.weights,
                                          classes=len(dataset.class_names))
        if hooks is not None:
            hooks.prepare(network)
    counts = net.parameter_counts(network)

    local_gpus = settings.gpus if shard[1] == 1 else 0  # a torch replica reads its own GPU
    peaks: list[memory.MemoryReport] = []

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

    timer = timing.epoch_timer(settings.backend, settings.gpus > 0, events,
                               feed.train.images_in_step, len(feed.train),
                               before_epoch=before_epoch, after_epoch=after_epoch)
    network.fit(feed.train, validation_data=feed.validation, epochs=settings.epochs,
                verbose=0, callbacks=[timer])
    replica_warnings = hooks.finish(network) if hooks is not None else []
    if events is None:
        return EXIT_OK
    if graphs is not None:
        emit("log", message=graphs.describe())

    report = peaks[0]
    if graphs is not None:
        report = memory.MemoryReport(report.gpus, report.notes + [GRAPH_MEMORY_NOTE])
    first, measured = timer.epochs[0], timer.epochs[MEASURED_EPOCH - 1]
    warnings = list(feed.warnings) + list(measured.stats.warnings if measured.stats else [])
    warnings += replica_warnings
    expected = PROTOCOL_PARAMETERS[settings.model]
    if len(dataset.class_names) == 3 and tuple(counts.values()) != expected:
        warnings.append(f"parameter counts {counts} differ from the protocol's {expected}")
    for warning in warnings[len(feed.warnings):]:
        emit("warning", message=warning)
    emit(
        "result",
        measured_epoch=MEASURED_EPOCH,
        epoch2_seconds=round(measured.wall_seconds, 6),
        startup_seconds=round(first.wall_seconds - measured.wall_seconds, 6),
        **(measured.stats.as_event() if measured.stats else {}),
        memory=[gpu.as_event() for gpu in report.gpus],
        memory_notes=report.notes,
        warnings=warnings,
        epochs=[
            {"epoch": e.epoch, "wall_seconds": round(e.wall_seconds, 6),
             **(e.stats.as_event() if e.stats else {})}
            for e in timer.epochs
        ],
        batch_per_gpu=batch,
        global_batch=batch * settings.devices,
        pipeline_mode=feed.mode,
        decode_seconds=round(feed.decode_seconds, 3),
        weights=net.weights_label(settings.weights),
        parameters=counts,
    )
    return EXIT_OK


def prepare_network(settings: RunSettings, *, weights: str = "none",
                    classes: int = 3) -> tuple[Any, Any]:
    """The protocol's model as `settings` compute it: precision and image layout set,
    built, compiled, torch's kernels in place and its steps as they will run. Returns
    the model and the CUDA graphs' statistics (None when the steps run eagerly)."""
    from gpubench.agent.workload import model as net

    net.set_precision(settings.precision)
    net.set_data_format(settings.channels_first)
    network = net.build(settings.model, settings.size, weights, classes=classes)
    net.compile_for_training(network, jit_compile=settings.jit_compile)
    _fast_kernels(settings, network)
    return network, _torch_steps(settings, network)


def _torch_steps(settings: RunSettings, network: Any) -> Any:
    """torch on a GPU: keep the host from waiting inside a step (torch_async) and,
    with --cuda-graphs, replay the steps as CUDA graphs. Returns the graphs'
    statistics (cuda_graphs.GraphStats), or None when the steps run eagerly."""
    if settings.backend != "torch" or settings.gpus == 0:
        return None
    from gpubench.agent.workload import torch_async

    torch_async.keep_host_ahead(network)
    if not settings.cuda_graphs:
        return None
    from gpubench.agent.workload import cuda_graphs

    return cuda_graphs.use_cuda_graphs(network)


def _fast_kernels(settings: RunSettings, network: Any) -> None:
    """The torch-only replacements that compute the protocol's layers in fewer kernels."""
    if settings.batched_augmentation:
        from gpubench.agent.workload import augment

        augment.batch_affine_transforms(network)
    if settings.fused_batchnorm:
        from gpubench.agent.workload import batchnorm

        batchnorm.fuse_batch_normalization(network)


def trial(settings: RunSettings, batch: int, events: EventWriter) -> int:
    """One batch-size trial: build, train a few steps and validate one at `batch`."""
    started = time.monotonic()
    try:
        if settings.memory_limit_bytes:
            import resource

            # Tests cap the address space to make a CPU "run out of memory".
            resource.setrlimit(resource.RLIMIT_AS, (settings.memory_limit_bytes,) * 2)
        backend.select(settings.backend, settings.gpus)
        keras = backend.import_keras()
        import numpy as np
        from gpubench.agent.workload import memory
        from gpubench.agent.workload import model as net

        backend.check_gpus(settings.backend, settings.gpus)
        keras.utils.set_random_seed(settings.seed)
        # The network as the run will compute it: its kernels and steps change the memory.
        network, _ = prepare_network(settings)
        rng = np.random.default_rng(settings.seed)
        images = rng.integers(0, 256, size=(batch, *net.input_shape(settings.size)),
                              dtype=np.uint8)
        labels = np.eye(3, dtype=np.float32)[rng.integers(0, 3, size=batch)]
        memory.reset_peaks(settings.backend, settings.gpus)
        for _ in range(settings.trial_steps):
            network.train_on_batch(images, labels)
        network.test_on_batch(images, labels)
        backend.synchronize(settings.backend)
        report = memory.read_peaks(settings.backend, settings.gpus)
        peak = max((gpu.allocator_peak_bytes for gpu in report.gpus), default=0)
        events.emit("batch_trial", batch=batch, fits=True, peak_memory_bytes=peak,
                    seconds=round(time.monotonic() - started, 3), message="",
                    address_space_peak_bytes=_address_space_peak())
        return EXIT_OK
    except Exception as exc:
        if isinstance(exc, GpubenchError) or not backend.is_out_of_memory(exc):
            return report_failure(events, exc)
        events.emit("batch_trial", batch=batch, fits=False, peak_memory_bytes=0,
                    seconds=round(time.monotonic() - started, 3),
                    message=backend.error_line(exc)[:MESSAGE_LIMIT])
        return EXIT_OUT_OF_MEMORY


def report_failure(events: EventWriter, exc: BaseException) -> int:
    """One `error` event for `exc`, and the exit code that goes with it."""
    if isinstance(exc, KeyboardInterrupt):
        events.emit("error", status="interrupted", message="interrupted")
        return 130
    if isinstance(exc, batch_search.NoBatchFits) or (
        not isinstance(exc, GpubenchError) and backend.is_out_of_memory(exc)
    ):
        events.emit("error", status="out_of_memory",
                    message=backend.error_line(exc)[:MESSAGE_LIMIT])
        return EXIT_OUT_OF_MEMORY
    if isinstance(exc, GpubenchError):
        events.emit("error", status="error", message=str(exc)[:MESSAGE_LIMIT])
        return exc.exit_code
    traceback.print_exc()  # a bug: keep the whole story on stderr
    events.emit("error", status="error", message=f"{type(exc).__name__}: {exc}"[:MESSAGE_LIMIT])
    return EXIT_ERROR


def _address_space_peak() -> int:
    """The process's peak virtual memory (VmPeak): what --memory-limit-bytes caps."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("VmPeak:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0
