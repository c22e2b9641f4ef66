"""The protocol's network, exactly: augmentation, EfficientNet, pooling, a 3-way softmax.

input -> [RandomRotation(0.2), RandomFlip('horizontal'), RandomZoom(0.2)]
      -> EfficientNetB{0,3,7}(include_top=False), every layer trainable
      -> GlobalAveragePooling2D -> Dense(3, softmax);
Adam(1e-3), categorical cross-entropy, accuracy.

Imports Keras: import this module only after the backend has been selected.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import keras
from keras import layers

from gpubench.errors import GpubenchError

APPLICATIONS = {"B0": "EfficientNetB0", "B3": "EfficientNetB3", "B7": "EfficientNetB7"}


def set_precision(precision: str) -> None:
    """Set the global dtype policy before any layer is built."""
    keras.config.set_dtype_policy(precision)


def set_data_format(channels_first: bool) -> None:
    """Set the global image layout before any layer is built (channels last: the protocol's)."""
    keras.config.set_image_data_format("channels_first" if channels_first else "channels_last")


def base_weights(weights: str) -> str | None:
    """What keras.applications is given: None, 'imagenet' or a weights file's path."""
    if weights == "none":
        return None
    if weights == "imagenet":
        return "imagenet"
    path = Path(weights)
    if not path.is_file():
        raise GpubenchError(f"--weights {weights}: no such weights file")
    return str(path)


def weights_label(weights: str) -> str:
    """How the record names the weights: 'none', 'imagenet' or 'file:<sha256>'."""
    if weights in ("none", "imagenet"):
        return weights
    return "file:" + hashlib.sha256(Path(weights).read_bytes()).hexdigest()


def build(model: str, image_size: int, weights: str = "none", classes: int = 3) -> keras.Model:
    """The protocol's model for `model` ('B0', 'B3', 'B7') at image_size x image_size.

    The images' layout follows keras.config.image_data_format(): channels last
    (the protocol's) or channels first.
    """
    shape = input_shape(image_size)
    inputs = keras.Input(shape=shape, name="images")
    augmentation = keras.Sequential(
        [
            layers.RandomRotation(0.2),
            layers.RandomFlip("horizontal"),
            layers.RandomZoom(0.2),
        ],
        name="augmentation",
    )
    base = getattr(keras.applications, APPLICATIONS[model])(
        include_top=False, weights=base_weights(weights), input_shape=shape
    )
    base.trainable = True
    x = augmentation(inputs)
    x = base(x)
    x = layers.GlobalAveragePooling2D(name="pooling")(x)
    # Under mixed precision the softmax stays float32, as Keras's mixed-precision
    # guide advises; in a float32 run this is the protocol's layer unchanged.
    outputs = layers.Dense(classes, activation="softmax", dtype="float32", name="classes")(x)
    return keras.Model(inputs, outputs, name=f"efficientnet_{model.lower()}_rps")


def input_shape(image_size: int) -> tuple[int, int, int]:
    """One image's shape in the configured data format."""
    if keras.config.image_data_format() == "channels_first":
        return (3, image_size, image_size)
    return (image_size, image_size, 3)


def compile_for_training(model: keras.Model, *, jit_compile: bool) -> None:
    """Adam(1e-3), categorical cross-entropy, accuracy (the protocol's compile)."""
    model.compile(
        optimizer=keras.optimizers.Adam(learning_rate=1e-3),
        loss=keras.losses.CategoricalCrossentropy(),
        metrics=["accuracy"],
        jit_compile=jit_compile,
    )


def parameter_counts(model: keras.Model) -> dict[str, int]:
    """Total, trainable and non-trainable parameters, as model.summary() counts them."""
    trainable = sum(_size(w) for w in model.trainable_weights)
    frozen = sum(_size(w) for w in model.non_trainable_weights)
    return {"total": trainable + frozen, "trainable": trainable, "non_trainable": frozen}


def _size(weight: keras.Variable) -> int:
    count = 1
    for dim in weight.shape:
        count *= int(dim)
    return count
