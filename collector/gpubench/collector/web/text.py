"""How the site shows text and numbers: submitted text made harmless, figures in units
(gpubench.figures, as the terminal shows them).

Every value a template prints passes through `finalize` (the Jinja environment's
finalize hook), so no template can forget it: HTML is escaped, and characters that
would make one name look like another or reorder the line around them (control
characters, bidirectional overrides and isolates, zero-width characters, line and
paragraph separators, lone surrogates) are shown as visible escapes such as
`\\u202e`, each in a <span class="esc">.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Callable
from typing import Any

from markupsafe import Markup, escape

from gpubench import figures

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
    return Markup("".join(
        f'<span class="esc" title="hidden character">{_escape_code(char)}</span>'
        if unicodedata.category(char) in HIDDEN_CATEGORIES else escape(char)
        for char in text))


def attribute(text: str) -> Markup:
    """`text` for an attribute's value (a title): escaped, hidden and direction-changing
    characters written as their escapes in plain text (no markup in an attribute)."""
    return Markup(escape("".join(_escape_code(c) if unicodedata.category(c)
                                 in HIDDEN_CATEGORIES else c for c in str(text))))


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


# What the site shows where a figure was not measured (gpubench.figures.MISSING there).
ABSENT = "—"
GIB = 1 << 30


def _shown(format_figure: Callable[..., str]) -> Callable[..., str]:
    """A gpubench.figures function as a template filter: ABSENT for a missing figure."""

    def shown(*args: Any, **kwargs: Any) -> str:
        text = format_figure(*args, **kwargs)
        return ABSENT if text == figures.MISSING else text

    shown.__doc__ = format_figure.__doc__
    return shown


def _gib(num_bytes: float | None) -> str:
    return figures.gib(num_bytes / GIB if num_bytes else None)


def memory(peak_bytes: float | None, had_bytes: float | None, share: float | None,
           limited: bool) -> str:
    """A peak against the memory the runs had: '13.2 / 16.0 GiB limit (83%)' for runs with
    --memory-limit, '13.2 / 140.4 GiB (9%)' for the whole card; ABSENT for nothing."""
    if not peak_bytes:
        return ABSENT
    if not had_bytes:
        return _shown(_gib)(peak_bytes)
    return (f"{peak_bytes / GIB:.1f} / {_gib(had_bytes)}{' limit' if limited else ''} "
            f"({figures.share(share)})")


# Every figure a template prints goes through gpubench.figures, as the terminal's do.
FILTERS = {
    "seconds": _shown(figures.seconds),
    # A figure from the wire, where 0 means "not measured".
    "number": _shown(figures.measured),
    "count": _shown(figures.count),
    "gib": _shown(_gib),
    "share": _shown(figures.share),
    "energy": _shown(figures.energy),
    "speedup": _shown(figures.speedup),
    "duration": _shown(figures.duration),
    "batch": _shown(figures.batch),
    "largest_batch": _shown(figures.largest_batch),
    "measured": _shown(figures.measured),
    "attr": attribute,
}
SPREAD = figures.spread
