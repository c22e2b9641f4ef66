"""What operators watch: submissions acknowledged and refused (by reason), counted where
they are decided, and the Stats call's answer.

Every refusal of a submission is counted once, where it happens: the token check and
the rate limit (collector.auth.Gate), the record's checks (the servicer), the store (a
conflict, a full disk).
"""

from __future__ import annotations

import threading
from collections import Counter
from typing import Any

import grpc

from gpubench.collector.errors import StorageFull
from gpubench.collector.statuses import status_of
from gpubench.v1 import collector_pb2

# Every reason a refusal is counted under (StatsResponse.refusals), in the order the
# metrics list them.
REFUSAL_REASONS = ("invalid", "token", "forbidden", "limit", "conflict", "disk-full",
                   "unavailable", "other")
# The status a refusal is answered with -> the reason it is counted under.
_REASON_OF_CODE = {
    grpc.StatusCode.UNAUTHENTICATED: "token",
    grpc.StatusCode.PERMISSION_DENIED: "forbidden",
    grpc.StatusCode.RESOURCE_EXHAUSTED: "limit",
    grpc.StatusCode.INVALID_ARGUMENT: "invalid",
    grpc.StatusCode.ALREADY_EXISTS: "conflict",
    grpc.StatusCode.UNAVAILABLE: "unavailable",
}


def reason_of(exc: BaseException) -> str:
    """The reason a submission refused with `exc` is counted under (StatsResponse): by
    the status it is answered with (collector.statuses), a full disk apart."""
    if isinstance(exc, StorageFull):
        return "disk-full"
    status = status_of(exc)
    return _REASON_OF_CODE.get(status[0], "other") if status else "other"


class SubmissionCounts:
    """Submissions acknowledged and refused since the process started; thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.accepted = 0
        self.refusals: Counter[str] = Counter()

    def accept(self) -> None:
        """Count one acknowledged submission."""
        with self._lock:
            self.accepted += 1

    def refuse(self, exc: BaseException) -> None:
        """Count one submission refused with `exc`."""
        with self._lock:
            self.refusals[reason_of(exc)] += 1

    def snapshot(self) -> tuple[int, dict[str, int]]:
        """(accepted, refusals by reason) at this moment."""
        with self._lock:
            return self.accepted, dict(self.refusals)


def stats_message(store: Any) -> collector_pb2.StatsResponse:
    """The Stats call's answer for `store` (collector.store.Store)."""
    accepted, refusals = store.submissions.snapshot()
    figures = store.runs.counts()
    return collector_pb2.StatsResponse(
        submissions_accepted=accepted, refusals=refusals, **figures)
