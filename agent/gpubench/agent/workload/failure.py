"""How a workload process tells a failure: one `error` event and its exit code."""

from __future__ import annotations

import traceback

from gpubench.agent.workload import batch_search, error_text
from gpubench.errors import ExitCode, GpubenchError
from gpubench.events import MESSAGE_LIMIT, ErrorEvent, EventSink
from gpubench.settings import EXIT_ERROR, EXIT_OUT_OF_MEMORY, EXIT_REFUSED


class Refused(GpubenchError):
    """gpubench cannot build or feed this model (before any training); says why and
    what it takes."""

    exit_code = EXIT_REFUSED


def report_failure(events: EventSink, exc: BaseException) -> int:
    """One `error` event for `exc`, and the exit code that goes with it."""
    if isinstance(exc, KeyboardInterrupt):
        events.emit(ErrorEvent(status="interrupted", message="interrupted"))
        return ExitCode.INTERRUPTED
    if isinstance(exc, batch_search.NoBatchFits) or (
        not isinstance(exc, GpubenchError) and error_text.is_out_of_memory(exc)
    ):
        events.emit(ErrorEvent(status="out_of_memory",
                               message=error_text.error_line(exc)[:MESSAGE_LIMIT]))
        return EXIT_OUT_OF_MEMORY
    if isinstance(exc, GpubenchError):
        events.emit(ErrorEvent(status="error", message=str(exc)[:MESSAGE_LIMIT]))
        return exc.exit_code
    traceback.print_exc()  # a bug: keep the whole story on stderr
    events.emit(ErrorEvent(status="error",
                           message=f"{type(exc).__name__}: {exc}"[:MESSAGE_LIMIT]))
    return EXIT_ERROR
