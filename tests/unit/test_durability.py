"""Which failures say "the storage cannot write now" (retryable) and which are bugs."""

from __future__ import annotations

import errno

import duckdb
import pytest

from gpubench.collector.durability import Durability, storage_error
from gpubench.collector.errors import StorageFull, StorageUnavailable


@pytest.mark.parametrize(
    "error",
    [OSError(errno.ENOSPC, "No space left on device"), OSError(errno.EDQUOT, "Disk quota exceeded"),
     duckdb.TransactionException('Failed to commit: Could not write file "x.wal": No space left '
                                 "on device")],
    ids=["ENOSPC", "EDQUOT", "duckdb"],
)
def test_a_full_disk_is_storage_full(error: Exception) -> None:
    found = storage_error(error, "storing runs in /x")
    assert isinstance(found, StorageFull)
    assert "no space left on device (storing runs in /x)" in str(found)


def test_other_io_errors_are_storage_unavailable() -> None:
    found = storage_error(OSError(errno.EIO, "Input/output error"), "writing /x")
    assert type(found) is StorageUnavailable
    assert "Input/output error (writing /x)" in str(found)


@pytest.mark.parametrize(
    "error", [ValueError("bad"), KeyError("run_id"), duckdb.BinderException("no column x")]
)
def test_bugs_are_not_storage_errors(error: Exception) -> None:
    assert storage_error(error, "writing /x") is None


def test_listeners_hear_each_change_once() -> None:
    heard: list[str | None] = []
    durability = Durability()
    durability.listen(heard.append)
    full = StorageFull("cannot store runs now: no space left on device (x)")
    assert durability.failed(full)
    assert not durability.failed(full)
    durability.recovered()
    durability.recovered()
    assert [h is None for h in heard] == [True, False, True]
