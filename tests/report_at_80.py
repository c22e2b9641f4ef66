"""The end of the test suite's report at 80 columns: the slowest steps (`--slowest N`) and
why each skipped test was skipped, wrapped. pytest prints its own `--durations` and `-rs`
lines unbroken, a test's whole id and reason on one line (up to 300 columns).

Loaded by tests/conftest.py; pyproject.toml's `-r` leaves the skips to this report.
"""

from __future__ import annotations

import os
import textwrap
from collections import Counter

import pytest

WIDTH = 80
_steps: list[tuple[float, str, str]] = []  # (seconds, setup/call/teardown, test id)
_skips: Counter[tuple[str, str]] = Counter()  # (file:line, reason) -> tests


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--slowest", type=int, default=0, metavar="N",
                     help="list the N slowest steps (setup, call, teardown) at the end, "
                          "within 80 columns")


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    _steps.append((report.duration, report.when, report.nodeid))
    if report.skipped and isinstance(report.longrepr, tuple):
        path, line, reason = report.longrepr  # the line is 1-based already
        _skips[(f"{path}:{line}", reason.removeprefix("Skipped: "))] += 1


def _wrapped(text: str, indent: int) -> list[str]:
    """`text` in lines of WIDTH columns after `indent` spaces; a word longer than that (a
    test's name) stands alone on its line."""
    return textwrap.wrap(text, WIDTH, initial_indent=" " * indent,
                         subsequent_indent=" " * indent, break_long_words=False,
                         break_on_hyphens=False)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter,
                            config: pytest.Config) -> None:
    slowest = config.getoption("slowest")
    if slowest:
        terminalreporter.write_sep("=", f"slowest {slowest} steps")
        for seconds, when, test in sorted(_steps, reverse=True)[:slowest]:
            head = f"{seconds:7.2f}s {when:<8} "
            path, _, name = test.partition("::")
            if len(head + test) <= WIDTH or not name:
                terminalreporter.write_line(head + test)
                continue
            terminalreporter.write_line(f"{head}{path}::")
            indent = len(head) if len(head) + len(name) <= WIDTH else 4
            for line in _wrapped(name, indent):
                terminalreporter.write_line(line)
    if _skips:
        terminalreporter.write_sep("=", f"skipped, and why ({sum(_skips.values())})")
        for (where, reason), tests in sorted(_skips.items()):
            where = os.path.relpath(where, config.rootpath) if os.path.isabs(where) else where
            terminalreporter.write_line(where + (f" ({tests} tests)" if tests > 1 else ""))
            for line in _wrapped(reason, 4):
                terminalreporter.write_line(line)
