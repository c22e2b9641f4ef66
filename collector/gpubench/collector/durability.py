"""Whether the store can make writes durable now, and who must know when that changes.

A full disk (or a failing one) must not look like a bug: the store turns the errors
of its database writes into `StorageFull` or `StorageUnavailable` (retryable status
codes with a clear message), and keeps here why it cannot write: logged once when it
begins and once when it ends. The health service listens: NOT_SERVING meanwhile,
SERVING again once writes have held for HOLD_S with none failing (the store tries by
itself every second meanwhile: collector.store).

Why a hold: a write that fails for want of space is rolled back, which gives back what
it took, and the next write, or the store's own try, may fit in just that while the disk
is still full. Ending there would log the same full disk twice or more.
"""

from __future__ import annotations

import errno
import logging
import threading
import time
from collections.abc import Callable

import duckdb

from gpubench.collector.errors import StorageFull, StorageUnavailable

log = logging.getLogger(__name__)

# How long no write (nor the store's try) may have failed before writes are durable
# again (s): longer than the store's tries are apart (store.RETRY_S), so that a full disk
# fails one of them within it.
HOLD_S = 2.0

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
    """Why the store cannot write durably now (None: it can), and the listeners told
    of each change: one when writes first fail, one when they have held again for
    `hold_s` (time read from `clock`)."""

    def __init__(self, *, hold_s: float = HOLD_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        # Held while changing and telling, so that listeners hear the changes in order.
        self._lock = threading.Lock()
        self._hold_s = hold_s
        self._clock = clock
        self.trouble: str | None = None
        self._failed_at = 0.0  # when a write last failed (clock)
        self._listeners: list[Callable[[str | None], None]] = []

    def failed(self, error: StorageUnavailable) -> bool:
        """A write failed with `error`; True when writes worked before (it is logged).
        While they already do not, it says nothing more and starts the hold again."""
        with self._lock:
            self._failed_at = self._clock()
            new = self.trouble is None
            self.trouble = str(error)
            if new:
                log.error("%s; health is NOT_SERVING until writes succeed again", error)
                self._tell()
        return new

    def recovered(self) -> bool:
        """A write was made durable; True when that ends the trouble (it is logged): no
        write has failed for `hold_s`. Before that it says nothing (see the module)."""
        with self._lock:
            if self.trouble is None or self._clock() - self._failed_at < self._hold_s:
                return False
            self.trouble = None
            log.warning("writes are durable again; health is SERVING")
            self._tell()
        return True

    def listen(self, listener: Callable[[str | None], None]) -> None:
        """Call `listener(trouble)` now and at every change."""
        with self._lock:
            self._listeners.append(listener)
            listener(self.trouble)

    def _tell(self) -> None:
        for listener in self._listeners:
            try:
                listener(self.trouble)
            except Exception:  # a listener's failure must not fail the write path
                log.exception("telling of the store's durability failed")
