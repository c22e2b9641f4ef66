"""Ctrl-C and SIGTERM for the agent's main thread alone.

A signal sent to a process is taken by one of its threads that does not block it, the
kernel's choice; Python runs the handler (Ctrl-C's KeyboardInterrupt, SIGTERM's) in the
main thread, and only when that thread next runs Python code. The agent's main thread
spends a run blocked in a read of the workload's output: a Ctrl-C taken by another
thread (the GPU sampler, the display's refresh, a log reader) would wait for the
workload's next line, or for ever with a workload that says nothing. Threads started
inside `threads_leave_signals()` block the two signals from their first instruction
(a new thread inherits the mask of the one that starts it), so that the main thread is
the one interrupted, blocked or not.
"""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Iterator

STOPPING = {signal.SIGINT, signal.SIGTERM}


@contextlib.contextmanager
def threads_leave_signals() -> Iterator[None]:
    """Within it, the threads this thread starts (rich's refresh, a sampler) never take
    SIGINT or SIGTERM. The two are held here meanwhile, and taken once it ends."""
    held = signal.pthread_sigmask(signal.SIG_BLOCK, STOPPING)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, held)
