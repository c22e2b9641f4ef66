"""Keras's training and validation steps replayed as CUDA graphs (`--cuda-graphs`).

Keras on torch runs every layer's Python on every step (about 240 layers in B0,
800 in B7), and the GPU waits whenever that host work is not hidden behind the
previous step's kernels. `use_cuda_graphs(model)` records a step's kernels once
as a CUDA graph, per batch shape, and replays the graph on every later step of
that shape: the host then launches a whole step with one call.

What the run computes stays the protocol's network, optimizer and metrics; what
changes, and why:

- Random numbers (the augmentation, drop-connect) come from torch's default CUDA
  generator, seeded by the run's seed, which advances on every replay. A Keras
  seed generator makes a new torch generator per call on the host: captured, it
  would replay the same numbers on every step. Same distributions, not the same
  sequence as Keras's.
- The first training step runs as Keras runs it, which creates the optimizer's
  variables and lets every lazy initialisation happen outside a capture. From
  then on each new shape (the full batch, an epoch's last smaller batch, the
  validation batch) is captured on its first call, so the second epoch replays
  only. A step that cannot be captured stops the run with an error that says
  where (a failed capture leaves torch unusable in that process).
- Replays do not pass through torch's allocator, so the run's memory peak is
  read over the whole run instead of the measured epoch (runner.py).

Needs torch on one CUDA GPU, no torch.compile, and no mixed_float16 (its loss
scaling reads a flag back to the host every step); gpubench.settings.RunSettings
checks.
Keras's private torch code it replaces and wraps is listed in
keras_internals.CUDA_GRAPHS: Framework.prepare_steps runs the steps as Keras does,
with a warning, where that is not as tested. Imports Keras: import this module
only after the backend has been selected.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import keras

from gpubench.agent.workload.error_text import error_line, is_out_of_memory
from gpubench.errors import GpubenchError

EAGER_TRAINING_STEPS = 1  # Keras's own first step: builds the optimizer's variables
# Characters of the failing operation's message in a capture error: the place after it
# must fit in the run's error message too.
FIRST_LINE_LIMIT = 300


@dataclass
class _Graph:
    """One captured step: the graph, its input buffers and its outputs."""

    graph: Any  # torch.cuda.CUDAGraph
    inputs: list[Any]  # the tensors the graph reads; None where the step got None
    outputs: Any  # the step's logs, rewritten by every replay


@dataclass
class GraphStats:
    """What one model's steps did: for the run's log and tests."""

    captured: list[str] = field(default_factory=list)  # "training 512x3x224x224", ...
    replays: int = 0
    eager_steps: int = 0

    def describe(self) -> str:
        """One line for the run's log."""
        return (f"CUDA graphs: captured {', '.join(self.captured) or 'nothing'}; "
                f"{self.replays} replays, {self.eager_steps} steps run eagerly")


class CaptureFailed(GpubenchError):
    """A step does something a CUDA graph cannot hold; says what and where."""


class GraphedStep:
    """A Keras step function (`one_step_on_data`) replayed from one CUDA graph per shape."""

    def __init__(self, step: Callable[[Any], Any], *, kind: str, eager_steps: int,
                 pool: Any, stats: GraphStats) -> None:
        self._step = step
        self._kind = kind
        self._eager_left = eager_steps
        self._pool = pool  # one memory pool for all of a model's graphs
        self._stats = stats
        self._graphs: dict[tuple, _Graph] = {}

    def __call__(self, data: Any) -> Any:
        if self._eager_left > 0:
            self._eager_left -= 1
            return self._eager(data)
        leaves = [_on_device(leaf) for leaf in keras.tree.flatten(data)]
        key = tuple(None if leaf is None else (tuple(leaf.shape), leaf.dtype, leaf.device)
                    for leaf in leaves)
        if key not in self._graphs:
            self._graphs[key] = self._capture(data, leaves)
        graph = self._graphs[key]
        for buffer, leaf in zip(graph.inputs, leaves, strict=True):
            if buffer is not None:
                buffer.copy_(leaf, non_blocking=True)
        graph.graph.replay()
        self._stats.replays += 1
        return graph.outputs

    def _eager(self, data: Any) -> Any:
        """Keras's own step, on a side stream as torch's graph capture wants its warm-up:
        the autograd nodes it creates must not belong to the default stream."""
        import torch

        self._stats.eager_steps += 1
        ambient = torch.cuda.current_stream()
        side = torch.cuda.Stream()
        side.wait_stream(ambient)
        with torch.cuda.stream(side):
            outputs = self._step(data)
        ambient.wait_stream(side)
        return outputs

    def _capture(self, data: Any, leaves: list[Any]) -> _Graph:
        """Record one step at these shapes (CaptureFailed if it cannot be)."""
        import torch

        inputs = [None if leaf is None else leaf.clone() for leaf in leaves]
        first = next((leaf for leaf in leaves if leaf is not None), None)
        shape = "x".join(str(n) for n in first.shape) if first is not None else "?"
        graph = torch.cuda.CUDAGraph()
        try:
            # thread_local: Keras's callback thread may read metrics meanwhile.
            with torch.cuda.graph(graph, pool=self._pool, capture_error_mode="thread_local"):
                outputs = self._step(keras.tree.pack_sequence_as(data, inputs))
        except Exception as exc:
            if is_out_of_memory(exc):  # the batch does not fit: an OOM as any other
                raise
            # A failed capture leaves torch's allocator and generator unusable for
            # this process: stop the run and say what to change.
            cause = _first_error(exc)
            raise CaptureFailed(
                f"--cuda-graphs: the {self._kind} step at {shape} could not be captured as a "
                f"CUDA graph: {error_line(cause)[:FIRST_LINE_LIMIT]} (at {_where(cause)}); "
                "run without --cuda-graphs") from exc
        self._stats.captured.append(f"{self._kind} {shape}")
        return _Graph(graph, inputs, outputs)


def use_cuda_graphs(model: keras.Model) -> GraphStats:
    """Make `model`'s fit, evaluate, train_on_batch and test_on_batch replay CUDA graphs.

    Call after compile (and after any change to the model's layers). Returns the
    statistics the steps keep.
    """
    import torch

    draw_from_default_generator()
    pool = torch.cuda.graph_pool_handle()
    stats = GraphStats()
    for name, kind, eager_steps in (("train", "training", EAGER_TRAINING_STEPS),
                                    ("test", "validation", 0)):
        _wrap_step_factory(model, name, kind, eager_steps, pool, stats)
    return stats


def _wrap_step_factory(model: keras.Model, name: str, kind: str, eager_steps: int,
                       pool: Any, stats: GraphStats) -> None:
    """Wrap what model.make_{name}_function makes in a GraphedStep."""
    attribute = f"{name}_function"
    make = getattr(model, f"make_{name}_function")

    def make_graphed(force: bool = False) -> Any:
        current = getattr(model, attribute)
        if current is not None and not force:
            return current
        make(force=force)
        graphed = GraphedStep(getattr(model, attribute), kind=kind, eager_steps=eager_steps,
                              pool=pool, stats=stats)
        setattr(model, attribute, graphed)
        return graphed

    setattr(model, f"make_{name}_function", make_graphed)
    setattr(model, attribute, None)  # made again, wrapped, on first use


_PATCHED = "_gpubench_default_generator"


def draw_from_default_generator() -> None:
    """Make Keras's torch random functions draw from torch's default generator.

    Keras gives each call a fresh torch.Generator seeded on the host from its
    seed generator (keras.src.backend.torch.random.torch_seed_generator); the
    default CUDA generator is the one a CUDA graph advances on every replay.
    """
    from keras.src.backend.torch import random

    if getattr(random.torch_seed_generator, _PATCHED, False):
        return

    @functools.wraps(random.torch_seed_generator)  # keeps Keras's signature
    def default_generator(seed: Any) -> None:
        return None  # torch's functions then use the default generator

    setattr(default_generator, _PATCHED, True)
    random.torch_seed_generator = default_generator


def _on_device(leaf: Any) -> Any:
    """A batch element as a tensor on the training GPU (None stays None)."""
    import torch

    if leaf is None:
        return None
    if isinstance(leaf, torch.Tensor) and leaf.is_cuda:
        return leaf
    # Keras's own conversion (numpy arrays from train_on_batch), outside the capture.
    return keras.ops.convert_to_tensor(leaf)


def _first_error(exc: BaseException) -> BaseException:
    """The error that started it: a failed capture raises again when the capture ends."""
    seen = {id(exc)}
    while exc.__context__ is not None and id(exc.__context__) not in seen:
        exc = exc.__context__
        seen.add(id(exc))
    return exc


def _where(exc: BaseException) -> str:
    """The innermost frames of `exc` outside torch: the code that did it."""
    import traceback

    frames = [frame for frame in traceback.extract_tb(exc.__traceback__)
              if "/torch/" not in frame.filename]
    return " <- ".join(f"{Path(frame.filename).name}:{frame.lineno} {frame.name}"
                       for frame in reversed(frames[-3:])) or "?"
