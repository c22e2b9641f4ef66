"""Memory sizes as people write them ('16GiB', '8 GB', '12000MiB'): one parser for the
agent's --memory-limit, and a card's memory as `gpubench fit --memory` and the results
site's fit take it."""

from __future__ import annotations

import re

_SIZE_UNITS = {"": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
               "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40}
_SIZE = re.compile(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([a-zA-Z]*)\s*")

# The least memory of any card in the GPU catalogue (the collector's gpu_specs.json: the
# GeForce GTX 1060 3GB's 3 GiB; a test checks that the two agree). A card's memory below it
# names no card the benchmark knows, and is most likely a size written without its unit.
SMALLEST_CARD_GIB = 3
SMALLEST_CARD_BYTES = SMALLEST_CARD_GIB << 30


def parse_size(text: str) -> int:
    """Bytes of a size such as '16GiB', '16 GB', '8g' or '17179869184' (GiB and GB are
    1024^3 and 1000^3 bytes; a bare G is GiB, as cards are sized).

    Raises ValueError naming the text for anything else."""
    match = _SIZE.fullmatch(text)
    unit = match.group(2).lower() if match else ""
    unit = {"k": "kib", "m": "mib", "g": "gib", "t": "tib"}.get(unit, unit)
    if match is None or unit not in _SIZE_UNITS:
        raise ValueError(f"{text!r} is not a size: write e.g. 16GiB, 8GB or 12000MiB")
    return int(float(match.group(1)) * _SIZE_UNITS[unit])


def card_memory(text: str) -> int:
    """Bytes of a card's memory written with its unit ('16GiB', '8GB': parse_size).

    A bare number is refused rather than read as bytes (a card of '8' is meant as 8 GiB,
    not 8 bytes), and so is a size below the smallest card of the catalogue: ValueError
    says how to write one."""
    match = _SIZE.fullmatch(text)
    if match is not None and not match.group(2):
        number = match.group(1)
        raise ValueError(f"{text.strip()!r} has no unit: write {number}GiB for {number} GiB "
                         "(GiB is 1024^3 bytes, GB 1000^3)")
    size = parse_size(text)
    if size < SMALLEST_CARD_BYTES:
        raise ValueError(f"{text.strip()!r} is less memory than any card the benchmark "
                         f"knows (the smallest has {SMALLEST_CARD_GIB} GiB): give a card's "
                         "memory, e.g. 16GiB")
    return size
