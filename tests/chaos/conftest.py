"""The fault campaign's session (tests/chaos): its size and seed, from the options
tests/conftest.py declares (--chaos-size, --chaos-seed), and its table at the end of the
report, each part's tally in the order the parts ran."""

from __future__ import annotations

import time

import pytest
from chaos_support import Campaign

CAMPAIGN = pytest.StashKey[Campaign]()


@pytest.fixture(scope="session")
def campaign(request: pytest.FixtureRequest) -> Campaign:
    """The session's campaign: the parts add their tallies to it."""
    config = request.config
    seed = config.getoption("chaos_seed")
    # From the clock unless given: shown in the report, so that a run can be repeated.
    found = Campaign(short=config.getoption("chaos_size") == "short",
                     seed=int(time.time()) if seed is None else seed)
    config.stash[CAMPAIGN] = found
    return found


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """The campaign's table, after the tests' report, where any part ran."""
    found = terminalreporter.config.stash.get(CAMPAIGN, None)
    if found is None or not found.tallies:
        return
    terminalreporter.write_sep("=", "the collector's fault campaign")
    for line in found.report():
        terminalreporter.write_line(line)
