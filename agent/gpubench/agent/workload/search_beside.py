"""The batch search in a process of its own, beside the run's start-up.

Where trials are warm (`trials.warm_applies`: torch on one GPU), a run that
searches its batch starts `workload search` as a child, then imports its own
framework while the child imports one and makes the trials (warm, in the child:
`trials.WarmTrials`); the run waits for the child only then. Two gains:

- the child makes its trials in the framework's trial environment
  (`Framework.trial_environment`; torch: cuDNN's older API, which sets up a new
  batch shape in a fraction of a second instead of seconds, with the same memory
  to the byte), which the run cannot use: those kernels train slower;
- the child's framework import overlaps the run's own.

The run touches no GPU until the child has ended, so the trials have the card to
themselves. The child's events (its phase, each batch_trial, its batch_chosen) are
relayed as they come; its trials and batch_chosen make the run's SearchResult.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from dataclasses import asdict

from gpubench.agent.workload.batch_search import NoBatchFits, SearchResult, Trial, TrialFailed
from gpubench.events import (
    MESSAGE_LIMIT,
    BatchChosen,
    BatchTrial,
    ErrorEvent,
    EventSink,
    SearchDone,
    parse_line,
)
from gpubench.settings import WORKLOAD_MODULE, RunSettings, arguments

# Not relayed: the run reports its own ending, and search_done is the `search`
# command's answer to the agent's largest-batch, not part of a run.
_NOT_RELAYED = (ErrorEvent, SearchDone)


def command(settings: RunSettings) -> list[str]:
    """The child's command line: `workload search` with the run's settings."""
    return [sys.executable, "-m", WORKLOAD_MODULE, "search", "--batch", settings.batch_rule,
            *arguments("search", asdict(settings))]


class SearchBeside:
    """One `workload search` child and the thread that relays its events.

    Use as a context manager: the child starts on entry and is killed on exit if it
    is still running (the run failed or was interrupted meanwhile)."""

    def __init__(self, settings: RunSettings, events: EventSink) -> None:
        self.settings = settings
        self.events = events
        self._process: subprocess.Popen[str] | None = None
        self._reader: threading.Thread | None = None
        self._found: list[Trial] = []
        self._errors: list[ErrorEvent] = []
        self._chosen: BatchChosen | None = None
        self.started = 0.0

    def __enter__(self) -> SearchBeside:
        self.started = time.monotonic()
        # stderr is the run's own: the child's framework messages land in the run's log.
        self._process = subprocess.Popen(command(self.settings), stdout=subprocess.PIPE,
                                         stdin=subprocess.DEVNULL, text=True)
        self._reader = threading.Thread(target=self._relay, name="search-beside", daemon=True)
        self._reader.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        if self._process is not None and self._process.poll() is None:
            self._process.kill()
            self._process.wait()
        if self._reader is not None:
            self._reader.join(timeout=5)

    def _relay(self) -> None:
        assert self._process is not None and self._process.stdout is not None
        for line in self._process.stdout:
            event = parse_line(line)
            if event is None:
                if line.strip():
                    sys.stderr.write(line)
                continue
            if isinstance(event, BatchTrial):
                self._found.append(Trial.from_event(event))
            elif isinstance(event, BatchChosen):
                self._chosen = event
            elif isinstance(event, ErrorEvent):
                self._errors.append(event)
            if not isinstance(event, _NOT_RELAYED):
                self.events.emit(event)  # with the child's t: the same clock

    def result(self) -> tuple[int, SearchResult]:
        """Wait for the child; the batch it chose and what its search found.

        NoBatchFits when even the smallest batch ran out of memory; TrialFailed when
        the child failed otherwise."""
        assert self._process is not None and self._reader is not None
        code = self._process.wait()
        self._reader.join()
        if self._chosen is not None and code == 0:
            chosen = self._chosen
            return chosen.batch, SearchResult.from_summary(chosen.search, self._found)
        last = self._errors[-1] if self._errors else None
        message = (last.message if last is not None
                   else f"the search process ended with exit {code} and no answer")
        if last is not None and last.status == "out_of_memory":
            raise NoBatchFits(message[:MESSAGE_LIMIT])
        raise TrialFailed(f"the batch search failed: {message}"[:MESSAGE_LIMIT])

    @property
    def seconds(self) -> float:
        """Since the child started."""
        return time.monotonic() - self.started
