"""Helpers of the workload tests (a module of its own: every test folder has a conftest)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from PIL import Image


def write_png(
    path: Path, mode: str = "RGB", size: tuple[int, int] = (30, 20), seed: int = 0
) -> Path:
    """A small real image file in `mode` (RGB, L, RGBA, P)."""
    rng = np.random.default_rng(seed)
    channels = {"RGB": 3, "RGBA": 4, "L": 1, "P": 1}[mode]
    pixels = rng.integers(0, 256, size=(size[1], size[0], channels), dtype=np.uint8)
    image = Image.fromarray(pixels.squeeze(), mode="L" if channels == 1 else mode)
    if mode == "P":
        image = image.convert("P")
    path.parent.mkdir(parents=True, exist_ok=True)
    image.save(path)
    return path
