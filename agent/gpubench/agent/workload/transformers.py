"""The two transformer workloads, built from Keras layers (no keras-hub: it needs the whole
of TensorFlow through tensorflow-text, and nothing may be downloaded at run time).

- ViT-B/16: 16 px patches, 12 pre-norm blocks of width 768 and 12 heads, MLP 3072,
  a class token and learned positions; a linear head over the photos' classes.
- A decoder-only language model of GPT-2 small's shape: 12 pre-norm blocks of width
  768, 12 heads, MLP 3072, causal attention over 1,024 tokens of a 50,257-token
  vocabulary, learned positions and a head untied from the embedding (163M
  parameters). Both output logits.

The heads compute in the run's precision, as every other layer: Keras's losses read
the logits in float32, so the loss is float32 either way, and a float32 head would
make a quarter of the language model's multiply-adds run at float32's rate.

Imports Keras: import this module only after the backend has been selected.
"""

from __future__ import annotations

from typing import Any

import keras
from keras import layers

from gpubench import models

MLP_RATIO = 4


@keras.saving.register_keras_serializable(package="gpubench")
class Positions(layers.Layer):
    """Adds a learned position vector to each token; with `class_token`, first puts a
    learned token in front of the sequence (the ViT's)."""

    def __init__(self, class_token: bool = False, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.class_token = class_token

    def build(self, input_shape: tuple[int | None, ...]) -> None:
        length, width = int(input_shape[1] or 0) + int(self.class_token), int(input_shape[2] or 0)
        self.positions = self.add_weight(shape=(length, width), name="positions",
                                         initializer=keras.initializers.RandomNormal(0.02))
        if self.class_token:
            self.token = self.add_weight(shape=(1, 1, width), name="token",
                                         initializer="zeros")

    def call(self, tokens: Any) -> Any:
        if self.class_token:
            batch = keras.ops.shape(tokens)[0]
            first = keras.ops.broadcast_to(self.token, (batch, 1, keras.ops.shape(tokens)[2]))
            tokens = keras.ops.concatenate([keras.ops.cast(first, tokens.dtype), tokens], axis=1)
        return tokens + keras.ops.cast(self.positions, tokens.dtype)

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "class_token": self.class_token}


def _block(x: Any, width: int, heads: int, *, causal: bool, index: int) -> Any:
    """One pre-norm transformer block: attention and an MLP, each around a residual."""
    name = f"block{index}"
    y = layers.LayerNormalization(epsilon=1e-6, name=f"{name}_norm1")(x)
    y = layers.MultiHeadAttention(heads, width // heads, name=f"{name}_attention")(
        y, y, use_causal_mask=causal)
    x = layers.Add(name=f"{name}_add1")([x, y])
    y = layers.LayerNormalization(epsilon=1e-6, name=f"{name}_norm2")(x)
    y = layers.Dense(width * MLP_RATIO, activation="gelu", name=f"{name}_mlp1")(y)
    y = layers.Dense(width, name=f"{name}_mlp2")(y)
    return layers.Add(name=f"{name}_add2")([x, y])


def vit_b16(image_size: int = models.VIT_IMAGE_SIZE, classes: int = 3, *,
            depth: int = 12, width: int = 768, heads: int = 12, patch: int = 16) -> keras.Model:
    """ViT-B/16 (86M parameters at 224 px) over images of 0-255 pixels, channels last;
    logits of `classes`. `depth`, `width` and `heads` make smaller ones for tests."""
    inputs = keras.Input((image_size, image_size, 3), name="images")
    x = layers.Rescaling(1 / 127.5, offset=-1, name="scale")(inputs)
    x = layers.Conv2D(width, patch, strides=patch, name="patches")(x)
    x = layers.Reshape(((image_size // patch) ** 2, width), name="tokens")(x)
    x = Positions(class_token=True, name="positions")(x)
    for index in range(depth):
        x = _block(x, width, heads, causal=False, index=index)
    x = layers.LayerNormalization(epsilon=1e-6, name="norm")(x)
    x = FirstToken(name="class_token")(x)
    outputs = layers.Dense(classes, name="logits")(x)
    return keras.Model(inputs, outputs, name="vit_b16")


@keras.saving.register_keras_serializable(package="gpubench")
class FirstToken(layers.Layer):
    """The first token of a sequence: (batch, length, width) -> (batch, width)."""

    def call(self, tokens: Any) -> Any:
        return tokens[:, 0]

    def compute_output_shape(self, input_shape: tuple[int | None, ...]) -> tuple[Any, ...]:
        return (input_shape[0], input_shape[2])


def gpt2_small(sequence: int = models.LM_TOKENS, vocabulary: int = models.LM_VOCABULARY, *,
               depth: int = models.LM_LAYERS, width: int = models.LM_WIDTH,
               heads: int = models.LM_HEADS) -> keras.Model:
    """A decoder-only language model of GPT-2 small's shape (163M parameters), its head
    untied: token ids in, next-token logits out. Smaller ones for tests."""
    inputs = keras.Input((sequence,), dtype="int32", name="tokens")
    x = layers.Embedding(vocabulary, width, name="embedding")(inputs)
    x = Positions(name="positions")(x)
    for index in range(depth):
        x = _block(x, width, heads, causal=True, index=index)
    x = layers.LayerNormalization(epsilon=1e-5, name="norm")(x)
    outputs = layers.Dense(vocabulary, name="logits")(x)
    return keras.Model(inputs, outputs, name="gpt2_small")
