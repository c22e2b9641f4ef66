"""How a workload process tells a failure: one `error` event and its exit code."""

from __future__ import annotations

import sys
import traceback

from gpubench.agent.workload import batch_search, error_text
from gpubench.errors import ExitCode, GpubenchError
from gpubench.events import MESSAGE_LIMIT, ErrorEvent, EventSink
from gpubench.settings import EXIT_ERROR, EXIT_OUT_OF_MEMORY, EXIT_REFUSED


class Refused(GpubenchError):
    """gpubench cannot build or feed this model (before any training); says why and
    what it takes."""

    exit_code = EXIT_REFUSED


# What to install where a backend's package is missing from the workload's Python: the
# extras of pyproject.toml (torch: Keras on torch, as the reference runs; workload: Keras
# on TensorFlow); JAX has none (its build is the platform's: CPU, CUDA or TPU).
FRAMEWORK_INSTALLS = {
    "torch": "pip install 'gpubench-keras[torch]'",
    "tensorflow": "pip install 'gpubench-keras[workload]'",
    "jax": "pip install jax keras",
    "keras": "pip install 'gpubench-keras[torch]' (or [workload]: Keras on TensorFlow)",
}


def missing_framework(module: str) -> str:
    """What to install where the framework (or Keras) is not in the workload's Python."""
    return (f"{module} is not installed in the workload's Python ({sys.executable}): "
            f"install it there ({FRAMEWORK_INSTALLS[module]}), or choose another "
            "--backend (torch, tensorflow, jax)")


def report_failure(events: EventSink, exc: BaseException) -> int:
    """One `error` event for `exc`, and the exit code that goes with it: a framework
    that is not installed refuses the run (exit 2: nothing ran, no run to keep)."""
    if isinstance(exc, ModuleNotFoundError) and \
            (exc.name or "").partition(".")[0] in FRAMEWORK_INSTALLS:
        events.emit(ErrorEvent(status="error", message=missing_framework(
            (exc.name or "").partition(".")[0])[:MESSAGE_LIMIT]))
        return EXIT_REFUSED
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
