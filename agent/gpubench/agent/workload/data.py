"""The benchmark's images on disk: finding them, checking them, decoding them.

A dataset is a folder with one sub-folder per class, read the way the protocol's
`image_dataset_from_directory(..., shuffle=True, seed=12, validation_split=0.2)`
reads it: class folders in name order, files in walk order, one global shuffle
with NumPy's RandomState(seed), the last 20% for validation. Errors name the file
or folder at fault.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PIL import Image

from gpubench import events
from gpubench.errors import DataError

# image_dataset_from_directory's allow-list; every other file is skipped and counted.
IMAGE_SUFFIXES = (".bmp", ".gif", ".jpeg", ".jpg", ".png")


@dataclass(frozen=True)
class Dataset:
    """The images of one run, in the protocol's shuffled order."""

    name: str
    root: Path
    class_names: tuple[str, ...]
    files: tuple[str, ...]  # paths relative to root
    labels: tuple[int, ...]  # class index of each file
    skipped_files: int
    fingerprint: str
    seed: int
    validation_split: float

    @property
    def image_count(self) -> int:
        """How many images the run uses."""
        return len(self.files)

    @property
    def validation_count(self) -> int:
        """Images held out for validation (the last ones after the shuffle)."""
        return int(self.validation_split * self.image_count)

    @property
    def train_count(self) -> int:
        """Images trained on each epoch."""
        return self.image_count - self.validation_count

    def paths(self, indices: Iterable[int]) -> list[Path]:
        """Absolute paths of the given images."""
        return [self.root / self.files[i] for i in indices]

    def describe(self) -> events.Dataset:
        """The data set as the `started` event tells it."""
        return events.Dataset(
            name=self.name,
            image_count=self.image_count,
            fingerprint=self.fingerprint,
            train_images=self.train_count,
            validation_images=self.validation_count,
            validation_split=self.validation_split,
            seed=self.seed,
            skipped_files=self.skipped_files,
        )


def read_dataset(
    root: Path,
    *,
    seed: int,
    validation_split: float,
    limit: int | None = None,
    name: str | None = None,
    keep: Callable[[str], bool] | None = None,
) -> Dataset:
    """Index, shuffle, check and fingerprint the images under `root`.

    `limit` keeps the first images after the shuffle (smoke runs); `keep`
    selects files by relative path before the shuffle (the synthetic set uses it
    to read exactly the images it generated for a limit).
    """
    root = Path(root)
    if not root.is_dir():
        raise DataError(f"{root}: no such data folder")
    classes = sorted(p.name for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))
    if len(classes) < 2:
        raise DataError(
            f"{root}: needs at least 2 class folders (one per class), found {len(classes)}"
        )
    skipped = sum(1 for p in root.iterdir() if p.is_file())
    files: list[str] = []
    labels: list[int] = []
    for label, class_name in enumerate(classes):
        found, not_images = _class_images(root, class_name)
        skipped += not_images
        if keep is not None:
            found = [f for f in found if keep(f)]
        if not found:
            raise DataError(
                f"{root / class_name}: class folder has no images ({', '.join(IMAGE_SUFFIXES)})"
            )
        files += found
        labels += [label] * len(found)

    # The same two shuffles as Keras's index_directory, so the split matches it.
    order_files = np.array(files, dtype=object)
    np.random.RandomState(seed).shuffle(order_files)
    order_labels = np.array(labels)
    np.random.RandomState(seed).shuffle(order_labels)
    if limit is not None:
        order_files, order_labels = order_files[:limit], order_labels[:limit]
        if len(set(order_labels.tolist())) < 2:
            raise DataError(f"{root}: the first {limit} images hold fewer than 2 classes")

    chosen = tuple(str(f) for f in order_files)
    return Dataset(
        name=name or root.name,
        root=root,
        class_names=tuple(classes),
        files=chosen,
        labels=tuple(int(x) for x in order_labels),
        skipped_files=skipped,
        fingerprint=fingerprint(root, chosen),
        seed=seed,
        validation_split=validation_split,
    )


def _class_images(root: Path, class_name: str) -> tuple[list[str], int]:
    """Image paths (relative to root) under one class folder, and the count of other files."""
    images: list[str] = []
    others = 0
    for folder, _, names in sorted(os.walk(root / class_name), key=lambda entry: entry[0]):
        for file_name in sorted(names):
            if file_name.lower().endswith(IMAGE_SUFFIXES):
                images.append(os.path.relpath(os.path.join(folder, file_name), root))
            else:
                others += 1
    return images, others


def fingerprint(root: Path, files: Sequence[str]) -> str:
    """sha256 over the images' names, sizes and contents; checks each one is a readable image.

    Reading every file once here also catches a truncated or corrupt image before
    a long run starts rather than in the middle of an epoch.
    """
    with ThreadPoolExecutor(max_workers=_workers()) as pool:
        digests = list(pool.map(lambda f: _file_digest(root, f), files))
    total = hashlib.sha256()
    for name, (size, digest) in sorted(zip(files, digests, strict=True)):
        total.update(f"{name}\0{size}\0{digest}\n".encode())
    return "sha256:" + total.hexdigest()


def _file_digest(root: Path, name: str) -> tuple[int, str]:
    path = root / name
    content = path.read_bytes()
    try:
        with Image.open(path) as image:
            image.verify()
    except (OSError, SyntaxError, ValueError, Image.DecompressionBombError) as exc:
        raise DataError(f"{path}: not a readable image ({exc})") from exc
    return len(content), hashlib.sha256(content).hexdigest()


def decode_image(path: Path, size: int) -> np.ndarray:
    """One image as uint8 RGB, resized (bilinear, aspect not kept) to size x size.

    Grayscale, palette and RGBA images become RGB (alpha is dropped, as
    TensorFlow's decode_image(channels=3) does).
    """
    try:
        with Image.open(path) as image:
            rgb = image.convert("RGB")
            if rgb.size != (size, size):
                rgb = rgb.resize((size, size), Image.Resampling.BILINEAR)
            return np.asarray(rgb, dtype=np.uint8)
    except (OSError, SyntaxError, ValueError, Image.DecompressionBombError) as exc:
        raise DataError(f"{path}: not a readable image ({exc})") from exc


def decode_images(paths: Sequence[Path], size: int, pool: ThreadPoolExecutor) -> np.ndarray:
    """Several images as one uint8 array (n, size, size, 3), decoded in parallel."""
    out: np.ndarray = np.empty((len(paths), size, size, 3), dtype=np.uint8)

    def load(i: int) -> None:
        out[i] = decode_image(paths[i], size)

    # list() re-raises the first worker's error (a DataError naming the file).
    list(pool.map(load, range(len(paths))))
    return out


def decoder_pool() -> ThreadPoolExecutor:
    """Threads for decoding: Pillow releases the GIL while it decodes and resizes."""
    return ThreadPoolExecutor(max_workers=_workers(), thread_name_prefix="decode")


def _workers() -> int:
    return max(1, min(16, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
                      else (os.cpu_count() or 1)))


def synthetic_samples(kind: str, count: int, seed: int, validation_split: float) -> Dataset:
    """`count` synthetic samples of a model fed synthetic tokens or values (`kind`) as a
    data set without files: what its epoch trains on, split as the photos are."""
    return Dataset(name=f"synthetic-{kind}", root=Path("."), class_names=("",),
                   files=("",) * count, labels=(0,) * count, skipped_files=0,
                   fingerprint="", seed=seed, validation_split=validation_split)
