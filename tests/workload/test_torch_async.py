"""Keeping the host ahead of the GPU (torch): the same training, value for value.

On the CPU, in a child process (Keras on torch): a model with dropout and the
protocol's augmentation trains a few steps with and without
`torch_async.keep_host_ahead`; the weights after training must be identical,
the seeds must now come from host memory, and Python numbers must still get
Keras's dtypes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.slow

SCRIPT = r"""
import json
import keras, numpy as np, torch
from gpubench.agent.workload import torch_async

def train(host_ahead):
    keras.utils.set_random_seed(5)
    model = keras.Sequential([
        keras.Input((16, 16, 3)),
        keras.layers.RandomRotation(0.2), keras.layers.RandomFlip("horizontal"),
        keras.layers.RandomZoom(0.2),
        keras.layers.Conv2D(4, 3), keras.layers.Dropout(0.3, noise_shape=(None, 1, 1, 1)),
        keras.layers.Dropout(0.2),
        keras.layers.GlobalAveragePooling2D(), keras.layers.Dense(3, activation="softmax"),
    ])
    model.compile(optimizer=keras.optimizers.Adam(1e-3), loss="categorical_crossentropy",
                  metrics=["accuracy"])
    generators = torch_async.keep_host_ahead(model) if host_ahead else 0
    rng = np.random.default_rng(0)
    x = rng.integers(0, 255, (8, 16, 16, 3)).astype("float32")
    y = np.eye(3, dtype="float32")[rng.integers(0, 3, 8)]
    model.fit(x, y, batch_size=4, epochs=3, verbose=0)
    state = model.layers[0].generator.next()
    return model.get_weights(), generators, str(getattr(state, "device", "?"))

theirs, _, their_seed = train(False)
ours, generators, our_seed = train(True)
from keras.src.backend.torch import core
print(json.dumps({
    "max_diff": max(float(np.abs(a - b).max()) for a, b in zip(theirs, ours)),
    "generators": generators,
    "seed_devices": [their_seed, our_seed],
    "dtypes": [str(core.convert_to_tensor(v).dtype) for v in (True, 3, 2**40, 0.5)],
    "given": str(core.convert_to_tensor(3, dtype="float16").dtype),
    "shape": [str(t.dtype) + str(t.tolist()) for t in (
        core.convert_to_tensor((4, 3, 2), dtype="int32"), core.convert_to_tensor([1, 2.5]))],
}))
"""


def test_same_training_with_host_kept_ahead() -> None:
    done = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True,
                          check=False, timeout=300, env={**os.environ, "KERAS_BACKEND": "torch"})
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert found["max_diff"] == 0.0  # the same seeds, the same numbers: the same weights
    assert found["generators"] == 5  # three augmentation layers, two dropouts
    assert found["seed_devices"][1] == "cpu"
    assert found["dtypes"] == ["torch.bool", "torch.int32", "torch.int64", "torch.float32"]
    assert found["given"] == "torch.float16"
    assert found["shape"] == ["torch.int32[4, 3, 2]", "torch.float32[1.0, 2.5]"]
