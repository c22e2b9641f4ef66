"""Fixtures of the workload tests: the real `python -m gpubench.agent.workload` as a child.

- `workload`: runs the workload CLI with a private dataset cache and returns what it
  wrote: its events (every stdout line must be one), stderr and exit code.
- `image_folder`: writes a small dataset folder of real PNGs (one sub-folder per class).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from workload_helpers import write_png

from gpubench.events import Event, parse_line


@dataclass(frozen=True)
class Finished:
    """A finished workload process."""

    returncode: int
    events: list[Event]
    stderr: str

    def of(self, kind: str) -> list[Event]:
        """The events of one kind, in order."""
        return [e for e in self.events if e.kind == kind]

    def one(self, kind: str) -> Event:
        """The only event of `kind` (fails the test if there is not exactly one)."""
        found = self.of(kind)
        assert len(found) == 1, (
            f"expected one {kind!r} event, got {len(found)}: {self.stderr[-2000:]}"
        )
        return found[0]


@pytest.fixture(scope="session")
def dataset_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A private $GPUBENCH_CACHE for the session (the synthetic set is generated there)."""
    return tmp_path_factory.mktemp("gpubench-cache")


@pytest.fixture(scope="session")
def workload(dataset_cache: Path) -> Callable[..., Finished]:
    """Run `python -m gpubench.agent.workload ARGS...` and collect its events."""

    def run(*args: str, env: dict[str, str] | None = None, timeout: float = 300) -> Finished:
        environment = {**os.environ, "GPUBENCH_CACHE": str(dataset_cache), **(env or {})}
        done = subprocess.run(
            [sys.executable, "-m", "gpubench.agent.workload", *args],
            capture_output=True, text=True, timeout=timeout, env=environment, check=False,
        )
        events = []
        for line in done.stdout.splitlines():
            event = parse_line(line)
            # The stream is the workload's only stdout: a stray print is a failure.
            assert event is not None, f"not an event on stdout: {line!r}"
            events.append(event)
        return Finished(done.returncode, events, done.stderr)

    return run


@pytest.fixture
def image_folder(tmp_path: Path) -> Callable[..., Path]:
    """Make a dataset folder: `image_folder({"rock": 4, "paper": 4})` -> its path."""

    def make(counts: dict[str, int], name: str = "images") -> Path:
        root = tmp_path / name
        for c, (class_name, count) in enumerate(sorted(counts.items())):
            for i in range(count):
                write_png(root / class_name / f"{i:03d}.png", seed=100 * c + i)
            (root / class_name).mkdir(parents=True, exist_ok=True)
        return root

    return make
