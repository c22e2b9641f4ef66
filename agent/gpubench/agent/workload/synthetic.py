"""The synthetic stand-in for rock-paper-scissors: same shape, generated on demand.

2136 RGB PNGs of 300x200, 712 per class, like the public dataset. Each image is
a hand-like shape (a palm with 0, 2 or 5 fingers for rock, scissors, paper) on a
lit, textured background with sensor-like noise, so PNG sizes and decode cost
resemble photographs rather than flat drawings. Image i depends only on
(GENERATOR_SEED, i): a limited run generates only the images it reads, and every
machine gets the same pixels. Files are written atomically into the cache.
"""

from __future__ import annotations

import math
import os
import re
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw, ImageFilter

from gpubench.settings import CLASSES

NAME = "synthetic-rps"
VERSION = 1  # bump when the pixels change: the cache folder and fingerprint follow
IMAGE_COUNT = 2136  # 712 per class
WIDTH, HEIGHT = 300, 200
GENERATOR_SEED = 2136
FINGERS = {"rock": 0, "scissors": 2, "paper": 5}
_INDEX = re.compile(r"(\d+)\.png$")


def cache_root() -> Path:
    """$GPUBENCH_CACHE, else ~/.cache/gpubench."""
    configured = os.environ.get("GPUBENCH_CACHE")
    return Path(configured) if configured else Path.home() / ".cache" / "gpubench"


def dataset_folder() -> Path:
    """Where the synthetic images live."""
    return cache_root() / "datasets" / f"{NAME}-v{VERSION}"


def file_name(index: int) -> str:
    """Relative path of image `index`: its class folder, then the index."""
    return f"{CLASSES[index % len(CLASSES)]}/{index:04d}.png"


def image_index(relative_path: str) -> int | None:
    """The index of a synthetic image from its path, None for any other file."""
    match = _INDEX.search(relative_path)
    return int(match.group(1)) if match else None


def ensure(count: int = IMAGE_COUNT, folder: Path | None = None) -> Path:
    """Generate whatever of images 0..count-1 is missing; returns the dataset folder."""
    if not 1 <= count <= IMAGE_COUNT:
        raise ValueError(f"the synthetic set has 1 to {IMAGE_COUNT} images, not {count}")
    folder = folder or dataset_folder()
    for class_name in CLASSES:
        (folder / class_name).mkdir(parents=True, exist_ok=True)
    missing = [i for i in range(count) if not (folder / file_name(i)).exists()]
    if missing:
        with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
            list(pool.map(lambda i: _write(folder, i), missing))
    return folder


def _write(folder: Path, index: int) -> None:
    target = folder / file_name(index)
    # Written next to the target, then renamed: a reader never sees half a file,
    # and two processes generating at once write the same bytes.
    handle, temporary = tempfile.mkstemp(dir=target.parent, prefix=".tmp-", suffix=".part")
    try:
        with os.fdopen(handle, "wb") as out:
            render(index).save(out, format="PNG")
        os.replace(temporary, target)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def render(index: int) -> Image.Image:
    """Image `index` of the synthetic set (deterministic)."""
    rng = np.random.default_rng((GENERATOR_SEED, index))
    fingers = FINGERS[CLASSES[index % len(CLASSES)]]
    canvas = _background(rng)
    hand = _hand_mask(rng, fingers)
    skin = _skin(rng)
    alpha = np.asarray(hand, dtype=np.float32)[..., None] / 255.0
    pixels = canvas * (1.0 - alpha) + skin * alpha
    # Sensor noise: what makes a photograph's PNG large and slow to decode.
    pixels += rng.normal(0.0, rng.uniform(3.0, 6.0), size=pixels.shape)
    return Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8), mode="RGB")


def _smooth_field(rng: np.random.Generator, cells: tuple[int, int], channels: int) -> np.ndarray:
    """Random values on a coarse grid, interpolated up to the image (soft light, texture)."""
    coarse = rng.uniform(0, 255, size=(cells[0], cells[1], channels)).astype(np.uint8)
    image = Image.fromarray(coarse.squeeze(), mode="RGB" if channels == 3 else "L")
    return np.asarray(image.resize((WIDTH, HEIGHT), Image.Resampling.BICUBIC), np.float32) / 255.0


def _background(rng: np.random.Generator) -> np.ndarray:
    base = np.array([rng.uniform(20, 80), rng.uniform(120, 200), rng.uniform(40, 100)])
    light = 0.7 + 0.5 * _smooth_field(rng, (3, 4), 1)[..., None]
    texture = (_smooth_field(rng, (25, 37), 3) - 0.5) * 30.0
    return base * light + texture


def _skin(rng: np.random.Generator) -> np.ndarray:
    tone = np.array([rng.uniform(170, 235), rng.uniform(120, 180), rng.uniform(90, 150)])
    shading = 0.75 + 0.35 * _smooth_field(rng, (4, 6), 1)[..., None]
    pores = (_smooth_field(rng, (50, 75), 3) - 0.5) * 18.0
    return tone * shading + pores


def _hand_mask(rng: np.random.Generator, fingers: int) -> Image.Image:
    """A palm with fingers, rotated and placed at random, soft-edged."""
    mask = Image.new("L", (WIDTH, HEIGHT), 0)
    draw = ImageDraw.Draw(mask)
    cx, cy = rng.uniform(110, 190), rng.uniform(80, 120)
    radius = rng.uniform(35, 50)
    angle = rng.uniform(0, 2 * math.pi)
    draw.ellipse([cx - radius, cy - radius * 0.85, cx + radius, cy + radius * 0.85], fill=255)
    spread = 0.22 if fingers == 5 else 0.3
    for k in range(fingers):
        a = angle + (k - (fingers - 1) / 2) * spread
        length = radius * rng.uniform(1.3, 1.9)
        width = radius * rng.uniform(0.22, 0.3)
        x0, y0 = cx + math.cos(a) * radius * 0.6, cy + math.sin(a) * radius * 0.6
        x1, y1 = x0 + math.cos(a) * length, y0 + math.sin(a) * length
        draw.line([x0, y0, x1, y1], fill=255, width=int(width))
        draw.ellipse([x1 - width / 2, y1 - width / 2, x1 + width / 2, y1 + width / 2], fill=255)
    # A thumb on rock and scissors, tucked across the palm.
    if fingers < 5:
        a = angle + math.pi / 2
        x0, y0 = cx + math.cos(a) * radius * 0.5, cy + math.sin(a) * radius * 0.5
        draw.line([cx, cy, x0, y0], fill=255, width=int(radius * 0.35))
    return mask.filter(ImageFilter.GaussianBlur(rng.uniform(1.0, 2.5)))
