"""--batched-augmentation: the protocol's rotation and zoom, batched, the same pixels.

Compared with Keras's own torch code on the CPU, in a child process (Keras on torch).

Bit for bit where that holds by construction: a whole-pixel shift, whose coordinates and
bilinear weights are exact in float32 on any CPU, and therefore so are the sums. For a
rotation and zoom the two codes round a sample's coordinate differently on some CPUs (a
fused multiply-add or not, another vector width): the coordinate then differs by an ulp,
a bilinear weight by as much, and the pixel by that times the range of the values, so
those are compared within a bound derived from exactly that (`ULPS`), and nearest
sampling, which can round such a coordinate to the neighbouring pixel, is compared by
how many pixels differ.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

pytestmark = pytest.mark.slow

# How many float32 ulps of the largest sample coordinate two correct codes may differ by:
# one rounding per multiply and add of the coordinate, each possibly fused.
ULPS = 8
# Nearest sampling: the share of pixels that may take the neighbouring pixel's value, when
# a coordinate within that many ulps of a half lands on the other side of it.
NEAREST_SHARE = 0.002

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
# A whole-pixel shift: every coordinate and weight exact, whatever the CPU.
shift = torch.tensor([1.0, 0.0, 3.0, 0.0, 1.0, -2.0, 0.0, 0.0]).repeat(B, 1)
shift[::2, 2], shift[1::2, 5] = -4.0, 5.0
functions, shifted, nearest_share = {}, {}, {}
for mode in ("reflect", "constant", "nearest", "wrap", "mirror"):
    for interpolation in ("bilinear", "nearest"):
        name = f"{mode}/{interpolation}"
        theirs = keras_image.affine_transform(images, transform.clone(), interpolation, mode, 3.0)
        ours = augment.affine_transform(images, transform.clone(), interpolation, mode, 3.0)
        functions[name] = float((ours - theirs).abs().max())
        nearest_share[name] = float((ours != theirs).float().mean())
        theirs = keras_image.affine_transform(images, shift.clone(), interpolation, mode, 3.0)
        ours = augment.affine_transform(images, shift.clone(), interpolation, mode, 3.0)
        shifted[name] = float((ours - theirs).abs().max())
# The largest coordinate a sample is taken at: the transform of the image's far corner.
rows, cols = torch.tensor([0.0, H - 1]), torch.tensor([0.0, W - 1])
t = transform
largest = max(float((t[:, 4] * r + t[:, 3] * c + t[:, 5]).abs().max()) for r in rows for c in cols)
largest = max(largest, max(float((t[:, 1] * r + t[:, 0] * c + t[:, 2]).abs().max())
                           for r in rows for c in cols))

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
    "shifted": shifted,
    "nearest_share": nearest_share,
    "largest_coordinate": largest,
    "value_range": float(images.max() - images.min()),
    "changed": changed,
    "layer": [float((ours_first - keras_first).abs().max()),
              float((ours_second - keras_second).abs().max())],
    "layer_range": float(ours_first.abs().max()),
    "moved": float((keras_first - keras_second).abs().max()),
}))
"""


def ulp_bound(coordinate: float, values: float) -> float:
    """How far apart two correct bilinear samples may lie: ULPS float32 ulps of the
    coordinate, times the range of the values the weight multiplies."""
    return ULPS * float(np.spacing(np.float32(coordinate))) * values


def test_batched_transform_equals_keras() -> None:
    done = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True,
                          check=False, timeout=300, env={**os.environ, "KERAS_BACKEND": "torch"})
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    # Bit for bit where the arithmetic is exact on any CPU: a whole-pixel shift.
    assert len(found["shifted"]) == 10 and all(d == 0.0 for d in found["shifted"].values())
    bound = ulp_bound(found["largest_coordinate"], found["value_range"])
    assert 0 < bound < 0.05  # the bound itself: hundredths of a 0-255 pixel at most
    for name, diff in found["functions"].items():
        if name.endswith("/bilinear"):
            assert diff <= bound, (name, diff, bound)
        else:  # nearest: a pixel's value or its neighbour's, seldom the neighbour's
            assert found["nearest_share"][name] <= NEAREST_SHARE, (name, found)
    assert found["changed"] == 2  # RandomRotation and RandomZoom
    # The same random transforms, the same pixels (to the same bound: the layer's zoom
    # and rotation reach at most twice the 48 px image's size).
    layer_bound = ulp_bound(2 * 48, found["layer_range"])
    assert all(diff <= layer_bound for diff in found["layer"]), (found["layer"], layer_bound)
    assert found["moved"] > 100 * layer_bound  # and the augmentation really moved pixels
