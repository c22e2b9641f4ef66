"""How every figure reads, wherever it is shown: the terminal's tables, the agent's summary,
the demo, the charts and the results site all format through these functions, so a figure
reads the same in each ("9.50 kJ", "0.196", "17.0x", "915 s").

Figures have about three significant digits ("1,234", "339", "17.0", "5.03", "0.196",
"0.0131"): enough to tell runs apart, never a false precision. A figure that was not
measured reads MISSING, never a bare unit or a zero ("-", not "W" or "0.0000 s").

The names of the figures that were easy to confuse are defined here too, once: the
largest batch that fits (what a batch search found) and the batch the speed was timed at,
and the one ratio for "how many times faster", the speedup.
"""

from __future__ import annotations

import math
from typing import Any

MISSING = "-"

# The two batches a run has, by the names every view gives them, and what they mean.
LARGEST_BATCH = "largest batch"
LARGEST_BATCH_MEANS = "the largest batch per GPU that fits in memory, as a batch search found it"
TIMED_BATCH = "timed batch"
TIMED_BATCH_MEANS = "the batch per GPU that epoch 2 was timed at"
# The epoch's training rate and the steady rate of its median step, named apart: an epoch of
# a few steps and a partial one trains more slowly than its steps do (record.py).
EPOCH_RATE = "img/s"
EPOCH_RATE_MEANS = "training images a second in epoch 2, after its first step"
STEP_RATE = "img/s, median step"
STEP_RATE_MEANS = ("training images a second at epoch 2's median step (its global batch over "
                   "the median step time): the steady rate")
# What a speed counts follows the workload (gpubench.models): images, or a language
# model's tokens. Every view names the rate through these.
_UNIT_SHORT = {"images": "img", "tokens": "tok"}


def rate_unit(unit: str = "images") -> str:
    """The speed's unit: "img/s", or "tok/s" for a language model ("" reads images)."""
    return f"{_UNIT_SHORT.get(unit or 'images', 'img')}/s"


def per_joule_unit(unit: str = "images") -> str:
    """Training samples a joule: "img/J", or "seq/J" for a language model (the record
    counts its samples, whole sequences, per joule: its training samples over the
    epoch's energy)."""
    return "seq/J" if unit == "tokens" else "img/J"


def unit_words(unit: str = "images") -> str:
    """What the speed counts, in words: "training images" or "training tokens"."""
    return "training tokens" if unit == "tokens" else "training images"


def rate_legend(unit: str = "images") -> str:
    """The legend of a table's speed and energy columns in `unit`."""
    joule = "training sequences" if unit == "tokens" else unit_words(unit)
    return (f"{rate_unit(unit)}: {unit_words(unit)} a second; {per_joule_unit(unit)}: "
            f"{joule} a joule")


def unit_of_frame(frame: Any) -> str:
    """The unit a table's speeds are in: its `unit` (what the runs share), else its rows'
    one unit, else images (also where rows of both are shown together)."""
    shared = getattr(frame, "attrs", {}).get("unit", "")
    if shared:
        return str(shared)
    column = frame["unit"] if "unit" in getattr(frame, "columns", ()) else None
    units = set(column.dropna()) if column is not None else set()
    return units.pop() if len(units) == 1 else "images"


# The one ratio of "how many times faster", and how it is computed.
SPEEDUP = "speedup"
SPEEDUP_MEANS = ("how many times faster than the baseline: the baseline's median epoch-2 "
                 "time over this one's")
# Runs on a card the collector's GPU catalogue does not list yet (a name no catalogued
# card has, nor imitates): shown apart under this heading, never ranked with the cards it
# lists, with how to have the card added.
NOT_CATALOGUED = "not yet in the catalogue"
ASK_FOR_A_CARD = ("to have a card added to the catalogue, open an issue on gpubench with the "
                  "output of `gpubench-agent inventory` run on it")


def is_missing(value: Any) -> bool:
    """None, NaN or NaT: a figure that was not measured."""
    if value is None:
        return True
    try:
        # NaN and NaT are the values that differ from themselves.
        return bool(value != value)
    except (TypeError, ValueError):
        return False


def _figure(value: Any) -> float | None:
    """`value` as a finite number, or None when it is missing or not finite."""
    if is_missing(value):
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def three_digits(value: Any) -> str:
    """About three significant digits, no exponent: 1,234 / 339 / 17.0 / 5.03 / 0.196 /
    0.0131; MISSING for nothing."""
    number = _figure(value)
    if number is None:
        return MISSING
    size = abs(number)
    if size >= 100:
        return f"{number:,.0f}"
    if size >= 10:
        return f"{number:.1f}"
    if size >= 1:
        return f"{number:.2f}"
    if size == 0:
        return "0"
    # Small figures keep three significant digits: 0.196 J, 0.0131 img/J.
    decimals = min(2 - math.floor(math.log10(size)), 12)
    return f"{number:.{decimals}f}"


def measured(value: Any, unit: str = "") -> str:
    """A figure with its unit ('412 W', '71.0 °C'); MISSING, without the unit, when the
    figure was not measured (None, NaN, or the record's 0)."""
    number = _figure(value)
    if not number:
        return MISSING
    return f"{three_digits(number)} {unit}".rstrip()


def count(value: Any) -> str:
    """A whole number with thousands separators ('1,709'); MISSING for nothing."""
    number = _figure(value)
    return MISSING if number is None else f"{round(number):,}"


def seconds(value: Any, *, unit: bool = True) -> str:
    """A time in seconds: '0.702 s', '9.30 s', '17.0 s', '915 s' (the unit left out where
    a heading names it); MISSING for nothing measured."""
    number = _figure(value)
    if not number or number < 0:
        return MISSING
    return three_digits(number) + (" s" if unit else "")


def seconds_range(low: Any, high: Any, *, unit: bool = True) -> str:
    """'16.8-17.3 s', or one figure when both ends read the same."""
    first, last = seconds(low, unit=False), seconds(high, unit=False)
    text = first if first == last else f"{first}-{last}"
    return text + (" s" if unit and first != MISSING else "")


def spread(low: Any, high: Any, median: Any) -> str:
    """The epoch-2 range of several runs and its share of their median: '9.10-9.60 s
    (5.4%)'; '' for one run (or one time)."""
    lo, hi, mid = _figure(low), _figure(high), _figure(median)
    if not lo or not hi or not mid or hi <= lo:
        return ""
    # A no-break space keeps the unit with its figure where the text wraps.
    return (f"{three_digits(lo)}–{three_digits(hi)}\u00a0s "
            f"({(hi - lo) / mid * 100:.1f}%)")


def energy(joules: Any) -> str:
    """'850 J', '9.50 kJ', '1.20 MJ'; MISSING for nothing measured."""
    number = _figure(joules)
    if not number:
        return MISSING
    if number < 1_000:
        return f"{three_digits(number)} J"
    if number < 1_000_000:
        return f"{three_digits(number / 1_000)} kJ"
    return f"{three_digits(number / 1_000_000)} MJ"


def share(fraction: Any) -> str:
    """A share 0..1 as '83%' ('0.4%' below one percent); MISSING for nothing."""
    number = _figure(fraction)
    if number is None or number < 0:
        return MISSING
    percent = number * 100
    return f"{percent:.1f}%" if 0 < percent < 1 else f"{percent:.0f}%"


def gib(value_gib: Any) -> str:
    """Memory given in GiB: '12.3 GiB', '0.50 GiB'; MISSING for nothing."""
    number = _figure(value_gib)
    if not number:
        return MISSING
    return f"{number:.2f} GiB" if number < 1 else f"{number:.1f} GiB"


def memory(value_gib: Any, fraction: Any = None, *, of_limit: bool = False) -> str:
    """Peak memory and its share of the memory the run had: '12.3 GiB (77%)', or for a
    run with --memory-limit '13.2 GiB (83% of limit)'."""
    text = gib(value_gib)
    if text == MISSING or is_missing(fraction) or _figure(fraction) is None:
        return text
    return f"{text} ({share(fraction)}{' of limit' if of_limit else ''})"


def speedup(ratio: Any) -> str:
    """A speedup: '17.0x', '1.00x', '0.52x'; MISSING for nothing."""
    number = _figure(ratio)
    if not number:
        return MISSING
    return f"{number:.2f}x" if number < 1 else f"{three_digits(number)}x"


def batch(per_gpu: Any, global_batch: Any = 0, gpu_count: Any = 1) -> str:
    """A batch: '512' on one GPU, '1024 (2x512)' on several; MISSING for none."""
    per = int(_figure(per_gpu) or 0)
    if not per:
        return MISSING
    gpus = int(_figure(gpu_count) or 1)
    if gpus > 1:
        return f"{int(_figure(global_batch) or 0) or per * gpus} ({gpus}x{per})"
    return str(per)


def largest_batch(per_gpu: Any, capped: bool = False) -> str:
    """The largest batch that fits: '1221', '1709+' where the training set, not memory,
    ended the search; MISSING where no search ran."""
    per = int(_figure(per_gpu) or 0)
    return f"{per}{'+' if capped else ''}" if per else MISSING


def duration(value: Any) -> str:
    """A training time as people read it: '42 s', '12.5 min', '2.57 h', '3.14 d (75 h)',
    '36.7 d (882 h)'."""
    number = _figure(value)
    if number is None or number < 0:
        return MISSING
    if number < 90:
        return f"{number:.0f} s"
    if number < 90 * 60:
        return f"{number / 60:.1f} min"
    hours = number / 3600
    if hours < 36:
        return f"{hours:.2f} h" if hours < 10 else f"{hours:.1f} h"
    days = hours / 24
    return f"{days:.2f} d ({hours:.0f} h)" if days < 10 else f"{days:.1f} d ({hours:,.0f} h)"


def duration_range(values: Any) -> str:
    """'2.57 h' for one value; 'min 2.50 h, median 2.54 h, max 2.57 h' for several."""
    import statistics

    ordered = sorted(values)
    if len(ordered) == 1 or ordered[0] == ordered[-1]:
        return duration(ordered[0])
    return (f"min {duration(ordered[0])}, median {duration(statistics.median(ordered))}, "
            f"max {duration(ordered[-1])}")


def rough_duration(value: float) -> str:
    """Time left, rounded as a person would say it: '45 s', '3 min', '1 h 20 min'."""
    if value < 90:
        return f"{max(5, round(value / 5) * 5):.0f} s"
    minutes = round(value / 60)
    if minutes < 90:
        return f"{minutes} min"
    return f"{minutes // 60} h {minutes % 60} min"
