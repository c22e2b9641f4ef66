"""Feeding the images to Keras: decoded once and cached, or decoded every epoch.

- `cached` (the default) decodes every image once into one uint8 array at the
  network's input size and serves batches from it with a background thread
  prefetching, so an epoch measures the GPU rather than the PNG decoder. Batches
  stay uint8 until the model's input casts them (the same values as float32 pixels,
  a quarter of the bytes to move). If the array would not fit comfortably in the
  memory available, the pipeline streams instead (decodes every epoch, with
  prefetching) and says so in a warning.
- `seed` decodes and resizes every batch of every epoch into float32 as the
  protocol's image_dataset_from_directory pipeline did: decoding in parallel,
  no cache and no prefetch.

Images are laid out channels last (the protocol's), or channels first when the
run asks for it (the cache is transposed once, decoded batches one by one).

Imports Keras: import this module only after the backend has been selected.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, cast

import keras
import numpy as np

from gpubench.agent.workload import frameworks, hostmemory
from gpubench.agent.workload.data import Dataset, decode_images, decoder_pool
from gpubench.agent.workload.frameworks.types import Source


@dataclass(frozen=True)
class Feed:
    """The training and validation batches of a run, and how they are produced."""

    train: ImageBatches
    validation: ImageBatches
    mode: str  # "cached", "cached-on-device", "streaming" or "seed"
    decode_seconds: float  # time spent decoding up front (cached modes)
    warnings: tuple[str, ...]


@dataclass(frozen=True)
class Decoded:
    """Decode and resize the files of every batch (seed and streaming pipelines)."""

    dataset: Dataset
    labels: np.ndarray
    size: int
    pool: ThreadPoolExecutor
    as_float: bool  # the protocol's pipeline hands float32 pixels to the model
    channels_first: bool

    def order(self, indices: np.ndarray) -> object:
        return indices

    def batch(self, indices: np.ndarray) -> tuple[object, object]:
        images = decode_images(self.dataset.paths(indices), self.size, self.pool)
        if self.channels_first:
            images = np.ascontiguousarray(images.transpose(0, 3, 1, 2))
        return (images.astype(np.float32) if self.as_float else images), self.labels[indices]


@dataclass(frozen=True)
class Cached:
    """Slices of the decoded uint8 images in host memory.

    With `to_device` (torch on a GPU: Framework.device_copy) each batch is copied
    to the GPU here, in the prefetching thread: the copy waits for the GPU's queued
    work in that thread, not in the one that queues the training steps.
    """

    images: np.ndarray
    labels: np.ndarray
    to_device: Callable[[np.ndarray], object] | None = None

    def order(self, indices: np.ndarray) -> object:
        return indices

    def batch(self, indices: np.ndarray) -> tuple[object, object]:
        images, labels = self.images[indices], self.labels[indices]
        if self.to_device is None:
            return images, labels
        return self.to_device(images), self.to_device(labels)


class ImageBatches(keras.utils.PyDataset):
    """Batches of (images, one-hot labels) over a subset of the dataset."""

    def __init__(
        self,
        source: Source,
        indices: np.ndarray,
        batch_size: int,
        *,
        shuffle_seed: int | None,
        shard: tuple[int, int] = (0, 1),
        prefetch: bool,
    ) -> None:
        # Keras's own prefetching (a pool of threads, for workers > 1) is not used:
        # one thread of ours prepares the next batch while the model trains on
        # this one. The seed pipeline prefetches nothing, as the protocol's.
        super().__init__(workers=1, use_multiprocessing=False)
        self._ahead: dict[int, Future] = {}
        self._prefetcher = ThreadPoolExecutor(1, "batches") if prefetch else None
        self._source = source
        self._indices = indices
        self._batch = batch_size
        self._shuffle_seed = shuffle_seed
        self._rank, self._world = shard
        self._epoch = 0
        self._order = self._epoch_order()

    def _epoch_order(self) -> Any:  # Source.order's: an ndarray, or a framework's tensor
        order = self._indices
        if self._shuffle_seed is not None:
            order = np.random.default_rng((self._shuffle_seed, self._epoch)).permutation(order)
        return self._source.order(order)

    def __len__(self) -> int:
        steps = math.ceil(len(self._indices) / self._batch)
        # With data parallelism every replica needs at least one image per step:
        # a last batch smaller than the replica count is left out.
        if 0 < len(self._indices) % self._batch < self._world:
            steps -= 1
        return steps

    def __getitem__(self, step: int) -> tuple[object, object]:
        ready = self._ahead.pop(step, None)
        batch = ready.result() if ready is not None else self._make(step)
        if self._prefetcher is not None and step + 1 < len(self):
            self._ahead[step + 1] = self._prefetcher.submit(self._make, step + 1)
        return batch

    def _make(self, step: int) -> tuple[object, object]:
        chosen = self._order[step * self._batch : (step + 1) * self._batch]
        if self._world > 1:  # the same split as np.array_split, for device tensors too
            chosen = (np.array_split(chosen, self._world) if isinstance(chosen, np.ndarray)
                      else chosen.tensor_split(self._world))[self._rank]
        return self._source.batch(chosen)

    def on_epoch_end(self) -> None:
        for pending in self._ahead.values():  # made in the old order
            pending.result()
        self._ahead.clear()
        self._epoch += 1
        self._order = self._epoch_order()

    def images_in_step(self, step: int) -> int:
        """How many images (over all replicas) step `step` of an epoch trains on."""
        return len(self._order[step * self._batch : (step + 1) * self._batch])


# Images decoded ahead of build_feed (decode_ahead): (paths, size) -> (images, seconds).
_ahead: dict[tuple[tuple[str, ...], int], tuple[np.ndarray, float]] = {}


def decode_ahead(dataset: Dataset, size: int, pipeline: str,
                 log: Callable[[str], None] = lambda message: None) -> None:
    """Decode the cached pipeline's images now, for build_feed to take: work for a
    process that waits on another (the batch search beside it). Nothing for the
    other pipelines, or where the cache would not fit in memory."""
    if pipeline != "cached" or hostmemory.cache_refusal(
            dataset.image_count, size, hostmemory.available_memory_bytes()):
        return
    _ahead[_key(dataset, size)] = _decode(dataset, size, decoder_pool(), log)


def _key(dataset: Dataset, size: int) -> tuple[tuple[str, ...], int]:
    return tuple(map(str, dataset.paths(range(dataset.image_count)))), size


def _decode(dataset: Dataset, size: int, pool: ThreadPoolExecutor,
            log: Callable[[str], None]) -> tuple[np.ndarray, float]:
    """Every image of `dataset` decoded at `size` (those decode_ahead decoded, if it
    did), and the seconds the decoding took."""
    ahead = _ahead.pop(_key(dataset, size), None)
    if ahead is not None:
        return ahead
    log(f"decoding {dataset.image_count} images at {size}x{size} into memory")
    started = time.monotonic()
    images = decode_images(dataset.paths(range(dataset.image_count)), size, pool)
    return images, time.monotonic() - started


def build_feed(
    dataset: Dataset,
    *,
    size: int,
    global_batch: int,
    pipeline: str,
    seed: int,
    on_device: bool = False,
    channels_first: bool = False,
    shard: tuple[int, int] = (0, 1),
    log: Callable[[str], None] = lambda message: None,
    labels: np.ndarray | None = None,
) -> Feed:
    """The training and validation batches for `dataset` in the chosen pipeline, labelled
    one-hot (the protocol's) unless `labels` gives each image's own."""
    if labels is None:
        labels = np.eye(len(dataset.class_names), dtype=np.float32)[np.asarray(dataset.labels)]
    pool = decoder_pool()
    warnings: list[str] = []
    mode = pipeline
    if pipeline == "cached":
        too_big = hostmemory.cache_refusal(dataset.image_count, size,
                                           hostmemory.available_memory_bytes())
        if too_big:
            mode = "streaming"
            warnings.append(too_big)

    decode_seconds = 0.0
    source: Source
    if mode == "cached":
        cache, decode_seconds = _decode(dataset, size, pool, log)
        if channels_first:
            cache = np.ascontiguousarray(cache.transpose(0, 3, 1, 2))
        framework = frameworks.current()
        # Cached's and Decoded's batch takes the ndarray their order gives it: a
        # pairing Source (order -> object, batch(object)) cannot state.
        source = (framework.device_source(cache, labels) if on_device
                  else cast(Source, Cached(cache, labels, framework.device_copy())))
        mode = "cached-on-device" if on_device else mode
    else:
        source = cast(Source, Decoded(dataset, labels, size, pool, as_float=mode == "seed",
                                      channels_first=channels_first))

    # Prefetching threads for work on the host; none for the seed pipeline (the
    # protocol's had none) nor for batches gathered on the GPU.
    prefetch = mode in ("cached", "streaming")
    train = np.arange(dataset.train_count)
    validation = np.arange(dataset.train_count, dataset.image_count)
    return Feed(
        train=ImageBatches(source, train, global_batch, shuffle_seed=seed, shard=shard,
                           prefetch=prefetch),
        validation=ImageBatches(source, validation, global_batch, shuffle_seed=None, shard=shard,
                                prefetch=prefetch),
        mode=mode,
        decode_seconds=decode_seconds,
        warnings=tuple(warnings),
    )
