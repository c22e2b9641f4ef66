"""The gRPC status every error of a call is answered with, in one place.

The collector's user-facing errors map to specific codes. Only what is truly
transient maps to a code a client retries (a collector shutting down, a full or
failing disk, a limit); anything else is a bug: INTERNAL, never retried, with its
traceback in the log. (An UNAVAILABLE for a bug would make every agent retry the
same call forever.)
"""

from __future__ import annotations

import logging

import grpc

from gpubench.collector.errors import (
    MixedRuns,
    RunConflict,
    ShuttingDown,
    StorageFull,
    StorageUnavailable,
    TokenExists,
)
from gpubench.collector.transport import Refusal
from gpubench.errors import AccessDenied, GpubenchError, InvalidRecord, NotFound

log = logging.getLogger(__name__)

# The longest status message a call is answered with: it travels in the response's
# trailers, which clients cap (gRPC's default 8 KiB of metadata: past it a client sees
# RESOURCE_EXHAUSTED, not the answer). Messages quote what was sent, which may be long.
MAX_DETAILS_CHARS = 1000

# Most specific first: the first class an error is an instance of decides its code.
STATUS_OF_ERROR: tuple[tuple[type[Exception], grpc.StatusCode], ...] = (
    (InvalidRecord, grpc.StatusCode.INVALID_ARGUMENT),
    (RunConflict, grpc.StatusCode.ALREADY_EXISTS),
    (TokenExists, grpc.StatusCode.ALREADY_EXISTS),
    (MixedRuns, grpc.StatusCode.FAILED_PRECONDITION),
    (NotFound, grpc.StatusCode.NOT_FOUND),
    (AccessDenied, grpc.StatusCode.PERMISSION_DENIED),
    # Transient: nothing was stored, the same call may succeed later.
    (ShuttingDown, grpc.StatusCode.UNAVAILABLE),
    (StorageFull, grpc.StatusCode.RESOURCE_EXHAUSTED),
    (StorageUnavailable, grpc.StatusCode.UNAVAILABLE),
    (GpubenchError, grpc.StatusCode.FAILED_PRECONDITION),
)


def status_of(exc: BaseException) -> tuple[grpc.StatusCode, str] | None:
    """The gRPC status code and message `exc` is answered with (at most
    MAX_DETAILS_CHARS); None: not one of ours."""
    if isinstance(exc, Refusal):
        return exc.code, bounded(exc.details)
    if isinstance(exc, GpubenchError):
        code = next(c for cls, c in STATUS_OF_ERROR if isinstance(exc, cls))
        return code, bounded(str(exc))
    return None


def bounded(details: str) -> str:
    """`details` at most MAX_DETAILS_CHARS long: a longer one keeps its start and its end
    (where a message says what is wrong) and says how much of the middle it left out."""
    if len(details) <= MAX_DETAILS_CHARS:
        return details
    end = MAX_DETAILS_CHARS // 4
    middle = ""
    for _ in range(2):  # the count's own length changes how much is left out
        head = MAX_DETAILS_CHARS - end - len(middle)
        middle = f" [... {len(details) - head - end:,} characters ...] "
    head = MAX_DETAILS_CHARS - end - len(middle)
    return details[:head] + middle + details[-end:]


def answer_of(exc: BaseException, what: str) -> tuple[grpc.StatusCode, str]:
    """`status_of(exc)`, or for anything else (a bug) INTERNAL, logged with its
    traceback as the failure of `what` (a method's name). Call it in an except block."""
    status = status_of(exc)
    if status is not None:
        return status
    log.error("%s failed: a bug; answered INTERNAL", what, exc_info=exc)
    return (grpc.StatusCode.INTERNAL,
            f"internal error ({type(exc).__name__}); the collector's log has the details")
