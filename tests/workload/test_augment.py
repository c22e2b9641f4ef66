"""--batched-augmentation: the protocol's rotation and zoom, batched, bit for bit the same.

Compared with Keras's own torch code on the CPU, in a child process (Keras on torch).
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
import keras, torch
from keras.src.backend.torch import image as keras_image
from gpubench.agent.workload import augment, model

torch.manual_seed(0)
B, H, W = 12, 40, 48
images = torch.rand(B, H, W, 3) * 255
angle = (torch.rand(B) - 0.5) * 2.5
zoom = 0.8 + 0.4 * torch.rand(B)
transform = torch.stack([torch.cos(angle) * zoom, -torch.sin(angle), 7 * torch.rand(B),
                         torch.sin(angle), torch.cos(angle) / zoom, -5 * torch.rand(B),
                         torch.zeros(B), torch.zeros(B)], 1)
functions = {}
for mode in ("reflect", "constant", "nearest", "wrap", "mirror"):
    for interpolation in ("bilinear", "nearest"):
        theirs = keras_image.affine_transform(images, transform.clone(), interpolation, mode, 3.0)
        ours = augment.affine_transform(images, transform.clone(), interpolation, mode, 3.0)
        functions[f"{mode}/{interpolation}"] = float((ours - theirs).abs().max())

def augmented(batched):
    keras.utils.set_random_seed(7)
    network = model.build("B0", 48)
    changed = augment.batch_affine_transforms(network) if batched else 0
    layer = network.get_layer("augmentation")
    torch.manual_seed(1)
    x = torch.rand(6, 48, 48, 3) * 255
    return changed, layer(x, training=True), layer(x, training=True)

_, keras_first, keras_second = augmented(False)
changed, ours_first, ours_second = augmented(True)
print(json.dumps({
    "functions": functions,
    "changed": changed,
    "layer": [float((ours_first - keras_first).abs().max()),
              float((ours_second - keras_second).abs().max())],
    "moved": float((keras_first - keras_second).abs().max()),
}))
"""


def test_batched_transform_equals_keras_bit_for_bit() -> None:
    done = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True,
                          check=False, timeout=300, env={**os.environ, "KERAS_BACKEND": "torch"})
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert found["functions"] and all(diff == 0.0 for diff in found["functions"].values())
    assert found["changed"] == 2  # RandomRotation and RandomZoom
    assert found["layer"] == [0.0, 0.0]  # the same random transforms, the same pixels
    assert found["moved"] > 0  # and the augmentation really transformed the images
