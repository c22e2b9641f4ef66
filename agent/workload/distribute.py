"""Data parallelism over several GPUs (--gpus N > 1).

- TensorFlow: MirroredStrategy with HierarchicalCopyAllReduce, as the protocol.
- JAX: keras.distribution.DataParallel over the first N GPUs.
- torch: Keras's torch backend has no data parallelism of its own; `torch_ddp`
  runs one process per GPU that all-reduces the gradients (see there).

The global batch is the per-GPU batch times N in every case.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from gpubench.settings import RunSettings


@contextlib.contextmanager
def replicas(settings: RunSettings) -> Iterator[None]:
    """The scope the model must be built and compiled in for `settings.gpus` GPUs."""
    if settings.gpus <= 1 or settings.backend == "torch":
        yield
        return
    if settings.backend == "tensorflow":
        import tensorflow as tf

        strategy = tf.distribute.MirroredStrategy(
            devices=[f"/gpu:{i}" for i in range(settings.gpus)],
            cross_device_ops=tf.distribute.HierarchicalCopyAllReduce(),
        )
        with strategy.scope():
            yield
        return
    import keras

    devices = keras.distribution.list_devices("gpu")[: settings.gpus]
    keras.distribution.set_distribution(keras.distribution.DataParallel(devices=devices))
    yield
