"""The protocol's batch normalization computed by torch's fused kernel (torch backend).

Keras's BatchNormalization on torch upcasts its input to float32 and computes
the moments and the normalisation as separate element-wise operations: about
ten passes over every activation forward and as many backward, and under mixed
precision a float32 copy of each. `fuse_batch_normalization(model)` gives every
BatchNormalization layer a `call` that computes the same thing with torch's
batch-norm kernel: normalise by the batch's mean and biased variance while
training (the moving averages' update is Keras's own formula, with the biased
variance, as Keras's layer does), by the moving averages otherwise; gamma,
beta, epsilon and momentum are the layer's. The statistics are accumulated in
float32 inside the kernel, so mixed precision keeps its float32 statistics.
Used by --fused-batchnorm (a fast setting); a protocol run keeps Keras's code.

Imports Keras: import this module only after the backend has been selected.
"""

from __future__ import annotations

from typing import Any

import keras

from gpubench.agent.workload.augment import all_layers


def fuse_batch_normalization(model: keras.Model) -> int:
    """Give every plain BatchNormalization layer in `model` the fused call.

    Layers with renormalisation or synchronised statistics keep Keras's code.
    Returns how many layers were changed.
    """
    changed = 0
    for layer in all_layers(model):
        if (isinstance(layer, keras.layers.BatchNormalization)
                and not layer.renorm and not layer.synchronized):
            layer.call = _FusedCall(layer)
            changed += 1
    return changed


class _FusedCall:
    """BatchNormalization.call for one layer, through torch's batch-norm kernel."""

    def __init__(self, layer: keras.layers.BatchNormalization) -> None:
        self._layer = layer
        self._keras_call = layer.call  # masked inputs are left to Keras

    def __call__(self, inputs: Any, training: bool | None = None, mask: Any = None) -> Any:
        import torch

        layer = self._layer
        if mask is not None:
            return self._keras_call(inputs, training=training, mask=mask)
        axis = layer.axis % inputs.ndim
        # torch's kernel wants the channels in dimension 1; for a channels-last
        # tensor the moved view is torch's channels_last layout (no copy).
        x = inputs if axis == 1 else torch.movedim(inputs, axis, 1)
        gamma = layer.gamma.value if layer.scale else None
        beta = layer.beta.value if layer.center else None
        if training and layer.trainable:
            out, mean, inverse_std = torch.native_batch_norm(
                x, gamma, beta, None, None, True, 0.0, layer.epsilon)
            with torch.no_grad():
                variance = inverse_std.pow(-2) - layer.epsilon  # the batch's biased variance
                momentum = layer.momentum
                layer.moving_mean.assign(
                    layer.moving_mean.value * momentum + mean * (1.0 - momentum))
                layer.moving_variance.assign(
                    layer.moving_variance.value * momentum + variance * (1.0 - momentum))
        else:
            out = torch.nn.functional.batch_norm(
                x, layer.moving_mean.value, layer.moving_variance.value, gamma, beta,
                training=False, momentum=0.0, eps=layer.epsilon)
        if axis != 1:
            out = torch.movedim(out, 1, axis)
        return keras.ops.cast(out, layer.compute_dtype)
