"""The local runner: the workload in a child process of the agent.

The child runs in its own session (process group), so a Ctrl-C in the terminal
reaches only the agent, which then stops the child in order: SIGINT (the
framework may finish its step), SIGTERM, SIGKILL, each after a timeout, sent to
the whole group so the batch-search trials stop too.
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path

from gpubench.agent.inventory import ram_bytes
from gpubench.agent.memory_cgroup import (
    MemoryCgroup,
    killed_for_memory,
    this_cgroup,
    usable_memory,
)
from gpubench.agent.processes import process_tree
from gpubench.agent.runners.base import (
    Outcome,
    OutputLog,
    Runner,
    RunnerOptions,
    SearchRequest,
    Workload,
    WorkloadRequest,
    events_from_lines,
)
from gpubench.agent.signals_main import threads_leave_signals
from gpubench.errors import GpubenchError
from gpubench.events import Event
from gpubench.settings import WORKLOAD_MODULE

# Seconds to wait after SIGINT, then after SIGTERM, before the next signal: a Ctrl-C
# ends the agent within 2 s whatever the workload is doing (a framework inside a long
# kernel or graph build reads SIGINT only when it is back in Python). The run is
# recorded by the agent, not the workload, so nothing is lost.
STOP_TIMEOUTS = (0.5, 0.5)
# For development and tests: run this command (shell words) as the workload instead.
WORKLOAD_COMMAND_ENV = "GPUBENCH_WORKLOAD_COMMAND"
# Seconds the workload may take to say what it was built for (a CUDA build of torch is
# imported to read its architecture list).
PROBE_TIMEOUT = 120.0


def workload_command() -> list[str]:
    """The command that runs the workload: $GPUBENCH_WORKLOAD_COMMAND where it is set,
    else `python -m gpubench.agent.workload` in this Python."""
    command = os.environ.get(WORKLOAD_COMMAND_ENV)
    return shlex.split(command) if command else [sys.executable, "-m", WORKLOAD_MODULE]


class LocalWorkload(Workload):
    """A workload child process."""

    def __init__(
        self,
        command: Sequence[str],
        *,
        log_path: Path | None,
        env: dict[str, str] | None,
        stop_timeouts: tuple[float, float],
        memory: MemoryCgroup | None = None,
    ) -> None:
        self._log = OutputLog(log_path)
        self._stop_timeouts = stop_timeouts
        self._interrupted = False
        # The kernel's count of out-of-memory kills before the child starts: a SIGKILL
        # the agent did not send, with the count grown, was the kernel's for memory.
        self._memory = memory or this_cgroup()
        self._oom_kills = self._memory.oom_kills()
        try:
            self._process = subprocess.Popen(
                list(command),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                encoding="utf-8",
                errors="replace",
                bufsize=1,
                env=env,
                start_new_session=True,
            )
        except OSError as exc:
            self._log.close()
            raise GpubenchError(
                f"cannot start the workload ({command[0]}: {exc.strerror})"
            ) from None
        self._stderr_thread = threading.Thread(
            target=self._copy_stderr, name="workload-stderr", daemon=True
        )
        with threads_leave_signals():
            self._stderr_thread.start()

    @property
    def pid(self) -> int:
        """The child's process id (its own session's leader)."""
        return self._process.pid

    def _copy_stderr(self) -> None:
        assert self._process.stderr is not None
        for line in self._process.stderr:
            self._log.write(line)

    def events(self) -> Iterator[Event]:
        assert self._process.stdout is not None
        yield from events_from_lines(iter(self._process.stdout.readline, ""), self._log)

    def pids(self) -> frozenset[int]:
        if self._process.poll() is not None:
            return frozenset()
        return process_tree(self._process.pid)

    def _signal_group(self, sig: int) -> None:
        try:
            os.killpg(self._process.pid, sig)
        except ProcessLookupError:
            pass

    def stop(self) -> None:
        self._interrupted = True
        for sig, timeout in zip(
            (signal.SIGINT, signal.SIGTERM), self._stop_timeouts, strict=True
        ):
            if self._process.poll() is not None:
                break
            self._signal_group(sig)
            try:
                self._process.wait(timeout)
            except subprocess.TimeoutExpired:
                continue
        if self._process.poll() is None:
            self._signal_group(signal.SIGKILL)
            self._process.wait()
        # Grandchildren that ignored the group signals (they share the group).
        self._signal_group(signal.SIGKILL)

    def wait(self) -> Outcome:
        code = self._process.wait()
        self._stderr_thread.join(timeout=5)
        return Outcome(
            exit_code=code if code >= 0 else None,
            signal=-code if code < 0 else None,
            interrupted=self._interrupted,
            output_tail=self._log.tail(),
            log_path=self._log.path,
            cause=self._why_killed(code),
        )

    def _why_killed(self, code: int) -> str:
        """The cause of a SIGKILL the agent did not send: the kernel's, for memory, where
        its count of such kills grew while the workload ran ('' otherwise)."""
        if code != -signal.SIGKILL or self._interrupted:
            return ""
        after = self._memory.oom_kills()
        if self._oom_kills is None or after is None or after <= self._oom_kills:
            return ("not by the agent (the kernel's out-of-memory killer is the usual one: "
                    "`dmesg` says)")
        host = ram_bytes()
        return killed_for_memory(usable_memory(host, self._memory), host)

    def close(self) -> None:
        # Whatever is left of the group (the child, or trial processes it left behind).
        self._signal_group(signal.SIGKILL)
        try:
            self._process.wait(5)
        except subprocess.TimeoutExpired:  # pragma: no cover - the kernel's business
            pass
        for stream in (self._process.stdout, self._process.stderr):
            if stream is not None:
                stream.close()
        self._stderr_thread.join(timeout=1)
        self._log.close()


class LocalRunner(Runner):
    """Runs the workload as `command + request.arguments()` in a child process."""

    name = "local"

    def __init__(
        self,
        command: Sequence[str] | None = None,
        *,
        env: dict[str, str] | None = None,
        stop_timeouts: tuple[float, float] = STOP_TIMEOUTS,
        memory: MemoryCgroup | None = None,
    ) -> None:
        self.command = list(command) if command else workload_command()
        self.env = env
        self.stop_timeouts = stop_timeouts
        self.memory = memory  # None: this process's own cgroup

    @classmethod
    def from_options(cls, options: RunnerOptions) -> LocalRunner:
        return cls(options.command or None)

    @property
    def where(self) -> str:
        return f"in the workload's Python ({self.command[0]})"

    def probe(self, gpu_count: int) -> str:
        # The child sees this host's GPUs as every workload child does.
        done = subprocess.run([*self.command, "probe", "--json"], stdin=subprocess.DEVNULL,
                              capture_output=True, text=True, timeout=PROBE_TIMEOUT,
                              check=False)
        if done.returncode != 0:
            last = (done.stderr.strip().splitlines() or [""])[-1]
            raise RuntimeError(f"`probe --json` exited with {done.returncode}: {last}")
        return done.stdout

    def start(self, request: WorkloadRequest | SearchRequest, *,
              log_path: Path | None = None) -> LocalWorkload:
        env = dict(os.environ if self.env is None else self.env)
        # Events must arrive as they are written, not when a buffer fills.
        env["PYTHONUNBUFFERED"] = "1"
        return LocalWorkload(
            [*self.command, *request.arguments()],
            log_path=log_path,
            env=env,
            stop_timeouts=self.stop_timeouts,
            memory=self.memory,
        )
