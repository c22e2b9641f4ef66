"""The test suite's report at 80 columns: the slowest steps (`--slowest N`), why each
skipped test was skipped, and each failure's report, wrapped. pytest prints its own
`--durations` and `-rs` lines unbroken, a test's whole id and reason on one line (up to 300
columns), and a failure's message as it is (a command's whole output on one line).

Loaded by tests/conftest.py; pyproject.toml's `-r` leaves the skips to this report.
"""

from __future__ import annotations

import os
import textwrap
from collections import Counter
from collections.abc import Generator
from typing import Any

import pytest

WIDTH = 80
_steps: list[tuple[float, str, str]] = []  # (seconds, setup/call/teardown, test id)
_skips: Counter[tuple[str, str]] = Counter()  # (file:line, reason) -> tests
_failures: list[tuple[str, str]] = []  # (FAILED or ERROR, test id)
_listing_failures = False  # -r asked for failures or errors: this report lists them


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--slowest", type=int, default=0, metavar="N",
                     help="list the N slowest steps (setup, call, teardown) at the end, "
                          "within 80 columns")


@pytest.hookimpl(trylast=True)  # after the terminal reporter read -r
def pytest_configure(config: pytest.Config) -> None:
    """Failures and errors listed here at the end (their ids wrapped), not by pytest's
    summary, whose line adds the message after the id."""
    global _listing_failures
    terminal = config.pluginmanager.get_plugin("terminalreporter")
    if terminal is not None and {"f", "E"} & set(terminal.reportchars):
        _listing_failures = True
        terminal.reportchars = terminal.reportchars.replace("f", "").replace("E", "")


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    _steps.append((report.duration, report.when, report.nodeid))
    if report.failed:
        _failures.append(("FAILED" if report.when == "call" else "ERROR", report.nodeid))
    if report.skipped and isinstance(report.longrepr, tuple):
        path, line, reason = report.longrepr  # the line is 1-based already
        _skips[(f"{path}:{line}", reason.removeprefix("Skipped: "))] += 1


def folded(text: str) -> str:
    """`text` with every line over WIDTH columns cut into lines of WIDTH, nothing left out;
    a continued line of pytest's "E   " keeps that mark."""
    lines = []
    for line in text.splitlines():
        mark = "E   " if line.startswith("E   ") else ""
        body, room = line[len(mark):], WIDTH - len(mark)
        lines.append(line if len(line) <= WIDTH else mark + body[:room])
        lines.extend(mark + body[i:i + room] for i in range(room, len(body), room)
                     if len(line) > WIDTH)
    return "\n".join(lines)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item,
                              call: pytest.CallInfo[None]) -> Generator[None, Any, None]:
    """A failure's report folded at WIDTH columns, as text (the summary's line then
    names the test without repeating its message)."""
    outcome = yield
    report = outcome.get_result()
    if report.failed and report.longrepr is not None:
        text = str(report.longrepr)
        if any(len(line) > WIDTH for line in text.splitlines()):
            report.longrepr = folded(text)


def _wrapped(text: str, indent: int) -> list[str]:
    """`text` in lines of WIDTH columns after `indent` spaces; a word longer than that (a
    test's name) stands alone on its line."""
    return textwrap.wrap(text, WIDTH, initial_indent=" " * indent,
                         subsequent_indent=" " * indent, break_long_words=False,
                         break_on_hyphens=False)


def _write_test(terminalreporter: pytest.TerminalReporter, head: str, test: str) -> None:
    """`head` and a test's id on one line, or its name on lines of its own after its file."""
    path, _, name = test.partition("::")
    if len(head + test) <= WIDTH or not name:
        terminalreporter.write_line(head + test)
        return
    terminalreporter.write_line(f"{head}{path}::")
    indent = len(head) if len(head) + len(name) <= WIDTH else 4
    for line in _wrapped(name, indent):
        terminalreporter.write_line(line)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter,
                            config: pytest.Config) -> None:
    slowest = config.getoption("slowest")
    if slowest:
        terminalreporter.write_sep("=", f"slowest {slowest} steps")
        for seconds, when, test in sorted(_steps, reverse=True)[:slowest]:
            _write_test(terminalreporter, f"{seconds:7.2f}s {when:<8} ", test)
    if _listing_failures and _failures:
        terminalreporter.write_sep("=", f"failed ({len(_failures)})")
        for outcome, test in _failures:
            _write_test(terminalreporter, f"{outcome} ", test)
    if _skips:
        terminalreporter.write_sep("=", f"skipped, and why ({sum(_skips.values())})")
        for (where, reason), tests in sorted(_skips.items()):
            where = os.path.relpath(where, config.rootpath) if os.path.isabs(where) else where
            terminalreporter.write_line(where + (f" ({tests} tests)" if tests > 1 else ""))
            for line in _wrapped(reason, 4):
                terminalreporter.write_line(line)
