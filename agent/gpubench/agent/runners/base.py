"""The runner interface: start the workload, read its events, stop it, learn how it ended.

A runner is where the workload runs (runners/local.py: a child process; runners/docker.py:
the workload image). The agent asks it only what this interface says: to get ready, to
probe the workload's framework builds, where that is (for the console), and to start a
workload; runners/__init__.py's registry names them for --runner.
"""

from __future__ import annotations

import abc
import collections
import signal
import threading
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, ClassVar

from gpubench.events import Event, parse_line
from gpubench.settings import RULE_STEPS, arguments

# How many lines of the workload's own output (stderr, stray stdout) are kept
# for the error message of a failed run; the whole output goes to the log file.
TAIL_LINES = 40


class GivenSettings:
    """A request's `settings`: RunSettings field names (gpubench.settings) to the values
    the user gave; a setting not in it takes the workload's default."""

    settings: Mapping[str, Any]

    def setting(self, name: str) -> Any:
        """The value given for setting `name`, or None (the workload's default)."""
        return self.settings.get(name)


@dataclass(frozen=True)
class WorkloadRequest(GivenSettings):
    """What the workload is asked to run: one model with the settings the user gave."""

    model: str
    batch: int | None = None  # None: chosen by the workload's search, by batch_rule
    batch_rule: str = RULE_STEPS  # "steps", "largest", "given" or "quick" (settings.py)
    settings: Mapping[str, Any] = field(default_factory=dict)

    def arguments(self) -> list[str]:
        """The arguments of `python -m gpubench.agent.workload run`."""
        return ["run", *arguments("run", {**self.settings, "model": self.model,
                                          "batch": self.batch,
                                          "batch_rule": self.batch_rule})]


@dataclass(frozen=True)
class SearchRequest(GivenSettings):
    """Only the batch search of one model (`workload search`): the largest batch that
    fits on the whole card, or as a card of each of `limits` bytes; no training."""

    model: str
    limits: tuple[int, ...] = ()
    settings: Mapping[str, Any] = field(default_factory=dict)

    def arguments(self) -> list[str]:
        """The arguments of `python -m gpubench.agent.workload search`."""
        args = ["search"]
        for limit in self.limits:
            args += ["--limit", str(limit)]
        return args + arguments("search", {**self.settings, "model": self.model})


@dataclass
class Outcome:
    """How the workload ended."""

    exit_code: int | None = None  # None: killed by a signal (see `signal`)
    signal: int | None = None
    interrupted: bool = False  # the agent stopped it (Ctrl-C)
    output_tail: list[str] = field(default_factory=list)  # last lines of its own output
    log_path: Path | None = None
    image: str = ""  # the container image, for the docker runner
    image_digest: str = ""
    # Why it was killed, where the runner can tell (the kernel's out-of-memory killer).
    cause: str = ""

    def describe(self) -> str:
        """e.g. 'exited with code 1', or 'was killed by SIGKILL' and its cause."""
        if self.signal is not None:
            try:
                name = signal.Signals(self.signal).name
            except ValueError:
                name = f"signal {self.signal}"
            return f"was killed by {name}" + (f": {self.cause}" if self.cause else "")
        return f"exited with code {self.exit_code}"


class OutputLog:
    """The workload's own output: written to a log file, the last lines kept."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self._tail: collections.deque[str] = collections.deque(maxlen=TAIL_LINES)
        self._lock = threading.Lock()
        self._file: IO[str] | None = None
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._file = open(path, "a", encoding="utf-8", errors="replace")  # noqa: SIM115

    def write(self, line: str) -> None:
        """Keep one line (with or without its newline)."""
        line = line.rstrip("\n")
        with self._lock:
            self._tail.append(line)
            if self._file is not None:
                self._file.write(line + "\n")
                self._file.flush()

    def record(self, line: str) -> None:
        """Keep an event line in the log file only (the tail is for the workload's own
        words): the log then tells the whole run, events and output, in order."""
        with self._lock:
            if self._file is not None:
                self._file.write(line.rstrip("\n") + "\n")
                self._file.flush()

    def tail(self) -> list[str]:
        """The last lines, oldest first."""
        with self._lock:
            return list(self._tail)

    def close(self) -> None:
        """Close the log file."""
        with self._lock:
            if self._file is not None:
                self._file.close()
                self._file = None


def events_from_lines(lines: Iterator[str], log: OutputLog) -> Iterator[Event]:
    """Events of a line stream; lines that are not events go to the log."""
    for line in lines:
        event = parse_line(line)
        if event is None:
            if line.strip():
                log.write(line)
            continue
        if event.kind != "step":  # progress ticks would drown the rest
            log.record(line)
        yield event


class Workload(abc.ABC):
    """A started workload. Use as a context manager: leaving it always cleans up."""

    @property
    @abc.abstractmethod
    def pid(self) -> int | None:
        """The host process id of the workload's main process, for NVML's process memory
        (a replayed trace reports its recorded workload's memory under it); None where
        the runner cannot say."""

    @abc.abstractmethod
    def events(self) -> Iterator[Event]:
        """The workload's events as they come; ends when its output ends."""

    @abc.abstractmethod
    def pids(self) -> frozenset[int]:
        """The host process ids of the workload now (for NVML's process memory)."""

    @abc.abstractmethod
    def stop(self) -> None:
        """Stop it (SIGINT, then SIGTERM, then SIGKILL, with timeouts); it counts as
        interrupted."""

    @abc.abstractmethod
    def wait(self) -> Outcome:
        """Wait for it to end and say how it ended."""

    def close(self) -> None:  # noqa: B027 - a workload with nothing to release keeps it
        """Release everything (kill it if it still runs, remove its container)."""

    def __enter__(self) -> Workload:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@dataclass(frozen=True)
class RunnerOptions:
    """What the command line says about where the workload runs; each runner reads the
    part that is its own."""

    gpu_count: int = 0  # the GPUs the workload trains on (0: the CPU)
    image: str = ""  # --image: the workload image ('': the runner's default)
    gpu_access: str = "auto"  # --gpu-access: how a container is given the GPUs
    command: tuple[str, ...] = ()  # replaces `python -m gpubench.agent.workload` (tests)


class Runner(abc.ABC):
    """Starts workloads, somewhere: the interface every runner implements."""

    name: ClassVar[str]  # its --runner value

    @classmethod
    @abc.abstractmethod
    def from_options(cls, options: RunnerOptions) -> Runner:
        """The runner the command line's options describe."""

    @property
    @abc.abstractmethod
    def where(self) -> str:
        """Where the workload and its framework builds are, in words for the console:
        'in the image gpubench-workload:latest', "in the workload's Python (...)"."""

    image: str = ""  # the workload image, for a runner that runs one

    def fit_to(self, gpus: Sequence[Any]) -> str | None:
        """Fit the workload to the run's GPUs (compat.Gpu) before it is probed (the
        docker runner: the workload image's tag by their compute capability); the line
        the console shows about it, or None."""
        return None

    def prepare(self) -> str | None:
        """Settle, once and before anything runs, what the runner needs (the docker
        runner: how the container gets the GPUs); the line the console shows about it,
        or None. Raises GpubenchError where workloads cannot start (NoGpuAccess, exit 2)."""
        return None

    @abc.abstractmethod
    def probe(self, gpu_count: int) -> str:
        """What `probe --json` prints where this runner runs the workload, given the
        GPUs as a workload of `gpu_count` GPUs would be. Raises NoGpuAccess (exit 2)
        where that workload would not see them; any other exception: the workload could
        not say (an image older than the probe)."""

    @abc.abstractmethod
    def start(self, request: WorkloadRequest | SearchRequest, *,
              log_path: Path | None = None) -> Workload:
        """Start the workload for `request`; its own output goes to `log_path`."""
