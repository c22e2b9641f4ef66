"""The frameworks under Keras, one class each (TensorFlow, PyTorch, JAX).

`get(name)` is the one instance of a framework's `Framework` subclass (base.py),
made on first use; `current()` is the one Keras runs on. The rest of the workload
asks these what differs between frameworks instead of comparing backend names.
Importing this package imports no framework and none of the implementations: a
framework's module is imported when it is first asked for, and imports its
framework only inside its methods.
"""

from __future__ import annotations

import functools
import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gpubench.agent.workload.frameworks.base import Framework

# --backend name -> (module in this package, class)
IMPLEMENTATIONS = {
    "tensorflow": ("tensorflow", "TensorFlow"),
    "torch": ("torch", "Torch"),
    "jax": ("jax", "Jax"),
}


@functools.cache
def get(name: str) -> Framework:
    """The framework called `name` ('tensorflow', 'torch' or 'jax')."""
    if name not in IMPLEMENTATIONS:
        raise ValueError(f"no framework {name!r}: one of {', '.join(IMPLEMENTATIONS)}")
    module, cls = IMPLEMENTATIONS[name]
    return getattr(importlib.import_module(f"{__name__}.{module}"), cls)()


def current() -> Framework:
    """The framework Keras runs on (imports Keras: call it once the backend is selected)."""
    import keras

    return get(keras.backend.backend())
