"""Tiny Keras models for the tests of models other than the EfficientNets, built by the
workload itself through `--model tests/workload/tiny_models.py:NAME` (a Python function
that returns the model) or saved as .keras files by `save`.

Imports Keras: the workload's process has selected its backend before it loads this file.
"""

from __future__ import annotations

import keras
from keras import layers


def cnn(width: int = 8, size: int = 32) -> keras.Model:
    """A 3-class CNN on size x size photos."""
    inputs = keras.Input((size, size, 3), name="images")
    x = layers.Rescaling(1 / 255)(inputs)
    x = layers.Conv2D(width, 3, strides=2, activation="relu")(x)
    x = layers.GlobalAveragePooling2D()(x)
    return keras.Model(inputs, layers.Dense(3)(x), name="tiny_cnn")


def language_model() -> keras.Model:
    """A one-block decoder language model over 32 tokens of a 64-token vocabulary."""
    from gpubench.agent.workload import transformers

    model = transformers.gpt2_small(32, 64, depth=1, width=16, heads=2)
    return keras.Model(model.inputs, model.outputs, name="tiny_lm")


def two_inputs() -> keras.Model:
    """A model of two inputs: gpubench cannot feed it."""
    first, second = keras.Input((4,)), keras.Input((2,))
    outputs = layers.Dense(3)(layers.Concatenate()([first, second]))
    return keras.Model([first, second], outputs, name="two_inputs")
