"""Data parallelism for Keras on torch: one process per GPU, gradients all-reduced.

Keras's torch backend has no data parallelism of its own. Following Keras's guide
"Multi-GPU distributed training with PyTorch", each GPU gets its own process (NCCL
between them) that builds the same model; unlike the guide, training stays in
Keras's own `fit` (so augmentation, metrics, validation and timing are the
protocol's), and the one addition is in the optimizer step: before Adam applies the
gradients they are averaged over the replicas with one all-reduce, which is what
DistributedDataParallel does. Every replica starts from the first one's weights and
trains on its own slice of each global batch (per-GPU batch x N images).

As with TensorFlow's MirroredStrategy, batch-normalisation statistics are per
replica. The first replica times the epochs and reports; its loss and accuracy are
those of its own slice. Peak memory is read on every GPU and gathered.
"""

from __future__ import annotations

import os
import queue
import socket
from collections.abc import Callable
from typing import Any

from gpubench.agent.workload.data import Dataset
from gpubench.agent.workload.frameworks.types import GpuMemory, MemoryReport
from gpubench.events import Event, EventSink
from gpubench.settings import EXIT_OK, RunSettings


class _QueuedEvents:
    """The first replica's events, passed to the parent, which owns the stream.

    Each event keeps the time it happened in the replica (`t` is CLOCK_MONOTONIC,
    the same in every process), not the moment the parent forwards it.
    """

    def __init__(self, channel: Any) -> None:
        self._channel = channel

    def emit(self, event: Event) -> None:
        self._channel.put(event)


# runner.train, which each replica runs: handed over by the caller, which owns it.
Train = Callable[..., int]


class ReplicaHooks:
    """What a replica adds to the single-process run: weight sync, gradient all-reduce, memory."""

    def __init__(self, rank: int, world: int) -> None:
        self.rank = rank
        self.world = world

    def prepare(self, network: Any) -> None:
        """Start from replica 0's weights; average gradients before each optimizer step."""
        import torch
        import torch.distributed as dist

        with torch.no_grad():
            for variable in network.weights:
                dist.broadcast(variable.value.data, src=0)
        optimizer = network.optimizer
        apply = optimizer.apply
        world = self.world

        def apply_averaged(gradients: list, variables: list | None = None) -> Any:
            present = [g for g in gradients if g is not None]
            # One flat buffer: one collective per step instead of one per tensor.
            flat = torch.cat([g.reshape(-1) for g in present])
            dist.all_reduce(flat)
            flat /= world
            offset = 0
            for g in present:
                g.copy_(flat[offset : offset + g.numel()].view_as(g))
                offset += g.numel()
            return apply(gradients, variables)

        optimizer.apply = apply_averaged

    def finish(self, network: Any) -> list[str]:
        """Check that the replicas still hold the same trainable weights; warnings if not.

        With averaged gradients they must (batch-normalisation statistics may differ:
        they are not trainable). Replicas that drifted apart would mean the run did not
        train one model, and the figures would not be what they claim.
        """
        import torch
        import torch.distributed as dist

        with torch.no_grad():
            flat = torch.cat([v.value.detach().reshape(-1).float()
                              for v in network.trainable_weights])
            first = flat.clone()
            dist.broadcast(first, src=0)
            drift = torch.tensor([float((flat - first).abs().max())], device=flat.device)
            dist.all_reduce(drift, op=dist.ReduceOp.MAX)
        scale = float(first.abs().max()) or 1.0
        if float(drift) > 1e-4 * scale:
            return [f"data-parallel replicas hold different weights after training "
                    f"(largest difference {float(drift):.3g}): the gradients were not averaged"]
        return []

    def reset_peak(self) -> None:
        """Start this GPU's peak anew (before the measured epoch)."""
        import torch

        if torch.cuda.is_available():
            torch.cuda.reset_peak_memory_stats()

    def read_peaks(self) -> MemoryReport:
        """Every replica's GPU peak, gathered (a collective: all replicas call it)."""
        import torch
        import torch.distributed as dist

        if not torch.cuda.is_available():
            dist.barrier()
            return MemoryReport([], ["CPU run (data-parallel replicas): there is no GPU allocator "
                                     "peak to report"])
        device = torch.cuda.current_device()
        mine = torch.tensor([torch.cuda.max_memory_allocated(),
                             torch.cuda.get_device_properties(device).total_memory],
                            dtype=torch.int64, device="cuda")
        everyone = [torch.zeros_like(mine) for _ in range(self.world)]
        dist.all_gather(everyone, mine)
        return MemoryReport([GpuMemory(i, int(t[0]), int(t[1])) for i, t in enumerate(everyone)])


def launch(train: Train, settings: RunSettings, dataset: Dataset, batch: int, choice: str,
           events: EventSink, *, replicas: int | None = None,
           identity: dict[str, Any] | None = None) -> int:
    """Run `train` (runner.train) in one process per GPU (or in `replicas` CPU processes
    over gloo, for tests)."""
    import torch.multiprocessing as mp

    world = replicas or settings.gpus
    context = mp.get_context("spawn")
    channel = context.Queue()
    port = _free_port()
    processes = mp.start_processes(
        _replica,
        args=(world, train, settings, dataset, batch, choice, port, channel, bool(replicas),
              identity),
        nprocs=world, join=False, start_method="spawn",
    )
    done = False
    while not done:
        done = processes.join(timeout=0.1)  # re-raises a replica's failure with its traceback
        _forward(channel, events)
    _forward(channel, events)
    return EXIT_OK


def _forward(channel: Any, events: EventSink) -> None:
    while True:
        try:
            event = channel.get_nowait()
        except queue.Empty:
            return
        events.emit(event)  # with the replica's t and wall


def _replica(rank: int, world: int, train: Train, settings: RunSettings, dataset: Dataset,
             batch: int, choice: str, port: int, channel: Any, on_cpu: bool,
             identity: dict[str, Any] | None = None) -> None:
    from gpubench.agent.workload import backend

    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    backend.select("torch", 0 if on_cpu else world)
    import torch
    import torch.distributed as dist

    if on_cpu:
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // world))  # share the cores
    else:
        torch.cuda.set_device(rank)  # Keras's torch backend places tensors on "cuda": this one
    dist.init_process_group("gloo" if on_cpu else "nccl", rank=rank, world_size=world)
    try:
        train(settings, dataset, batch, choice, _QueuedEvents(channel) if rank == 0 else None,
              shard=(rank, world), hooks=ReplicaHooks(rank, world), identity=identity)
    finally:
        dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]
