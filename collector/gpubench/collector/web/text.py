"""How the site shows text and numbers: submitted text made harmless, figures in units.

Every value a template prints passes through `finalize` (the Jinja environment's
finalize hook), so no template can forget it: HTML is escaped, and characters that
would make one name look like another or reorder the line around them (control
characters, bidirectional overrides and isolates, zero-width characters, line and
paragraph separators, lone surrogates) are shown as visible escapes such as
`\\u202e`, each in a <span class="esc">.
"""

from __future__ import annotations

import math
import unicodedata
from typing import Any

from markupsafe import Markup, escape

# Unicode categories shown as escapes: control, format (bidi controls, zero-width
# characters), surrogate, private use, unassigned, line and paragraph separators.
HIDDEN_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"})


def _escape_code(char: str) -> str:
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 \
        else f"\\U{code:08x}"


def visible(text: str) -> Markup:
    """`text` as safe HTML: markup escaped, hidden and direction-changing characters
    as visible escapes (`\\u202e`) marked up as <span class="esc">."""
    parts: list[str] = []
    plain: list[str] = []
    for char in text:
        if unicodedata.category(char) in HIDDEN_CATEGORIES:
            if plain:
                parts.append(str(escape("".join(plain))))
                plain = []
            parts.append(f'<span class="esc" title="hidden character">'
                         f"{_escape_code(char)}</span>")
        else:
            plain.append(char)
    if plain:
        parts.append(str(escape("".join(plain))))
    return Markup("".join(parts))


def finalize(value: Any) -> Any:
    """Jinja's finalize hook: markup built by the site passes as it is, text through
    `visible`, None as an empty cell."""
    if value is None:
        return ""
    if isinstance(value, Markup):
        return value
    if isinstance(value, str):
        return visible(value)
    return value


def seconds(value: float | None) -> str:
    """'0.702 s', '12.4 s', '1 min 05 s'; '' for nothing measured."""
    if value is None or not math.isfinite(value) or value <= 0:
        return ""
    if value < 10:
        return f"{value:.3f} s"
    if value < 100:
        return f"{value:.1f} s"
    minutes, rest = divmod(round(value), 60)
    return f"{minutes} min {rest:02d} s"


def number(value: float | None, digits: int = 0) -> str:
    """A figure with thousands separators ('3,941', '12.5'); '' for nothing."""
    if value is None or not math.isfinite(value) or value == 0:
        return ""
    return f"{value:,.{digits}f}"


def gib(num_bytes: float | None) -> str:
    """Bytes as GiB ('71.3 GiB'); '' for nothing."""
    if not num_bytes:
        return ""
    return f"{num_bytes / (1 << 30):.1f} GiB"


def percent(share: float | None) -> str:
    """A share 0..1 as '52%'; '' for nothing."""
    if not share:
        return ""
    return f"{share * 100:.0f}%"


def joules(value: float | None) -> str:
    """'412 J', '12.3 kJ'; '' for nothing."""
    if not value:
        return ""
    return f"{value / 1000:.1f} kJ" if value >= 10_000 else f"{value:,.0f} J"


def spread(low: float | None, high: float | None, median: float | None) -> str:
    """The epoch-2 range of a group's runs as '0.687–0.713 s (3.7%)', with as many
    decimals as `seconds` gives; '' for one run."""
    if not low or not high or not median or high <= low:
        return ""
    digits = 3 if high < 10 else 1 if high < 100 else 0
    # A no-break space keeps the unit with its figure when the cell wraps.
    return f"{low:.{digits}f}–{high:.{digits}f}\u00a0s ({(high - low) / median * 100:.1f}%)"


FILTERS = {
    "seconds": seconds,
    "number": number,
    "gib": gib,
    "percent": percent,
    "joules": joules,
}
