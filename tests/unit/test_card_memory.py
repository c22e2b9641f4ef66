"""A card's memory as `gpubench fit --memory` and the results site take it: with its unit,
and no less than the smallest card the benchmark knows."""

from __future__ import annotations

import pytest

from gpubench import sizes
from gpubench.collector.ceilings import read_specs


def test_the_smallest_card_is_the_catalogues() -> None:
    smallest = min(gpu.memory_gib for gpu in read_specs().gpus)
    assert sizes.SMALLEST_CARD_GIB == smallest


@pytest.mark.parametrize(("text", "size"), [("8GiB", 8 << 30), ("16 GB", 16 * 10**9),
                                             ("24g", 24 << 30), ("12000MiB", 12000 << 20)])
def test_a_card_of_a_size_with_its_unit(text: str, size: int) -> None:
    assert sizes.card_memory(text) == size


@pytest.mark.parametrize("text", ["8", " 16 ", "8.5"])
def test_a_bare_number_is_refused_with_the_way_to_write_it(text: str) -> None:
    number = text.strip()
    with pytest.raises(ValueError, match=f"has no unit: write {number}GiB for {number} GiB"):
        sizes.card_memory(text)


@pytest.mark.parametrize("text", ["2GiB", "3GB", "512MiB", "8b", "0GiB"])
def test_less_than_the_smallest_card_is_refused(text: str) -> None:
    # 3GB is 3 * 1000^3 bytes: less than the 3 GiB of the smallest card.
    with pytest.raises(ValueError, match="less memory than any card the benchmark knows "
                       r"\(the smallest has 3 GiB\)"):
        sizes.card_memory(text)


def test_a_size_it_cannot_read_says_how_to_write_one() -> None:
    with pytest.raises(ValueError, match="is not a size: write e.g. 16GiB"):
        sizes.card_memory("eight")
