"""The collector's user-facing errors: `GpubenchError`s the service maps to gRPC codes."""

from __future__ import annotations

from typing import Any

from gpubench.errors import ExitCode, GpubenchError, RequestRefused


class RunConflict(RequestRefused):
    """A run_id already stored with different content (ALREADY_EXISTS)."""


class TokenExists(RequestRefused):
    """A token of that name exists and is not revoked (ALREADY_EXISTS)."""


class MixedRuns(RequestRefused):
    """A comparison would mix runs that are not alike (FAILED_PRECONDITION)."""

    # The dimensions they differ in, as data (compare.MixedDimension each).
    mixed: tuple[Any, ...] = ()


class DatabaseLocked(GpubenchError):
    """Another process (a running collector) holds the database file."""

    exit_code = ExitCode.UNAVAILABLE


class SchemaTooNew(GpubenchError):
    """The database was written by a newer collector."""

    exit_code = ExitCode.BAD_DATA


class SchemaUnreleased(GpubenchError):
    """The database was made by a collector from before the first release, whose schema
    this one does not know."""

    exit_code = ExitCode.BAD_DATA


class StorageUnavailable(GpubenchError):
    """Writes cannot be made durable now (an I/O error of the database file or its
    write-ahead log): nothing was acknowledged, and the same request may succeed later
    (UNAVAILABLE)."""

    exit_code = ExitCode.UNAVAILABLE


class StorageFull(StorageUnavailable):
    """The disk (or the quota) holding the database is full
    (RESOURCE_EXHAUSTED); retryable once space is freed."""


class ShuttingDown(GpubenchError):
    """The collector is stopping (its store is closing or closed): try again later, or
    another collector (UNAVAILABLE)."""

    exit_code = ExitCode.UNAVAILABLE
