"""Every figure in one voice (gpubench.figures): the terminal, the agent's summary, the
demo and the site format through these."""

from __future__ import annotations

import math

import pytest

from gpubench import figures


@pytest.mark.parametrize(
    ("value", "text"),
    [(1234.4, "1,234"), (339.2, "339"), (17.04, "17.0"), (5.034, "5.03"), (0.196, "0.196"),
     (0.0131, "0.0131"), (0.00052, "0.000520"), (0.0, "0"), (math.nan, "-"), (None, "-"),
     (math.inf, "-")],
)  # fmt: skip
def test_three_significant_digits_where_small(value: float, text: str) -> None:
    assert figures.three_digits(value) == text


def test_units_and_what_was_not_measured() -> None:
    assert figures.energy(850.2) == "850 J"
    assert figures.energy(9_500.0) == "9.50 kJ"  # the site once said "9,500 J"
    assert figures.energy(1_200_000.0) == "1.20 MJ"
    assert figures.energy(0.0) == figures.energy(math.nan) == "-"
    assert figures.seconds(915.0) == "915 s"  # the chart once said "915.000 s"
    assert figures.seconds(0.7023) == "0.702 s" and figures.seconds(9.3) == "9.30 s"
    assert figures.seconds(0.0) == "-"  # not "0.0000 s"
    assert figures.measured(0.0, "W") == "-"  # not a bare "W"
    assert figures.measured(412.4, "W") == "412 W"
    assert figures.speedup(17.0) == "17.0x"
    assert figures.speedup(1.0) == "1.00x"
    assert figures.speedup(0.521) == "0.52x"
    assert figures.memory(12.34, 0.771) == "12.3 GiB (77%)"
    assert figures.memory(13.2, 0.825, of_limit=True) == "13.2 GiB (82% of limit)"
    assert figures.memory(0.5) == "0.50 GiB"
    assert figures.memory(math.nan, 0.5) == "-"
    assert figures.share(0.004) == "0.4%" and figures.share(0.83) == "83%"
    assert figures.batch(512, 1024, 2) == "1024 (2x512)"
    assert figures.batch(128, 128, 1) == "128"
    assert figures.batch(0, 0, 1) == "-"
    assert figures.largest_batch(1709, capped=True) == "1709+"
    assert figures.largest_batch(0) == "-"
    assert figures.spread(9.1, 9.6, 9.3) == "9.10–9.60\u00a0s (5.4%)"
    assert figures.spread(9.3, 9.3, 9.3) == ""


@pytest.mark.parametrize(("seconds", "text"), [
    (42, "42 s"), (750, "12.5 min"), (9253, "2.57 h"), (20 * 3600, "20.0 h"),
    (271_361, "3.14 d (75 h)"), (3_174_000, "36.7 d (882 h)"),
])
def test_training_times_read_as_people_say_them(seconds: float, text: str) -> None:
    assert figures.duration(seconds) == text


def test_a_range_names_min_median_and_max() -> None:
    assert figures.duration_range([9000, 9253]) == "min 2.50 h, median 2.54 h, max 2.57 h"
    assert figures.duration_range([9253]) == "2.57 h"


@pytest.mark.parametrize(("seconds", "said"), [
    (3, "5 s"), (44, "45 s"), (89, "90 s"), (150, "2 min"), (200, "3 min"),
    (5400, "1 h 30 min"),
])
def test_time_left_reads_as_a_person_says_it(seconds: float, said: str) -> None:
    assert figures.rough_duration(seconds) == said
