"""What to compare: the filters of Client.compare and `gpubench compare`, written once
(gpubench.client.CompareFilters)."""

from __future__ import annotations

import pytest

from gpubench.client import CompareFilters


def test_unset_filters_are_the_request_s_empty_values() -> None:
    request = CompareFilters("B3").request()
    assert request.model == "B3"
    assert (request.precision, request.image_size, request.gpu_names) == ("", 0, [])
    assert request.baseline_gpu_count == 1 and not request.allow_mixed


def test_each_filter_reaches_its_request_field() -> None:
    request = CompareFilters("B0", baseline="Tesla T4", baseline_count=2, gpus=("NVIDIA H200",),
                         precision="float32", epochs=3, batch_rule="steps",
                         include_flagged=True).request()
    assert (request.baseline_gpu, request.baseline_gpu_count) == ("Tesla T4", 2)
    assert list(request.gpu_names) == ["NVIDIA H200"]
    assert (request.precision, request.epochs, request.batch_rule) == ("float32", 3, "steps")
    assert request.include_flagged


def test_an_unknown_filter_is_named() -> None:
    with pytest.raises(TypeError, match="colour"):
        CompareFilters("B0", colour="red")
