"""--fused-batchnorm: the protocol's batch normalization through torch's fused kernel.

Compared with Keras's own torch code on the CPU, in a child process (Keras on
torch): outputs while training and at inference, the moving averages after
several steps, and the gradients, for channels-last and channels-first layers;
and under mixed_bfloat16 the fused network is as close to float32 as Keras's.
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
from gpubench.agent.workload import batchnorm, model

def small(axis):
    shape = (12, 12, 5) if axis == -1 else (5, 12, 12)
    fmt = "channels_last" if axis == -1 else "channels_first"
    return keras.Sequential([
        keras.Input(shape),
        keras.layers.Conv2D(8, 3, data_format=fmt),
        keras.layers.BatchNormalization(axis=axis, momentum=0.9),
        keras.layers.Activation("swish"),
        keras.layers.Conv2D(4, 3, data_format=fmt),
        keras.layers.BatchNormalization(axis=axis, epsilon=1e-5, center=False),
    ])

found = {}
rng = np.random.default_rng(0)
for axis in (-1, 1):
    keras.utils.set_random_seed(3)
    theirs = small(axis)
    ours = small(axis)
    ours.set_weights(theirs.get_weights())
    found[f"changed{axis}"] = batchnorm.fuse_batch_normalization(ours)
    out, grads = [], []
    for step in range(4):
        x = torch.tensor(rng.normal(2.0, 3.0, size=(6, *theirs.input_shape[1:])),
                         dtype=torch.float32)
        pair = [net(x, training=True) for net in (theirs, ours)]
        out.append(float((pair[0] - pair[1]).abs().max() / pair[0].abs().max()))
        g = [torch.autograd.grad(p.square().mean(), [v.value for v in net.trainable_weights])
             for p, net in zip(pair, (theirs, ours))]
        # Relative to all gradients together: a conv bias before a normalization has
        # a true gradient of zero, and its rounding noise has no scale of its own.
        diff = sum(float((a - b).square().sum()) for a, b in zip(*g)) ** 0.5
        grads.append(diff / sum(float(a.square().sum()) for a in g[0]) ** 0.5)
    moving = [float(np.abs(a - b).max()) for a, b in zip(theirs.get_weights(), ours.get_weights())]
    infer = [net(x, training=False) for net in (theirs, ours)]
    found[f"axis{axis}"] = {
        "train": max(out), "grad": max(grads), "moving": max(moving),
        "moved": float(np.abs(theirs.layers[1].moving_mean.numpy()).max()),
        "infer": float((infer[0] - infer[1]).abs().max() / infer[0].abs().max()),
    }

x = torch.tensor(rng.integers(0, 255, size=(4, 48, 48, 3)), dtype=torch.float32)
def network(precision, fused):
    model.set_precision(precision)
    keras.utils.set_random_seed(1)
    net = model.build("B0", 48)
    if fused:
        found["changed_b0"] = batchnorm.fuse_batch_normalization(net)
    base = net.get_layer("efficientnetb0")
    return base(x, training=True).float().detach()
reference = network("float32", False)
for precision, fused in (("float32", True), ("mixed_bfloat16", False), ("mixed_bfloat16", True)):
    found[f"{precision}/{fused}"] = float((network(precision, fused) - reference).norm()
                                          / reference.norm())
print(json.dumps(found))
"""


def test_fused_batchnorm_equals_keras() -> None:
    done = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True,
                          check=False, timeout=300, env={**os.environ, "KERAS_BACKEND": "torch"})
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert found["changed-1"] == found["changed1"] == 2
    assert found["changed_b0"] == 49  # every BatchNormalization of EfficientNetB0
    for axis in ("axis-1", "axis1"):
        figures = found[axis]
        assert figures["train"] < 1e-5, figures
        assert figures["grad"] < 1e-4, figures
        assert figures["moving"] < 1e-5 and figures["moved"] > 0.1, figures
        assert figures["infer"] < 1e-5, figures
    assert found["float32/True"] < 1e-4  # the whole B0 base, float32: the same network
    # bfloat16 drifts from float32 through 49 layers either way; the fused kernel no more.
    assert found["mixed_bfloat16/True"] < 1.2 * found["mixed_bfloat16/False"]
