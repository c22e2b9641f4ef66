"""User-facing errors.

One error class, `GpubenchError`, is caught at the top of every CLI and printed
as one message (wrapped at 80 columns, `wrap_message`) with its exit code; anything
else that escapes is a bug and keeps its traceback.
"""

from __future__ import annotations

import os
import sys
import textwrap

# The widest an error message is written (the terminal's width where it is narrower).
ERROR_WIDTH = 80


class ExitCode:
    """Exit codes scripts can rely on."""

    OK = 0
    FAILURE = 1          # a run failed, or a request was refused
    USAGE = 2            # bad flags or arguments (click uses 2 as well)
    UNAVAILABLE = 3      # the collector could not be reached
    AUTH = 4             # missing, wrong or revoked token; not allowed
    NOT_FOUND = 5
    BAD_DATA = 6         # invalid input data, record or file
    INTERRUPTED = 130    # Ctrl-C


class GpubenchError(Exception):
    """An error the user can act on; its message is shown without a traceback."""

    exit_code: int = ExitCode.FAILURE

    def __init__(self, message: str, *, exit_code: int | None = None) -> None:
        super().__init__(message)
        if exit_code is not None:
            self.exit_code = exit_code


def error_width() -> int:
    """The columns an error message wraps at: $COLUMNS when set, else the terminal's
    width up to ERROR_WIDTH, else ERROR_WIDTH."""
    columns = os.environ.get("COLUMNS", "")
    if columns.isdigit() and int(columns) > 0:
        return int(columns)
    try:
        return min(ERROR_WIDTH, os.get_terminal_size(sys.stderr.fileno()).columns)
    except (AttributeError, OSError, ValueError):  # no terminal, or no file behind stderr
        return ERROR_WIDTH


def wrap_message(prefix: str, message: str, width: int | None = None) -> str:
    """`prefix` and `message` wrapped at `width` (default error_width()), the lines after
    the first indented two spaces; words (paths, flags, addresses) are never broken."""
    return textwrap.fill(f"{prefix}{message}", width or error_width(), subsequent_indent="  ",
                         break_long_words=False, break_on_hyphens=False)


def is_retryable(error: BaseException) -> bool:
    """Whether the same request may succeed if sent again later.

    The client marks errors it raises with `retryable` (unreachable collector,
    deadline passed, over a rate limit); anything else is final.
    """
    return bool(getattr(error, "retryable", False))


class InvalidRecord(GpubenchError):
    """A run record (or one of its fields) is not valid."""

    exit_code = ExitCode.BAD_DATA

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(f"{field}: {problem}")
        self.field = field
        self.problem = problem


class DataError(GpubenchError):
    """The benchmark's input data is missing or broken; names the file or folder."""

    exit_code = ExitCode.BAD_DATA


class CollectorUnavailable(GpubenchError):
    """The collector could not be reached."""

    exit_code = ExitCode.UNAVAILABLE


class AccessDenied(GpubenchError):
    """The collector refused the token (missing, unknown, revoked, not an admin)."""

    exit_code = ExitCode.AUTH


class NotFound(GpubenchError):
    """The requested run or token does not exist."""

    exit_code = ExitCode.NOT_FOUND


class RequestRefused(GpubenchError):
    """The collector refused a request as invalid, conflicting or over a limit."""

    exit_code = ExitCode.FAILURE
