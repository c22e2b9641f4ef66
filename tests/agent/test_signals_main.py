"""Threads the agent starts leave Ctrl-C and SIGTERM to its main thread: read from the
kernel's own account of each thread's blocked signals (/proc/self/task/TID/status)."""

from __future__ import annotations

import signal
import threading
from pathlib import Path

import pytest

from gpubench.agent.signals_main import threads_leave_signals

pytestmark = pytest.mark.skipif(not Path("/proc/self/task").exists(), reason="needs /proc")


def blocked(tid: int) -> set[int]:
    """The signals thread `tid` of this process blocks (SigBlk, a hex mask)."""
    for line in Path(f"/proc/self/task/{tid}/status").read_text().splitlines():
        if line.startswith("SigBlk:"):
            mask = int(line.split()[1], 16)
            return {n for n in range(1, 65) if mask & (1 << (n - 1))}
    raise AssertionError("no SigBlk line")


def test_a_thread_started_inside_blocks_the_signals_and_the_main_thread_does_not() -> None:
    seen: dict[str, set[int]] = {}
    go_on = threading.Event()

    def inside() -> None:
        seen["inside"] = blocked(threading.get_native_id())
        go_on.wait(10)

    with threads_leave_signals():
        thread = threading.Thread(target=inside)
        thread.start()
    outside = threading.Thread(target=lambda: seen.setdefault(
        "outside", blocked(threading.get_native_id())))
    outside.start()
    outside.join(10)
    go_on.set()
    thread.join(10)
    assert {signal.SIGINT, signal.SIGTERM} <= seen["inside"]
    assert not {signal.SIGINT, signal.SIGTERM} & seen["outside"]
    assert not {signal.SIGINT, signal.SIGTERM} & blocked(threading.get_native_id())


def test_a_signal_that_came_meanwhile_is_taken_once_it_ends() -> None:
    taken: list[int] = []
    previous = signal.signal(signal.SIGTERM, lambda signum, _: taken.append(signum))
    try:
        with threads_leave_signals():
            signal.raise_signal(signal.SIGTERM)
            assert taken == []  # held
        assert taken == [signal.SIGTERM]
    finally:
        signal.signal(signal.SIGTERM, previous)
