"""Prices from --price and --prices files: reading them, refusing bad ones by line or
field, and images/s per 1,000 USD."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from gpubench import prices
from gpubench.errors import ExitCode


def test_price_options_and_configurations() -> None:
    book = prices.load(["Tesla T4=2300", "NVIDIA H200 = 32,000"])
    assert book.card("tesla t4") == 2300 and book.card("NVIDIA  H200") == 32_000
    assert book.config("Tesla T4", 2) == 4600  # two cards cost two prices
    assert book.config("NVIDIA GeForce GTX 1070", 1) is None


def test_images_per_thousand_usd() -> None:
    # The reference H200's default B0: 2,739.306 img/s for 32,000 USD.
    assert prices.images_per_kusd(2739.306, 32_000) == pytest.approx(85.6033, rel=1e-5)
    assert math.isnan(prices.images_per_kusd(2739.306, None))
    assert math.isnan(prices.images_per_kusd(math.nan, 2300))


@pytest.mark.parametrize(("option", "message"), [
    ("Tesla T4", "--price 'Tesla T4': write NAME=USD"),
    ("=2300", "--price '=2300': write NAME=USD"),
    ("Tesla T4=cheap", "--price 'Tesla T4=cheap': 'cheap' is not a price in USD"),
    ("Tesla T4=-5", "--price 'Tesla T4=-5': the price must be a positive number of USD"),
    ("Tesla T4=nan", "the price must be a positive number"),
])
def test_bad_price_options(option: str, message: str) -> None:
    with pytest.raises(prices.BadPrices) as raised:
        prices.load([option])
    assert message in str(raised.value) and raised.value.exit_code == ExitCode.USAGE


def test_csv_with_header_comments_and_quoted_names(tmp_path: Path) -> None:
    path = tmp_path / "prices.csv"
    path.write_text('gpu,usd\n# from the lab\n"NVIDIA RTX 6000 Ada, 48GB",6800\n'
                    "Tesla T4,$2300\n\n")
    book = prices.load(files=[path])
    assert book.as_dict() == {"NVIDIA RTX 6000 Ada, 48GB": 6800, "Tesla T4": 2300}


@pytest.mark.parametrize(("text", "message"), [
    ("gpu,usd\nTesla T4,2300\nNVIDIA H200,lots\n", "line 3: 'lots' is not a price in USD"),
    ("Tesla T4,2300,USD\n", "line 1: expected 2 fields, GPU name and USD, got 3"),
    ("Tesla T4,2300\ntesla t4,2400\n", "line 2: 'tesla t4' has a price already (2300 USD)"),
    (",2300\n", "line 1: the GPU name is empty"),
])
def test_bad_csv_lines_are_named(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "prices.csv"
    path.write_text(text)
    with pytest.raises(prices.BadPrices) as raised:
        prices.load(files=[path])
    assert str(raised.value).startswith(f"{path} line ") and message in str(raised.value)


@pytest.mark.parametrize(("text", "message"), [
    ('{"Tesla T4": 2300, "NVIDIA H200": "a lot"}', "field 'NVIDIA H200': 'a lot' is not a price"),
    ('{"Tesla T4": null}', "field 'Tesla T4': null is not a price in USD"),
    ('{"Tesla T4": true}', "field 'Tesla T4': True is not a price in USD"),
    ('["Tesla T4", 2300]', "expected an object of GPU name -> USD"),
    ('{"Tesla T4": 2300', "not valid JSON"),
])
def test_bad_json_fields_are_named(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "prices.json"
    path.write_text(text)
    with pytest.raises(prices.BadPrices) as raised:
        prices.load(files=[path])
    assert str(raised.value).startswith(f"{path}: ") and message in str(raised.value)


def test_json_prices_and_an_unreadable_file(tmp_path: Path) -> None:
    path = tmp_path / "prices.json"
    path.write_text('{"Tesla T4": 2300, "NVIDIA H200": 32000.5}')
    assert prices.load(files=[path]).as_dict() == {"Tesla T4": 2300, "NVIDIA H200": 32000.5}
    with pytest.raises(prices.BadPrices, match="cannot read it"):
        prices.load(files=[tmp_path / "missing.csv"])
