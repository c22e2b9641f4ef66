"""Whether the store can make writes durable now, and who must know when that changes.

A full disk (or a failing one) must not look like a bug: the store turns the
errors of its database writes into `StorageFull` or
`StorageUnavailable` (retryable status codes with a clear message), and keeps
here which of its parts cannot write. The health service listens: the collector
says NOT_SERVING while any part is in trouble and SERVING again once its writes
succeed (the store retries by itself: see collector.store).
"""

from __future__ import annotations

import errno
import logging
import threading
from collections.abc import Callable

import duckdb

from gpubench.collector.errors import StorageFull, StorageUnavailable

log = logging.getLogger(__name__)

# Errno values that say the disk or the quota is full.
_FULL_ERRNOS = (errno.ENOSPC, errno.EDQUOT)
# How DuckDB words a full disk, and a write or read its file system refused (it raises
# IOException, or TransactionException "Failed to commit: Could not write file ...").
_FULL_WORDS = ("no space left on device", "disk quota exceeded", "disk full")
_IO_WORDS = ("could not write", "could not read", "could not fsync", "input/output error",
             "could not truncate", "could not open file")


def storage_error(exc: BaseException, doing: str) -> StorageUnavailable | None:
    """The StorageFull / StorageUnavailable an I/O failure of `doing` ("writing the
    storing runs in /x") amounts to; None for errors that are not about the storage
    (bugs, a value the database refuses), which must not look retryable."""
    text = str(exc).lower()
    if isinstance(exc, OSError):
        full = exc.errno in _FULL_ERRNOS
        reason = exc.strerror or str(exc)
    elif isinstance(exc, duckdb.Error):
        full = any(words in text for words in _FULL_WORDS)
        # FatalException: DuckDB refuses everything until the database is opened again,
        # which the store does (Database.reopen).
        if not (full or isinstance(exc, (duckdb.IOException, duckdb.FatalException))
                or any(words in text for words in _IO_WORDS)):
            return None
        reason = "no space left on device" if full else str(exc).splitlines()[0]
    else:
        return None
    if full:
        return StorageFull(f"cannot store runs now: no space left on device ({doing}); "
                           "retry once space is freed")
    return StorageUnavailable(f"cannot store runs now: {reason} ({doing}); retry later")


class Durability:
    """Which parts of the store cannot write durably now ("database"), and
    the listeners told `trouble` (a message, or None when every part writes again)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        # Serialises telling listeners, so that they see the changes in order.
        self._telling = threading.Lock()
        self._troubles: dict[str, str] = {}
        self._listeners: list[Callable[[str | None], None]] = []

    @property
    def trouble(self) -> str | None:
        """Why writes cannot be made durable now; None when they can."""
        with self._lock:
            return "; ".join(self._troubles.values()) or None

    def failing(self, part: str) -> bool:
        """Whether `part` could not write at its last try."""
        with self._lock:
            return part in self._troubles

    def failed(self, part: str, error: StorageUnavailable) -> bool:
        """`part` could not write; True when it could before (the change is logged)."""
        with self._lock:
            new = part not in self._troubles
            self._troubles[part] = str(error)
        if new:
            log.error("%s; health is NOT_SERVING until writes succeed again", error)
            self._tell()
        return new

    def recovered(self, part: str) -> None:
        """`part` wrote durably again."""
        with self._lock:
            if self._troubles.pop(part, None) is None:
                return
            clear = not self._troubles
        if clear:
            log.warning("writes are durable again; health is SERVING")
        self._tell()

    def listen(self, listener: Callable[[str | None], None]) -> Callable[[], None]:
        """Call `listener(trouble)` now and at every change; returns its removal."""
        with self._telling:
            self._listeners.append(listener)
            listener(self.trouble)

        def remove() -> None:
            with self._telling:
                if listener in self._listeners:
                    self._listeners.remove(listener)

        return remove

    def _tell(self) -> None:
        with self._telling:
            trouble = self.trouble
            for listener in list(self._listeners):
                try:
                    listener(trouble)
                except Exception:  # a listener's failure must not fail the write path
                    log.exception("telling of the store's durability failed")
