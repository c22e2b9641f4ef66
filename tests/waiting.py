"""How long a test waits for a process to reach a state, on a loaded 2-core machine.

A bound that only a hang reaches, never a timing: the test goes on the moment the state
is reached (a process's exit, a child gone), and speed is measured in bench/, not here.
"""

from __future__ import annotations

import time
from collections.abc import Callable

# A graceful stop (in-flight calls finished, the database checkpointed), a run stopped
# by Ctrl-C: seconds when idle, and several times that beside a second test suite.
STOP_DEADLINE_S = 120.0
# A whole CPU run of the real workload that searches, runs out of memory and runs again
# (tests/agent/test_retry.py): 3-5 minutes when idle, over 10 beside a second test suite.
WORKLOAD_RUN_DEADLINE_S = 1800.0


def until(reached: Callable[[], bool], within_s: float = STOP_DEADLINE_S,
          every_s: float = 0.05) -> bool:
    """Whether `reached()` turns true within `within_s`, asked every `every_s`."""
    deadline = time.monotonic() + within_s
    while True:
        if reached():
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(every_s)
