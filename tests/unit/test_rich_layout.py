"""gpubench.tables' narrow tables lean on private parts of rich: they are used only on
the rich releases they were tested on (the range pyproject.toml pins), with the internals
as written against; anywhere else the tables stand aside, with one warning, and rich's
own layout draws them."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from rich.console import Console

from gpubench import tables

ROOT = Path(__file__).resolve().parents[2]


def render(table: object, width: int = 40) -> str:
    console = Console(width=width, record=True, file=open("/dev/null", "w"))  # noqa: SIM115
    console.print(table)
    return console.export_text()


def long_words_table() -> object:
    return tables.text_table(("name", "what it is"),
                             [("NVIDIA GeForce RTX 4090", "a card with a rather long name"),
                              ("Tesla T4", "the article's card")])


def test_the_installed_rich_is_as_tested() -> None:
    assert tables.rich_problems() == []
    assert tables.narrowing()


def test_pyproject_pins_the_tested_releases() -> None:
    text = (ROOT / "pyproject.toml").read_text()
    [low, high] = map(int, re.search(r'"rich>=(\d+),<(\d+)"', text).groups())
    assert tuple(range(low, high)) == tables.RICH_TESTED


def test_another_release_or_changed_internals_are_found() -> None:
    assert tables.rich_problems("16.0.0") == [
        "rich 16.0.0 is not a release it was tested on (15.x)"]
    assert tables.rich_problems("14.2.0")


def test_the_narrow_layout_keeps_words_whole() -> None:
    text = render(long_words_table())
    assert "…" not in text and "NVIDIA" in text and "GeForce" in text


def test_on_an_untested_rich_the_tables_stand_aside_with_one_warning(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(tables, "_narrowing", [])
    monkeypatch.setattr(tables, "rich_problems", lambda: ["rich 99.0 is not a release"])
    first, second = render(long_words_table()), render(long_words_table())
    assert first == second and "NVIDIA" in first  # drawn by rich's own layout
    said = capsys.readouterr().err.splitlines()
    assert said == ["warning: tables use rich's own layout, which may cut words with '…' "
                    "where 80 columns are tight: rich 99.0 is not a release"]


def test_text_cells_are_never_markup() -> None:
    text = render(tables.text_table(("file",), [("[bold]a[/bold].json",)]), width=60)
    assert "[bold]a[/bold].json" in text
