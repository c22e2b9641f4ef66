"""Keras on torch without making the host wait for the GPU inside a training step.

Keras's torch backend turns some values into GPU tensors through copies from
host memory, and torch makes the host wait, before such a copy, until the GPU
has finished all the work queued so far. A step of EfficientNet does that a few
dozen times: for every Python number an operation is given (the optimizer's
betas, the metrics' counts), and for every random draw of a seeded layer
(dropout, the augmentation), whose seed lives on the GPU. The host then cannot
queue step n+1 while the GPU runs step n, and the GPU idles in between.
`keep_host_ahead(model)` removes those waits without changing a value:

- a Python number, or a short tuple of them (the loss divides by the product
  of a shape), becomes a GPU tensor through fill kernels (`torch.full`) instead
  of a copy: the same values and dtype, queued like any other kernel;
- every seed generator of the model draws its seeds from a copy of its state in
  host memory (`HostSeeds`): the same seeds, so the same random numbers.

Used for torch on a GPU (on the CPU it changes nothing but is harmless, which the
tests use), where keras_internals.TORCH_ASYNC finds the Keras internals this
replaces as they were tested: Framework.prepare_steps checks before it calls
`keep_host_ahead`. Imports Keras: import it after the backend has been selected.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import Any

import keras

from gpubench.agent.workload.augment import all_layers


def keep_host_ahead(model: keras.Model) -> int:
    """Apply both changes; returns how many seed generators now draw on the host."""
    convert_numbers_by_fill()
    generators = 0
    for layer in all_layers(model):
        for generator in getattr(layer, "_seed_generators", []):
            HostSeeds.attach(generator)
            generators += 1
    return generators


class HostSeeds:
    """A SeedGenerator's sequence of seeds, kept in host memory.

    The same initial state, the same increments and the same int32 arithmetic as
    SeedGenerator.next, from a copy read from the device once. The device copy of
    the state is left where it was: nothing in a run reads it.
    """

    def __init__(self, generator: keras.random.SeedGenerator) -> None:
        import torch

        self._state = generator.state.value.detach().to("cpu").clone()
        self._step = torch.tensor([0, 1], dtype=self._state.dtype)

    @classmethod
    def attach(cls, generator: keras.random.SeedGenerator) -> None:
        """Make `generator.next()` draw from host memory."""
        if not isinstance(getattr(generator.next, "__self__", None), cls):
            generator.next = cls(generator).next

    def next(self, ordered: bool = True) -> Any:
        """The next seed pair, as SeedGenerator.next computes it."""
        value = self._state.clone()
        if ordered:
            self._state = self._state + self._step
        else:
            self._state = (self._state + 1) * 5387 % 933199
        return value


_PATCHED = "_gpubench_fills_numbers"


def convert_numbers_by_fill() -> None:
    """Make Keras's torch convert_to_tensor create Python numbers on the GPU by a fill."""
    from keras.src.backend.torch import core

    original = core.convert_to_tensor
    if getattr(original, _PATCHED, False):
        return
    replacement = _fill_numbers(original, core)
    # Keras's modules import the function by name: replace every such binding.
    for name, module in list(sys.modules.items()):
        if name.startswith("keras") and getattr(module, "convert_to_tensor", None) is original:
            # ModuleType declares no attributes of its own to assign.
            module.convert_to_tensor = replacement  # type: ignore[attr-defined]


def _fill_numbers(original: Callable[..., Any], core: Any) -> Callable[..., Any]:
    import torch

    def number_dtype(x: Any) -> Any:
        """Keras's own choice of dtype for a Python number."""
        if type(x) is bool:
            return torch.bool
        if type(x) is int:
            return torch.int64 if x < -(2**31) or x >= 2**31 else torch.int32
        return core.to_torch_dtype(keras.config.floatx())

    # Wraps Keras's function: its signature stays Keras's (keras_internals checks it).
    @functools.wraps(original)
    def convert_to_tensor(x: Any, dtype: Any = None, sparse: Any = None,
                          ragged: Any = None) -> Any:
        if not sparse and not ragged and (type(x) in NUMBERS or _numbers(x)):
            device = torch.device(core.get_device())
            if device.type != "meta":  # Keras's symbolic build keeps its own path
                if type(x) in NUMBERS:
                    torch_dtype = (core.to_torch_dtype(dtype) if dtype is not None
                                   else number_dtype(x))
                    return torch.full((), x, dtype=torch_dtype, device=device)
                # A tuple of numbers (a shape, say): Keras's dtype for the tuple.
                torch_dtype = core.to_torch_dtype(
                    dtype if dtype is not None else core.result_type(*(type(v) for v in x)))
                return torch.stack([torch.full((), v, dtype=torch_dtype, device=device)
                                    for v in x])
        return original(x, dtype=dtype, sparse=sparse, ragged=ragged)

    setattr(convert_to_tensor, _PATCHED, True)
    return convert_to_tensor


NUMBERS = (bool, int, float)
SMALL = 8  # longer lists of numbers are data, not shapes: Keras's own copy is cheaper


def _numbers(x: Any) -> bool:
    """A short, flat, non-empty tuple or list of Python numbers."""
    return (type(x) in (tuple, list) and 0 < len(x) <= SMALL
            and all(type(v) in NUMBERS for v in x))
