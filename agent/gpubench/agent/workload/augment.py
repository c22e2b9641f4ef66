"""The protocol's rotation and zoom, computed for the whole batch at once (torch backend).

Keras's torch backend applies RandomRotation's and RandomZoom's affine transform
image by image (`torch.stack([map_coordinates(images[i], ...) for i in ...])`):
a few dozen small GPU kernels per image, so a step's cost grows with the batch and
the GPU mostly waits for Python. `batch_affine_transforms(model)` gives those two
layers the same transform computed once for the batch: the same random
transformation (the layer still draws it), the same coordinates, the same
interpolation and fill rule, gathered in one pass. Used by --batched-augmentation
(a fast setting); a protocol run keeps Keras's own code.

Imports Keras: import this module only after the backend has been selected.
"""

from __future__ import annotations

from typing import Any

import keras


def batch_affine_transforms(model: keras.Model) -> int:
    """Give every RandomRotation and RandomZoom in `model` the batched transform.

    Returns how many layers were changed.
    """
    changed = 0
    for layer in all_layers(model):
        if isinstance(layer, (keras.layers.RandomRotation, keras.layers.RandomZoom)):
            layer.backend = _BatchedImageBackend(layer.backend)
            changed += 1
    return changed


def all_layers(layer: Any) -> list[Any]:
    """`layer` and every layer nested in it, depth first."""
    found = [layer]
    for child in getattr(layer, "layers", []):
        found += all_layers(child)
    return found


class _BatchedImageBackend:
    """A layer's backend whose image.affine_transform is the batched one; the rest unchanged."""

    # The wrapped backend is kept under a name of its own: Keras's layers read the
    # DynamicBackend's `_backend` (the backend's name) through this wrapper.
    def __init__(self, backend: Any) -> None:
        self._wrapped = backend
        self.image = _BatchedImage(backend)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._wrapped, name)


class _BatchedImage:
    def __init__(self, backend: Any) -> None:
        self._wrapped = backend

    def __getattr__(self, name: str) -> Any:
        return getattr(self._wrapped.image, name)

    def affine_transform(self, images: Any, transform: Any, interpolation: str = "bilinear",
                         fill_mode: str = "constant", fill_value: float = 0,
                         data_format: str | None = None) -> Any:
        return affine_transform(images, transform, interpolation, fill_mode, fill_value,
                                data_format)


def affine_transform(images: Any, transform: Any, interpolation: str = "bilinear",
                     fill_mode: str = "constant", fill_value: float = 0,
                     data_format: str | None = None) -> Any:
    """keras.ops.image.affine_transform as Keras's torch backend computes it, batched.

    `transform` rows are [a0, a1, a2, b0, b1, b2, c0, c1]: an output pixel (row, col)
    samples the input at row b1*row + b0*col + b2, col a1*row + a0*col + a2. The
    projective terms c0 and c1 must be zero, as they are for rotation and zoom (Keras's
    torch code would add them times the channel index). Indices are computed once per
    pixel and each gather moves a pixel's channels together.
    """
    import torch

    if interpolation not in ("bilinear", "nearest"):
        raise ValueError(f"interpolation {interpolation!r} is not supported")
    channels_first = (data_format or keras.config.image_data_format()) == "channels_first"
    images = torch.as_tensor(images)
    transform = torch.as_tensor(transform, device=images.device)
    single = images.ndim == 3
    if single:
        images = images.unsqueeze(0)
    if transform.ndim == 1:
        transform = transform.unsqueeze(0)
    if channels_first:
        images = images.permute(0, 2, 3, 1)
    batch, height, width, channels = images.shape
    dtype, device = transform.dtype, images.device

    row = torch.arange(height, dtype=dtype, device=device).view(1, height, 1)
    col = torch.arange(width, dtype=dtype, device=device).view(1, 1, width)
    a0, a1, a2, b0, b1, b2 = (transform[:, k].view(batch, 1, 1) for k in range(6))
    source_row = row * b1 + col * b0 + b2
    source_col = row * a1 + col * a0 + a2

    pixels = images.reshape(batch * height * width, channels)
    base = torch.arange(batch, dtype=torch.int32, device=device).view(batch, 1, 1) * (
        height * width)
    fix = _FIXERS[fill_mode]
    result = None
    for r_index, r_weight in _nodes(source_row, interpolation):
        for c_index, c_weight in _nodes(source_col, interpolation):
            where = base + fix(r_index, height) * width + fix(c_index, width)
            values = pixels[where.long()]  # (batch, height, width, channels)
            if fill_mode == "constant":
                inside = (r_index >= 0) & (r_index < height) & (c_index >= 0) & (c_index < width)
                values = torch.where(inside.unsqueeze(-1), values, fill_value)
            term = values if r_weight is None else (r_weight * c_weight).unsqueeze(-1) * values
            result = term if result is None else result + term
    assert result is not None  # _nodes gives one node at least
    if not torch.is_floating_point(images):
        result = torch.round(result)
    result = result.to(images.dtype)
    if channels_first:
        result = result.permute(0, 3, 1, 2)
    return result.squeeze(0) if single else result


def _nodes(coordinate: Any, interpolation: str) -> list[tuple[Any, Any]]:
    """The sample points along one axis and their weights (Keras's rule)."""
    import torch

    if interpolation == "nearest":
        return [(torch.round(coordinate).to(torch.int32), None)]
    lower = torch.floor(coordinate)
    upper_weight = coordinate - lower
    index = lower.to(torch.int32)
    return [(index, 1 - upper_weight), (index + 1, upper_weight)]


def _mirror(index: Any, size: int) -> Any:
    import torch

    half = size - 1
    return torch.abs((index + half) % (2 * half) - half)


def _reflect(index: Any, size: int) -> Any:
    import torch

    return torch.floor_divide(_mirror(2 * index + 1, 2 * size + 1) - 1, 2)


def _clip(index: Any, size: int) -> Any:
    import torch

    return torch.clip(index, 0, size - 1)


# How an index outside the image is brought back in, per fill mode (Keras's rules).
_FIXERS = {
    "constant": _clip,
    "nearest": _clip,
    "wrap": lambda index, size: index % size,
    "mirror": _mirror,
    "reflect": _reflect,
}
