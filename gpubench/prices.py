"""GPU prices (USD per card) from the command line or a file, and what a run's
throughput buys per 1,000 USD.

    --price "Tesla T4=2300"           one card, repeatable
    --prices prices.csv               lines "GPU name,USD"; a first line "gpu,usd" is a header
    --prices prices.json              {"Tesla T4": 2300, "NVIDIA H200": 32000}

Names match a GPU as the collector files it (record.normalize_gpu_name), case aside.
A configuration of N cards costs N times the card's price.
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Iterable, Mapping
from pathlib import Path

import pandas as pd

from gpubench import record
from gpubench.errors import ExitCode, GpubenchError

# The header a CSV prices file may start with (its first field, case aside).
CSV_HEADERS = ("gpu", "gpu_name", "name")


class BadPrices(GpubenchError):
    """A price that cannot be read: the message names the option, line or field."""

    exit_code = ExitCode.USAGE


def _key(name: str) -> str:
    return record.normalize_gpu_name(name).casefold()


def _usd(text: object, where: str) -> float:
    """A positive, finite price in USD, or BadPrices naming `where`."""
    if isinstance(text, bool):
        raise BadPrices(f"{where}: {text!r} is not a price in USD")
    try:
        value = float(str(text).strip().lstrip("$").replace(",", "").replace("_", ""))
    except ValueError:
        raise BadPrices(f"{where}: {text!r} is not a price in USD (write e.g. 2300 or "
                        "2300.50)") from None
    if not math.isfinite(value) or value <= 0:
        raise BadPrices(f"{where}: the price must be a positive number of USD, got {text!r}")
    return value


class Prices:
    """Prices by GPU name; later entries for a name are errors, not overrides."""

    def __init__(self) -> None:
        self._usd: dict[str, float] = {}
        self._names: dict[str, str] = {}

    def add(self, name: str, usd: float, where: str) -> None:
        """Set one card's price; `where` names the source for errors."""
        clean = record.normalize_gpu_name(name)
        if not clean:
            raise BadPrices(f"{where}: the GPU name is empty")
        key = _key(clean)
        if key in self._usd:
            raise BadPrices(f"{where}: {clean!r} has a price already "
                            f"({self._usd[key]:g} USD)")
        self._usd[key], self._names[key] = usd, clean

    def card(self, gpu_name: str) -> float | None:
        """One card's price in USD, None when not given."""
        return self._usd.get(_key(gpu_name))

    def config(self, gpu_name: str, gpu_count: int) -> float | None:
        """A configuration's price: `gpu_count` cards (None when not given)."""
        usd = self.card(gpu_name)
        return usd * max(gpu_count, 1) if usd is not None else None

    def __len__(self) -> int:
        return len(self._usd)

    def as_dict(self) -> dict[str, float]:
        """Every price by its GPU name as given."""
        return {self._names[key]: usd for key, usd in self._usd.items()}


def parse_price(text: str) -> tuple[str, float]:
    """NAME=USD from --price; the name may itself hold '=' (the last one splits)."""
    name, sep, usd = text.rpartition("=")
    if not sep or not name.strip():
        raise BadPrices(f"--price {text!r}: write NAME=USD, e.g. --price \"Tesla T4=2300\"")
    return name.strip(), _usd(usd, f"--price {text!r}")


def read_prices_file(path: str | Path, prices: Prices) -> None:
    """Add every price of a CSV or JSON file (by its suffix; JSON if it starts with
    '{') to `prices`; BadPrices names the file and its line or field."""
    target = Path(path)
    try:
        text = target.read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as exc:
        raise BadPrices(f"{target}: cannot read it ({getattr(exc, 'strerror', None) or exc})"
                        ) from None
    if target.suffix.lower() == ".json" or text.lstrip().startswith("{"):
        _read_json(text, target, prices)
    else:
        _read_csv(text.splitlines(), target, prices)


def _read_json(text: str, target: Path, prices: Prices) -> None:
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise BadPrices(f"{target}: not valid JSON ({exc})") from None
    if not isinstance(data, Mapping):
        raise BadPrices(f"{target}: expected an object of GPU name -> USD, e.g. "
                        '{"Tesla T4": 2300}')
    for name, usd in data.items():
        where = f"{target}: field {name!r}"
        if isinstance(usd, (dict, list)) or usd is None:
            raise BadPrices(f"{where}: {json.dumps(usd)} is not a price in USD")
        prices.add(name, _usd(usd, where), where)


def _read_csv(lines: Iterable[str], target: Path, prices: Prices) -> None:
    for number, row in enumerate(csv.reader(lines), start=1):
        where = f"{target} line {number}"
        if not row or all(not field.strip() for field in row) or row[0].lstrip().startswith("#"):
            continue
        if number == 1 and row[0].strip().casefold() in CSV_HEADERS:
            continue
        if len(row) != 2:
            raise BadPrices(f"{where}: expected 2 fields, GPU name and USD, got {len(row)} "
                            f"({','.join(row)!r}); quote a name holding a comma")
        prices.add(row[0], _usd(row[1], where), where)


def load(options: Iterable[str] = (), files: Iterable[str | Path] = ()) -> Prices:
    """The prices of --price options and --prices files together."""
    prices = Prices()
    for path in files:
        read_prices_file(path, prices)
    for text in options:
        name, usd = parse_price(text)
        prices.add(name, usd, f"--price {text!r}")
    return prices


def images_per_kusd(images_per_s: float, usd: float | None) -> float:
    """Training images a second per 1,000 USD of cards (NaN without a price or speed)."""
    if usd is None or not usd or images_per_s is None or math.isnan(images_per_s):
        return math.nan
    return images_per_s / (usd / 1000)


def cost_frame(frame: pd.DataFrame, prices: Prices) -> pd.DataFrame:
    """A comparison's rows with the configuration's price (`usd`: cards times the card's
    price) and its training images a second per 1,000 USD (`images_per_s_per_kusd`)."""
    costed = frame.copy()
    costed["usd"] = [prices.config(name, count) for name, count
                     in zip(frame["gpu_name"], frame["gpu_count"], strict=True)]
    costed["images_per_s_per_kusd"] = [
        images_per_kusd(speed, usd)
        for speed, usd in zip(frame["images_per_s_median"], costed["usd"], strict=True)]
    costed.attrs.update(frame.attrs)
    return costed


def unpriced(costed: pd.DataFrame) -> list[str]:
    """A warning for each GPU of a costed comparison that has no price."""
    names = sorted({n for n, usd in zip(costed["gpu_name"], costed["usd"], strict=True)
                    if usd is None or pd.isna(usd)})
    return [f'no price for {name} (--price "{name}=USD")' for name in names]
