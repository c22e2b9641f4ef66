"""The workload's stdout belongs to the event stream and to nothing else."""

from __future__ import annotations

import os
import sys

from gpubench.events import EventWriter, WarningEvent

_claimed: list[EventWriter] = []  # the writer claim_stdout made in this process


def claim_stdout() -> EventWriter:
    """An event writer on the process's real stdout; all other output goes to stderr.

    Frameworks print from Python and from C++ (TensorFlow's banner, XLA's
    warnings, a library's stray print). Moving file descriptor 1 to stderr before
    any of them loads means none of that can land between two events, and child
    processes inherit the same arrangement.
    """
    sys.stdout.flush()
    events_fd = os.dup(1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    stream = os.fdopen(events_fd, "w", buffering=1, encoding="utf-8")
    writer = EventWriter(stream)
    _claimed.append(writer)
    return writer


def warn(message: str) -> None:
    """A warning from code that is handed no event writer: a `warning` event (which the
    run's record keeps) on the stream claim_stdout made, or one line on stderr where
    this process claimed none (a data-parallel replica, a script)."""
    if _claimed:
        _claimed[-1].emit(WarningEvent(message=message))
    else:
        print(f"warning: {message}", file=sys.stderr, flush=True)
