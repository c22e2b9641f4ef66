"""The private parts of Keras that the torch fast paths patch, and the Keras they were tested on.

`torch_async` replaces Keras's torch `convert_to_tensor` wherever a Keras module
holds it and redirects every layer's seed generators (`Layer._seed_generators`,
`SeedGenerator.next`); `cuda_graphs` replaces `torch_seed_generator` and wraps the
torch trainer's step factories (`make_train_function`, `make_test_function`).
None of these is Keras's public API: a Keras release may rename, move or change
any of them. Each patch lists here what it touches, with the signature it was
written against; `usable(patch, model)` checks the installed Keras's version and
those internals before the patch is applied and, where either is not as tested,
warns once (one line: the Keras version and the tested range) and returns False,
so that the run keeps Keras's own code. pyproject.toml pins Keras to TESTED_RANGE;
tests/workload/test_keras_internals.py checks the installed Keras against the lists.

Imports Keras only inside its functions: call them after the backend is selected.
"""

from __future__ import annotations

import importlib
import inspect
from dataclasses import dataclass
from typing import Any

# The Keras releases the patches were tested on, as a pip version specifier: the
# same range as the keras requirement in pyproject.toml. Tested on 3.15.1 (CPU and
# an H200); 3.15.0 passes the CPU tests and differs from 3.15.1 in no module of
# Keras's torch backend. 3.14 changes the torch trainer's train_on_batch and
# convert_to_tensor, and 3.16 is not out: both are left to Keras's own code.
TESTED_RANGE = ">=3.15,<3.16"


@dataclass(frozen=True)
class Internal:
    """A function or method inside Keras that a patch replaces or calls."""

    module: str  # "keras.src.backend.torch.core"
    name: str  # its name in the module: "convert_to_tensor", "SeedGenerator.next"
    signature: str  # as inspect.signature prints it: "(x, dtype=None)"

    def problem(self) -> str | None:
        """What differs from the expected in the installed Keras, or None."""
        where = f"{self.module}.{self.name}"
        try:
            found: Any = importlib.import_module(self.module)
        except ImportError as exc:
            return f"{self.module} cannot be imported ({exc})"
        for part in self.name.split("."):
            found = getattr(found, part, None)
            if found is None:
                return f"{where} is missing"
        try:
            signature = str(inspect.signature(found))
        except (TypeError, ValueError):
            return f"{where} is not a function"
        if signature != self.signature:
            return f"{where} is {signature}, not {self.signature}"
        return None


@dataclass(frozen=True)
class Patch:
    """One fast path that changes Keras's torch code, and what it relies on."""

    name: str  # the module that applies it
    what: str  # how the warning names it
    internals: tuple[Internal, ...]
    model_attributes: tuple[str, ...] = ()  # on the compiled model
    layer_attributes: tuple[str, ...] = ()  # on every layer of the model

    def problems(self, model: Any = None) -> list[str]:
        """What keeps the patch from being applied to `model` (None: the internals
        only) with the installed Keras; empty if nothing does."""
        import keras  # the installed Keras, whichever backend it runs on

        found = []
        if not tested(keras.__version__):
            found.append("not tested on this Keras version")
        found += [p for p in (internal.problem() for internal in self.internals) if p]
        if model is not None:
            from gpubench.agent.workload.augment import all_layers

            found += [f"a Keras model has no {name}" for name in self.model_attributes
                      if not hasattr(model, name)]
            layers = all_layers(model)
            found += [f"a Keras layer has no {name} list" for name in self.layer_attributes
                      if not all(isinstance(getattr(layer, name, None), list)
                                 for layer in layers)]
        return found


_CORE = "keras.src.backend.torch.core"

TORCH_ASYNC = Patch(
    name="torch_async",
    what="keeping the host ahead of the GPU (torch_async)",
    internals=(
        Internal(_CORE, "convert_to_tensor", "(x, dtype=None, sparse=None, ragged=None)"),
        Internal(_CORE, "to_torch_dtype", "(dtype)"),
        Internal(_CORE, "get_device", "()"),
        Internal(_CORE, "result_type", "(*dtypes)"),
        Internal("keras.src.random.seed_generator", "SeedGenerator.next",
                 "(self, ordered=True)"),
    ),
    layer_attributes=("_seed_generators",),
)

CUDA_GRAPHS = Patch(
    name="cuda_graphs",
    what="CUDA graphs (--cuda-graphs)",
    internals=(
        Internal("keras.src.backend.torch.random", "torch_seed_generator", "(seed)"),
        Internal("keras.src.backend.torch.trainer", "TorchTrainer.make_train_function",
                 "(self, force=False)"),
        Internal("keras.src.backend.torch.trainer", "TorchTrainer.make_test_function",
                 "(self, force=False)"),
    ),
    model_attributes=("train_function", "test_function"),
)

PATCHES = (TORCH_ASYNC, CUDA_GRAPHS)


def tested(version: str) -> bool:
    """Whether Keras `version` is in TESTED_RANGE (a pre-release never is)."""
    from packaging.specifiers import SpecifierSet
    from packaging.version import InvalidVersion, Version

    try:
        return Version(version) in SpecifierSet(TESTED_RANGE)
    except InvalidVersion:
        return False


_warned: set[str] = set()  # the patches usable() has warned about in this process


def usable(patch: Patch, model: Any) -> bool:
    """Whether `patch` may be applied to `model` with the installed Keras. If not, one
    warning (once per process and patch) says why; the caller then leaves Keras's own
    code in place."""
    found = patch.problems(model)
    if not found:
        return True
    if patch.name not in _warned:
        _warned.add(patch.name)
        import keras

        from gpubench.agent.workload import stream

        stream.warn(f"{patch.what} not applied, Keras's own code runs instead: "
                    f"{'; '.join(found)} (Keras {keras.__version__}; tested on "
                    f"keras{TESTED_RANGE})")
    return False
