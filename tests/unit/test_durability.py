"""Which failures say "the storage cannot write now" (retryable) and which are bugs, and
when a full disk begins and ends: once each, however writes flap in between."""

from __future__ import annotations

import errno
import logging

import duckdb
import pytest

from gpubench.collector.durability import HOLD_S, Durability, storage_error
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


FULL = StorageFull("cannot store runs now: no space left on device (x)")


class Clock:
    """Seconds that pass only when the test says so."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_listeners_hear_each_change_once() -> None:
    heard: list[str | None] = []
    clock = Clock()
    durability = Durability(clock=clock)
    durability.listen(heard.append)
    assert durability.failed(FULL)
    assert not durability.failed(FULL)
    clock.now += HOLD_S
    assert durability.recovered()
    assert not durability.recovered()
    assert [h is None for h in heard] == [True, False, True]


def test_a_full_disk_that_flaps_is_one_episode(caplog: pytest.LogCaptureFixture) -> None:
    """A failed write gives back its space and the next one fits there: writes fail and
    succeed by turns while the disk is full. One line when it begins, one when writes
    have held for the hold, and health (the listener) in step with the log."""
    caplog.set_level(logging.INFO, logger="gpubench.collector.durability")
    clock = Clock()
    durability = Durability(hold_s=2.0, clock=clock)
    heard: list[bool] = []
    durability.listen(lambda trouble: heard.append(trouble is None))
    assert durability.failed(FULL)
    for _ in range(5):  # the disk still full: a write fits in what the last one gave back
        clock.now += 0.3
        assert not durability.recovered()
        assert durability.trouble is not None
        clock.now += 0.3
        assert not durability.failed(FULL)
    clock.now += 1.9  # space freed: writes hold, but not yet for 2 s
    assert not durability.recovered()
    clock.now += 0.1
    assert durability.recovered()
    assert durability.trouble is None
    assert [r.levelname for r in caplog.records] == ["ERROR", "WARNING"]
    assert "no space left on device" in caplog.records[0].getMessage()
    assert "writes are durable again" in caplog.records[1].getMessage()
    assert heard == [True, False, True]


def test_a_failure_within_the_hold_starts_it_again() -> None:
    clock = Clock()
    durability = Durability(hold_s=2.0, clock=clock)
    durability.failed(FULL)
    clock.now += 1.5
    assert not durability.recovered()
    assert not durability.failed(FULL)  # not logged again
    clock.now += 1.5  # 3 s since it began, 1.5 s since the last failure
    assert not durability.recovered()
    clock.now += 0.5
    assert durability.recovered()


def test_a_failure_after_the_end_is_a_new_episode(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="gpubench.collector.durability")
    clock = Clock()
    durability = Durability(hold_s=2.0, clock=clock)
    durability.failed(FULL)
    clock.now += 2.0
    assert durability.recovered()
    clock.now += 60.0
    assert durability.failed(FULL)
    assert [r.levelname for r in caplog.records] == ["ERROR", "WARNING", "ERROR"]
