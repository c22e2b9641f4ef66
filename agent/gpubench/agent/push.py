"""Pushing spooled runs to the collector: deadlines, retries with backoff and jitter.

Only errors the collector or the network call retryable (unreachable, deadline
passed, over a rate limit) are retried, a bounded number of times within a
bounded time; resending is safe because the collector is idempotent on run_id.
A run the collector refuses goes to refused/; an unreadable file to damaged/;
either way the other runs still go. A run that did not finish (interrupted or failed) is
sent only when asked (`include_failed`); one found in pending/ moves to unfinished/.
If the collector stays unreachable, or the token is refused, the push stops and the runs
stay pending.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from gpubench.agent.spool import Spool, SpoolEntry, finished
from gpubench.errors import (
    AccessDenied,
    GpubenchError,
    InvalidRecord,
    RequestRefused,
    is_retryable,
)
from gpubench.v1 import run_pb2


class Submitter(Protocol):
    """What push needs of gpubench.client.Client."""

    def submit_run(self, run: run_pb2.Run) -> Any: ...


class FreshConnection:
    """A collector client that is replaced by a new one after a retryable failure.

    A gRPC channel whose connection failed waits before it tries again, longer
    each time (up to minutes): a retry on the same channel can fail fast although
    the collector is back. A new channel connects at once.
    """

    def __init__(self, connect: Callable[[], Any]) -> None:
        self._connect = connect
        self._client: Any = None

    def submit_run(self, run: run_pb2.Run) -> Any:
        """Submit through the current client (connecting first if needed)."""
        if self._client is None:
            self._client = self._connect()
        try:
            return self._client.submit_run(run)
        except GpubenchError as exc:
            if is_retryable(exc):
                self.close()
            raise

    def close(self) -> None:
        """Close the current client, if any."""
        if self._client is not None:
            self._client.close()
            self._client = None

    def __enter__(self) -> FreshConnection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@dataclass(frozen=True)
class RetryPolicy:
    """How hard to try one run."""

    attempts: int = 6  # calls at most
    first_delay: float = 0.5  # seconds before the second call
    max_delay: float = 10.0  # the longest pause between calls
    total_seconds: float = 60.0  # no new call after this long on one run
    call_timeout: float = 10.0  # each call's deadline (the Client's timeout)

    def delay(self, retry: int, draw: Callable[[], float]) -> float:
        """The pause before retry number `retry` (1-based): exponential, capped, with
        "equal jitter" (half fixed, half random) so agents that lost the collector
        together do not come back in step."""
        ceiling = min(self.max_delay, self.first_delay * 2 ** (retry - 1))
        return ceiling / 2 + draw() * ceiling / 2


def submit_with_retries(
    client: Submitter,
    run: run_pb2.Run,
    policy: RetryPolicy = RetryPolicy(),
    *,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
    draw: Callable[[], float] = random.random,
    on_retry: Callable[[int, float, GpubenchError], None] | None = None,
) -> Any:
    """Submit one run, retrying retryable failures; raises the last error."""
    began = clock()
    attempt = 1
    while True:
        try:
            return client.submit_run(run)
        except GpubenchError as exc:
            if not is_retryable(exc) or attempt >= policy.attempts:
                raise
            pause = policy.delay(attempt, draw)
            if clock() - began + pause > policy.total_seconds:
                raise
            if on_retry is not None:
                on_retry(attempt, pause, exc)
            sleep(pause)
            attempt += 1


@dataclass
class PushReport:
    """What a push did."""

    sent: list[str] = field(default_factory=list)  # run ids acknowledged
    refused: list[tuple[str, str]] = field(default_factory=list)  # (file, reason)
    damaged: list[tuple[str, str]] = field(default_factory=list)  # (file, reason)
    kept: list[str] = field(default_factory=list)  # unfinished runs' files, not sent
    stopped: GpubenchError | None = None  # why the push stopped early (runs kept)
    left: int = 0  # runs still pending afterwards

    @property
    def ok(self) -> bool:
        """Everything pending was sent."""
        return self.stopped is None and not self.refused and not self.damaged


def push_one(
    spool: Spool,
    entry: SpoolEntry,
    client: Submitter,
    report: PushReport,
    policy: RetryPolicy = RetryPolicy(),
    *,
    include_failed: bool = False,
    **retry_options: Any,
) -> bool:
    """Push one spooled run (one that did not finish only with `include_failed`); False
    when the push as a whole must stop (`report.stopped`)."""
    try:
        run = spool.load(entry)
    except InvalidRecord as exc:
        spool.mark_damaged(entry, str(exc))
        report.damaged.append((entry.name, str(exc)))
        return True
    if not finished(run) and not include_failed:
        if entry.folder == "pending":
            spool.mark_unfinished(entry)
        report.kept.append(entry.name)
        return True
    try:
        submit_with_retries(client, run, policy, **retry_options)
    except AccessDenied as exc:
        report.stopped = exc
        return False
    except RequestRefused as exc:
        if is_retryable(exc):  # still over a limit after every retry: try again later
            report.stopped = exc
            return False
        spool.mark_refused(entry, str(exc))
        report.refused.append((entry.name, str(exc)))
        return True
    except GpubenchError as exc:
        # Unreachable after every retry, or the collector failed: keep the run.
        report.stopped = exc
        return False
    spool.mark_sent(entry)
    report.sent.append(run.run_id)
    return True


def push_pending(
    spool: Spool,
    client: Submitter,
    policy: RetryPolicy = RetryPolicy(),
    *,
    only: set[str] | None = None,
    include_failed: bool = False,
    **retry_options: Any,
) -> PushReport:
    """Push every pending run (or those whose file stems are in `only`), oldest first;
    with `include_failed`, the unfinished ones too."""
    report = PushReport()
    entries = spool.pending() + (spool.unfinished() if include_failed else [])
    for entry in sorted(entries, key=lambda e: e.path.stat().st_mtime):
        if only is not None and entry.path.stem not in only:
            continue
        if not push_one(spool, entry, client, report, policy, include_failed=include_failed,
                        **retry_options):
            break
    report.left = len(spool.pending())
    return report
