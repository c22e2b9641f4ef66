"""Memory sizes as people write them ('16GiB', '8 GB', '12000MiB'): one parser for the
agent's --memory-limit and `gpubench fit --memory`."""

from __future__ import annotations

import re

_SIZE_UNITS = {"": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
               "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40}


def parse_size(text: str) -> int:
    """Bytes of a size such as '16GiB', '16 GB', '8g' or '17179869184' (GiB and GB are
    1024^3 and 1000^3 bytes; a bare G is GiB, as cards are sized).

    Raises ValueError naming the text for anything else."""
    match = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([a-zA-Z]*)\s*", text)
    unit = match.group(2).lower() if match else ""
    unit = {"k": "kib", "m": "mib", "g": "gib", "t": "tib"}.get(unit, unit)
    if match is None or unit not in _SIZE_UNITS:
        raise ValueError(f"{text!r} is not a size: write e.g. 16GiB, 8GB or 12000MiB")
    return int(float(match.group(1)) * _SIZE_UNITS[unit])
