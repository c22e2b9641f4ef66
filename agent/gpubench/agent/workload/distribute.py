"""Data parallelism over several GPUs (--gpus N > 1).

The framework sets it up (frameworks): TensorFlow's MirroredStrategy with
HierarchicalCopyAllReduce, as the protocol; JAX's keras.distribution.DataParallel
over the first N GPUs; torch has none inside Keras, and `torch_ddp` runs one
process per GPU that all-reduces the gradients (see there).

The global batch is the per-GPU batch times N in every case.
"""

from __future__ import annotations

import contextlib

from gpubench.agent.workload import frameworks
from gpubench.settings import RunSettings


def replicas(settings: RunSettings) -> contextlib.AbstractContextManager[None]:
    """The scope the model must be built and compiled in for `settings.gpus` GPUs."""
    return frameworks.get(settings.backend).replicas(settings.gpus)
