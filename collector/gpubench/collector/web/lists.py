"""Sorting and pagination of the site's lists, from the query string: `sort` (a column's
key), `order` (asc or desc) and `start` (the first row shown, from 0). Every list of the
site (leaderboard, comparison, runs, a GPU's runs) sorts by any of its figure columns and
shows PAGE_SIZE rows a page, with links to the others."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar
from urllib.parse import urlencode

from gpubench.errors import InvalidRecord

PAGE_SIZE = 50
Row = TypeVar("Row")


@dataclass(frozen=True)
class Column:
    """A column a list sorts by: its key in the URL, its heading, its value of a row."""

    key: str
    heading: str
    value: Callable[[Any], Any]
    descending: bool = False  # its natural first order (larger is better: img/s, speedup)


def url_with(path: str, query: Mapping[str, str], **changes: str | None) -> str:
    """`path` with `query` changed: a value of None (or "") drops the parameter."""
    values = {k: v for k, v in query.items() if k not in changes}
    values.update({k: v for k, v in changes.items() if v})
    return path + ("?" + urlencode(values) if values else "")


@dataclass
class Sorting:
    """How a list is sorted: a column (None: the list's own order) and a direction."""

    column: Column | None
    descending: bool

    @classmethod
    def of(cls, query: Mapping[str, str], columns: Sequence[Column]) -> Sorting:
        """The sorting the query string asks for; an unknown column or order names the
        field (the links only offer good ones)."""
        key, order = query.get("sort", ""), query.get("order", "")
        if order not in ("", "asc", "desc"):
            raise InvalidRecord("order", f"unknown {order[:16]!r} (asc or desc)")
        if not key:
            return cls(None, False)
        found = next((c for c in columns if c.key == key), None)
        if found is None:
            raise InvalidRecord("sort", f"unknown {key[:32]!r} (one of "
                                        f"{', '.join(c.key for c in columns)})")
        return cls(found, found.descending if not order else order == "desc")

    def apply(self, rows: Sequence[Row]) -> list[Row]:
        """`rows` in this order; rows without the figure (not measured) last."""
        if self.column is None:
            return list(rows)
        value = self.column.value

        def missing(row: Row) -> bool:
            figure = value(row)
            return figure is None or figure == "" or (isinstance(figure, float)
                                                       and math.isnan(figure))

        present = [r for r in rows if not missing(r)]
        present.sort(key=value, reverse=self.descending)
        return present + [r for r in rows if missing(r)]

    def link(self, column: Column, path: str, query: Mapping[str, str]) -> str:
        """The heading's link: sort by `column`, or reverse it when it is the sort now."""
        if self.column is column:
            order = "asc" if self.descending else "desc"
        else:
            order = "desc" if column.descending else "asc"
        return url_with(path, query, sort=column.key, order=order, start=None)

    def mark(self, column: Column) -> str:
        """' ▲' or ' ▼' beside the heading the list is sorted by."""
        if self.column is not column:
            return ""
        return " ▼" if self.descending else " ▲"


@dataclass
class Page(Generic[Row]):
    """The rows of one page of a list, and the links to the pages beside it."""

    rows: list[Row]
    start: int
    total: int
    previous: str = ""  # URL; "" on the first page
    next: str = ""  # URL; "" on the last page
    first: str = ""  # URL of the first page, where this is not it

    @property
    def shown(self) -> str:
        """'51-100 of 240' (or '3' for a list of one page)."""
        if not self.rows:
            return "0"
        if self.total <= len(self.rows) and not self.start:
            return f"{self.total:,}"
        return f"{self.start + 1:,}-{self.start + len(self.rows):,} of {self.total:,}"


def start_of(query: Mapping[str, str], name: str = "start") -> int:
    """The first row asked for (`start`), 0 by default."""
    text = query.get(name, "0") or "0"
    if not text.isdigit():
        raise InvalidRecord(name, f"{text[:16]!r} is not a row number (0, 50, ...)")
    return int(text)


def paginate(rows: Sequence[Row], path: str, query: Mapping[str, str], *,
             name: str = "start", size: int = PAGE_SIZE) -> Page[Row]:
    """The page of `rows` the query asks for, with links to the others."""
    start = start_of(query, name)
    shown = list(rows[start:start + size])
    page = Page(shown, start, len(rows))
    if start:
        before = start - size
        page.previous = url_with(path, query, **{name: str(before) if before > 0 else None})
        page.first = url_with(path, query, **{name: None})
    if start + size < len(rows):
        page.next = url_with(path, query, **{name: str(start + size)})
    return page
