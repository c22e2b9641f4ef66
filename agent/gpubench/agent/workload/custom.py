"""Any model but the EfficientNets: built from what --models names, fed from its own inputs.

- Built (gpubench.models): a keras.applications architecture (no weights, logits out),
  a .keras file's architecture, a function of the user's that returns the model, or one
  of the project's transformers (transformers.py).
- Fed (`Feeding`): a square 3-channel float input gets the protocol's photos at its size;
  an integer input synthetic tokens below the smallest Embedding's vocabulary; any other
  float input synthetic values. The labels follow the output's shape: a class index per
  sample (batch, K), or per position (batch, T, K). The loss is sparse categorical
  cross-entropy from logits, unless a .keras file brings its own.
- Identified (`identity`): a fingerprint (SHA-256 of the architecture's canonical
  configuration, layer names normalised, weights left out), the parameter count and
  the input spec. The architecture itself stays here.

A model gpubench cannot feed is refused (`Refused`, exit 2) before any training.
Imports Keras: import this module only after the backend has been selected.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import keras
import numpy as np

from gpubench import models
from gpubench.agent.workload import frameworks, pipeline
from gpubench.agent.workload.data import Dataset
from gpubench.agent.workload.failure import Refused
from gpubench.agent.workload.frameworks.types import Source
from gpubench.settings import RunSettings


@dataclass(frozen=True)
class Feeding:
    """How a model is fed: its input and its labels."""

    kind: str  # "photos", "tokens" or "values"
    shape: tuple[int, ...]  # one sample's input, without the batch
    dtype: str
    vocabulary: int  # tokens: ids are below it; else 0
    label_shape: tuple[int, ...]  # one sample's labels (a class index each)
    classes: int  # label values are below it
    dense_labels: bool  # the model's own loss takes targets of the output's shape

    @property
    def unit_per_sample(self) -> int:
        """What one sample counts in the run's unit: its tokens, or one image or sample."""
        return int(math.prod(self.shape)) if self.kind == "tokens" else 1

    @property
    def spec(self) -> str:
        """The input spec the record carries: "photos 224x224x3", "tokens 1024 of 50257",
        "values 16x8 float32"."""
        shape = "x".join(map(str, self.shape))
        if self.kind == "tokens":
            return f"tokens {shape} of {self.vocabulary}"
        return f"photos {shape}" if self.kind == "photos" else f"values {shape} {self.dtype}"

    @property
    def image_size(self) -> int:
        """Pixels per side of the photos fed (0 for other inputs)."""
        return self.shape[0] if self.kind == "photos" else 0


# The size a keras.applications architecture that takes any size is built at without
# --image-size: ImageNet's 224 px, the size its published weights were trained at.
ANY_SIZE_BUILT_AT = 224


def build(settings: RunSettings) -> tuple[keras.Model, Any]:
    """The model --models names, and the loss its own file brings (None: gpubench's)."""
    model = settings.model
    kind = models.kind_of(model)
    if kind == models.BUILT_IN:
        from gpubench.agent.workload import transformers

        if model == models.VIT:
            return transformers.vit_b16(settings.image_size or models.VIT_IMAGE_SIZE), None
        return transformers.gpt2_small(), None
    if kind == models.APPLICATION:
        return _application(model, settings.image_size), None
    if kind == models.FILE:
        return _model_file(Path(model))
    return _function(model), None


def _application(name: str, image_size: int | None) -> keras.Model:
    make = getattr(keras.applications, name, None)
    if make is None or not callable(make) or name.startswith("_"):
        raise Refused(f"--models {name}: keras.applications has no such architecture (e.g. "
                      "ConvNeXtTiny, EfficientNetV2S, ResNet50; keras.applications lists them)")
    model = _made(make, name, image_size)
    if not image_size and None in tuple(model.inputs[0].shape)[1:3]:
        # An architecture that takes photos of any size (MobileNetV3) is built at its
        # native size, ImageNet's, as its published weights were trained.
        model = _made(make, name, ANY_SIZE_BUILT_AT)
    return model


def _made(make: Any, name: str, image_size: int | None) -> keras.Model:
    """keras.applications' `make` untrained, at `image_size` px (None: its own default)."""
    shape = {"input_shape": (image_size, image_size, 3)} if image_size else {}
    try:
        return make(weights=None, classifier_activation=None, **shape)
    except TypeError:  # an architecture without classifier_activation
        return make(weights=None, **shape)
    except ValueError as exc:
        raise Refused(f"--models {name}: {exc}") from None


def _model_file(path: Path) -> tuple[keras.Model, Any]:
    if not path.is_file():
        raise Refused(f"--models {path}: no such model file")
    try:
        model = keras.saving.load_model(path, compile=True)
    except Exception:  # its compile config (a custom loss) may not load: the model will
        try:
            model = keras.saving.load_model(path, compile=False)
        except Exception as exc:
            raise Refused(f"--models {path}: Keras cannot load it ({type(exc).__name__}: "
                          f"{str(exc)[:300]})") from None
    loss = getattr(model, "loss", None) if getattr(model, "compiled", False) else None
    return model, loss


def _function(spec: str) -> keras.Model:
    file, _, name = spec.rpartition(":")
    path = Path(file)
    if not path.is_file():
        raise Refused(f"--models {spec}: no such file {file}")
    loaded = importlib.util.spec_from_file_location(f"gpubench_user_model_{path.stem}", path)
    if loaded is None or loaded.loader is None:
        raise Refused(f"--models {spec}: Python cannot load {file}")
    module = importlib.util.module_from_spec(loaded)
    loaded.loader.exec_module(module)
    build_model = getattr(module, name, None)
    if not callable(build_model):
        raise Refused(f"--models {spec}: {file} has no function {name}")
    model = build_model()
    if not isinstance(model, keras.Model):
        raise Refused(f"--models {spec}: {name}() returned {type(model).__name__}, not a "
                      "keras.Model")
    return model


def feeding(model: keras.Model, *, own_loss: bool = False) -> Feeding:
    """How gpubench feeds `model`, or Refused saying why it cannot."""
    if len(model.inputs) != 1 or len(model.outputs) != 1:
        raise Refused(f"{model.name}: gpubench feeds models of one input and one output; "
                      f"this one has {len(model.inputs)} and {len(model.outputs)}")
    tensor = model.inputs[0]
    shape = tuple(tensor.shape[1:])
    if not shape or any(d is None for d in shape):
        raise Refused(f"{model.name}: its input's shape {tuple(tensor.shape)} has sizes not "
                      "fixed; give the model a fixed input shape (keras.Input(shape=...))")
    dtype = str(keras.backend.standardize_dtype(tensor.dtype))
    vocabulary = 0
    if "int" in dtype:
        vocabulary = _vocabulary(model)
        if not vocabulary:
            raise Refused(f"{model.name}: an integer input ({dtype}) but no Embedding layer "
                          "to say which token ids it takes")
        kind = "tokens"
    elif "float" not in dtype:
        raise Refused(f"{model.name}: an input of {dtype}; gpubench feeds float or integer "
                      "inputs")
    else:
        kind = "values"
    out = tuple(model.outputs[0].shape[1:])
    if kind == "values" and len(shape) == 3 and shape[2] == 3 and shape[0] == shape[1] \
            and len(out) == 1:
        kind = "photos"  # a square 3-channel image, a class per image
    if not out or any(d is None for d in out) or (not own_loss and out[-1] < 2):
        raise Refused(f"{model.name}: its output's shape {tuple(model.outputs[0].shape)}: "
                      "gpubench trains with sparse categorical cross-entropy over the last "
                      "axis, which needs fixed sizes and 2 or more classes (or a .keras "
                      "file compiled with its own loss)")
    return Feeding(kind, tuple(int(d) for d in shape), dtype, vocabulary,
                   tuple(int(d) for d in out[:-1]), int(out[-1]), own_loss)


def _vocabulary(model: keras.Model) -> int:
    sizes = [layer.input_dim for layer in model._flatten_layers(include_self=False)
             if isinstance(layer, keras.layers.Embedding)]
    return min(sizes) if sizes else 0


def compile_for_training(model: keras.Model, loss: Any, *, jit_compile: bool) -> None:
    """Adam(1e-3) (the protocol's optimizer) and sparse categorical cross-entropy from
    logits, or the file's own loss; no metrics (the language model's would cost as much
    as its head)."""
    model.compile(optimizer=keras.optimizers.Adam(learning_rate=1e-3),
                  loss=loss or keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  jit_compile=jit_compile)


def samples(feed: Feeding, count: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """`count` synthetic samples (inputs and labels) of `feed`: token ids below its
    vocabulary, or standard normal values; a class index per label position."""
    rng = np.random.default_rng(seed)
    if feed.kind == "tokens":
        inputs = rng.integers(0, feed.vocabulary, size=(count, *feed.shape), dtype=np.int32)
    else:
        inputs = rng.standard_normal(size=(count, *feed.shape), dtype=np.float32)
        if feed.kind == "photos":
            inputs = rng.integers(0, 256, size=(count, *feed.shape)).astype(np.uint8)
    return inputs, labels(feed, rng.integers(0, feed.classes, size=(count, *feed.label_shape)))


def labels(feed: Feeding, classes: np.ndarray) -> np.ndarray:
    """Class indices as the model's loss takes them: indices, or one-hot vectors for a
    model file's own loss over targets of the output's shape."""
    classes = np.asarray(classes, dtype=np.int32) % feed.classes
    if feed.dense_labels:
        return np.eye(feed.classes, dtype=np.float32)[classes]
    return classes


def identity(model: keras.Model, feed: Feeding) -> dict[str, Any]:
    """What the record says of a model: its fingerprint, parameter count, input spec, the
    unit of its speed, the photos' size (0: not photos) and what feeds it."""
    return {"model_fingerprint": fingerprint(model), "parameter_count": int(model.count_params()),
            "input_spec": feed.spec,
            "unit": models.TOKENS if feed.kind == "tokens" else models.IMAGES,
            "image_size": feed.image_size, "feeding": feed.kind}


def build_feed(feed: Feeding, dataset: Dataset, *, global_batch: int, pipeline_name: str,
               seed: int, shard: tuple[int, int], log: Any) -> pipeline.Feed:
    """The training and validation batches of a model fed by `feed`: the photos at its size
    with a class index each, or synthetic samples made once in host memory and copied to
    the device a batch at a time (as the photos' cached pipeline does)."""
    if feed.kind == "photos":
        classes = np.asarray(dataset.labels)
        return pipeline.build_feed(dataset, size=feed.image_size, global_batch=global_batch,
                                   pipeline=pipeline_name, seed=seed, shard=shard, log=log,
                                   labels=labels(feed, classes))
    inputs, targets = samples(feed, dataset.image_count, seed)
    source = cast(Source, pipeline.Cached(inputs, targets, frameworks.current().device_copy()))
    train = np.arange(dataset.train_count)
    validation = np.arange(dataset.train_count, dataset.image_count)
    return pipeline.Feed(
        train=pipeline.ImageBatches(source, train, global_batch, shuffle_seed=seed, shard=shard,
                                    prefetch=True),
        validation=pipeline.ImageBatches(source, validation, global_batch, shuffle_seed=None,
                                         shard=shard, prefetch=True),
        mode="cached", decode_seconds=0.0, warnings=())


# Configuration entries that are not the architecture: how it was compiled and built
# (kept apart by the comparison key's other dimensions or not timed at all).
_NOT_ARCHITECTURE = ("compile_config", "build_config")


def fingerprint(model: keras.Model) -> str:
    """SHA-256 of the model's canonical architecture configuration: its serialised
    config with every layer's name replaced by its position of first mention, the
    dtype policies (the precision, a dimension of its own) and the compile and build
    configs left out; weights are never part of it. The same architecture gives the
    same fingerprint whatever its layers were called, saved and loaded or built again."""
    config = keras.saving.serialize_keras_object(model)
    names = {layer.name for layer in model._flatten_layers(include_self=True)}
    renamed: dict[str, str] = {}

    def canonical(value: Any) -> Any:
        if isinstance(value, dict):
            return {key: canonical(item) for key, item in sorted(value.items())
                    if key not in _NOT_ARCHITECTURE
                    and not (key == "dtype" and isinstance(item, dict))}
        if isinstance(value, (list, tuple)):
            return [canonical(item) for item in value]
        if isinstance(value, str) and value in names:
            return renamed.setdefault(value, f"layer{len(renamed)}")
        return value

    text = json.dumps(canonical(config), sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()
