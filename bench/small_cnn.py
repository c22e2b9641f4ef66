"""A small CNN of a user's own, saved as a .keras file (its architecture is all that
counts): what the GPU sessions give the agent as "your own model".

    python3 bench/small_cnn.py PATH.keras [IMAGE_SIZE]     (IMAGE_SIZE default 128)
"""

from __future__ import annotations

import sys

import keras
from keras import layers


def main() -> None:
    path = sys.argv[1]
    size = int(sys.argv[2]) if len(sys.argv) > 2 else 128
    inputs = keras.Input((size, size, 3))
    x = layers.Rescaling(1 / 255)(inputs)
    for width in (32, 64, 128):
        x = layers.Conv2D(width, 3, strides=2, padding="same", activation="relu")(x)
        x = layers.BatchNormalization()(x)
    x = layers.GlobalAveragePooling2D()(x)
    keras.Model(inputs, layers.Dense(3)(x), name="small_cnn").save(path)


if __name__ == "__main__":
    main()
