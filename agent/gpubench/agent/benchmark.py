"""One `gpubench-agent run`: each model in turn, measured, spooled, pushed.

For each model: wait (bounded) for idle, cool GPUs; start the sampler and the
workload; follow its events; build the run record however the workload ended;
write it to the spool; then push it if a collector is configured (and the
pre-flight check reached it). A Ctrl-C stops the workload, records that run as
interrupted, pushes nothing more and skips the models after it; the spool keeps
everything.
"""

from __future__ import annotations

import contextlib
import signal
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import IO, Any

from gpubench.agent.assemble import RunBuilder
from gpubench.agent.display import RunDisplay
from gpubench.agent.inventory import Inventory
from gpubench.agent.nvml import Nvml
from gpubench.agent.push import FreshConnection, PushReport, RetryPolicy, push_one
from gpubench.agent.runners.base import Outcome, Runner, WorkloadRequest
from gpubench.agent.spool import Spool
from gpubench.agent.telemetry import (
    DEFAULT_SAMPLE_HZ,
    IdleReport,
    Sampler,
    Tick,
    wait_for_idle,
)
from gpubench.errors import GpubenchError
from gpubench.settings import DEFAULT_EPOCHS, EXIT_REFUSED
from gpubench.v1 import run_pb2

# How many times a model runs again, each at a smaller batch, after running out of
# memory at a batch the search chose.
RETRIES = 2


@dataclass(frozen=True)
class IdleRule:
    """The pre-run wait: at most `timeout` s for GPUs under both limits."""

    timeout: float = 60.0
    max_utilization: float = 5.0
    max_temperature: float = 50.0


@dataclass
class BenchmarkOutcome:
    """What a `run` produced."""

    runs: list[run_pb2.Run] = field(default_factory=list)
    interrupted: bool = False
    push: PushReport | None = None  # None: offline


@contextlib.contextmanager
def sigint_ignored() -> Iterator[None]:
    """Let a stop finish: a second Ctrl-C must not leave a workload behind."""
    try:
        previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    except ValueError:  # not the main thread: nothing to protect
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


class Benchmark:
    """Runs the models of one `gpubench-agent run`."""

    def __init__(
        self,
        *,
        runner: Runner,
        spool: Spool,
        inventory: Inventory,
        nvml: Nvml | None,
        display: RunDisplay,
        gpu_count: int,
        sample_hz: float = DEFAULT_SAMPLE_HZ,
        idle: IdleRule = IdleRule(),
        label: str = "",
        trace: IO[str] | None = None,
        client_factory: Callable[[], Any] | None = None,
        retry: RetryPolicy | None = None,
        log_dir: Path | None = None,
        unreachable: GpubenchError | None = None,
    ) -> None:
        self.runner = runner
        self.spool = spool
        self.inventory = inventory
        self.nvml = nvml
        self.display = display
        self.gpu_indices: tuple[int, ...] = tuple(range(gpu_count)) if nvml is not None else ()
        self.sample_hz = sample_hz
        self.idle = idle
        self.label = label
        self.trace = trace
        self.client_factory = client_factory
        self.retry = retry or RetryPolicy()
        self.log_dir = log_dir
        # The pre-flight check found the collector unreachable: the runs wait in the
        # spool, as it said, rather than each retrying the push for seconds.
        self.unreachable = unreachable
        self._client: Any = None

    def run(self, requests: Sequence[WorkloadRequest]) -> BenchmarkOutcome:
        """Run every request in turn (stopping at a Ctrl-C)."""
        outcome = BenchmarkOutcome(
            push=PushReport(stopped=self.unreachable) if self.client_factory else None)
        epochs = max(request.setting("epochs") or DEFAULT_EPOCHS for request in requests)
        self.display.suite_started([request.model for request in requests], epochs)
        try:
            for index, request in enumerate(requests):
                run, interrupted = self.run_one(request, index)
                if run is not None:
                    outcome.runs.append(run)
                if run is not None and not interrupted:
                    # A Ctrl-C while the push waits to retry ends the run at once: the
                    # record is in the spool already.
                    try:
                        self._push(run, outcome)
                    except KeyboardInterrupt:
                        interrupted = True
                if interrupted:
                    outcome.interrupted = True
                    break
        finally:
            if self._client is not None:
                self._client.close()
        if outcome.push is not None:
            outcome.push.left = len(self.spool.pending())
        return outcome

    def _push(self, run: run_pb2.Run, outcome: BenchmarkOutcome) -> None:
        report = outcome.push
        if report is None or report.stopped is not None or self.client_factory is None:
            return  # offline, or the collector already failed us in this run
        entry = next((e for e in self.spool.pending() if e.path.stem == run.run_id), None)
        if entry is None:
            return
        if self._client is None:
            self._client = FreshConnection(self.client_factory)

        def retrying(attempt: int, pause: float, error: GpubenchError) -> None:
            self.display.note(f"push: {error}; trying again in {pause:.1f} s", style="yellow")

        refused = len(report.refused)
        push_one(self.spool, entry, self._client, report, self.retry, on_retry=retrying)
        if len(report.refused) > refused:
            name, reason = report.refused[-1]
            self.display.note(f"push: {reason} (moved to {self.spool.root / 'refused' / name})",
                              style="red")
        elif report.stopped is not None:
            self.display.note(f"push: {report.stopped} (the run stays in {self.spool.root})",
                              style="red")
        elif report.sent and report.sent[-1] == run.run_id:
            self.display.note(f"{run.config.model}: sent to the collector (run {run.run_id})")

    def _wait_for_idle(self, builder: RunBuilder) -> IdleReport | None:
        if self.nvml is None or not self.gpu_indices:
            return None
        rule = self.idle
        self.display.note(
            f"waiting (at most {rule.timeout:.0f} s) for the GPU to be idle and under "
            f"{rule.max_temperature:.0f} C"
        )
        report = wait_for_idle(
            self.nvml, self.gpu_indices, timeout=rule.timeout,
            max_utilization=rule.max_utilization, max_temperature=rule.max_temperature,
        )
        if not report.reached:
            warning = report.warning(rule.max_utilization, rule.max_temperature)
            builder.warn(warning)
            self.display.note(warning, style="yellow")
        return report

    def run_one(self, request: WorkloadRequest, index: int = 0
                ) -> tuple[run_pb2.Run | None, bool]:
        """One model (the `index`-th of the run): its record, and whether the person
        interrupted. The record is None only when the interrupt came before the
        workload started. A run that runs out of memory at a batch the search chose
        runs again at the next smaller confirmed one (at most RETRIES times)."""
        builder = RunBuilder(request, self.inventory, label=self.label,
                             gpu_indices=self.gpu_indices)
        try:
            idle = self._wait_for_idle(builder)
        except KeyboardInterrupt:
            return None, True
        attempt = request
        began = time.monotonic()
        for retry in range(RETRIES + 1):
            ended, ticks, interrupted = self._attempt(builder, attempt, index, retry)
            if interrupted or request.batch is not None or retry == RETRIES:
                break
            ending = builder.ending(ended)
            smaller = builder.retry_batch(ending)
            if smaller is None:
                break
            self.display.note(f"{request.model}: batch {builder.started_batch} ran out of "
                              f"memory in the run; running again at batch {smaller}",
                              style="yellow")
            builder.begin_retry(ending, smaller)
            attempt = replace(request, batch=smaller, batch_rule="given")
        if ended.exit_code == EXIT_REFUSED and not interrupted:
            # The model cannot be fed: said before any training, and no run to keep.
            raise GpubenchError(f"{request.model}: " + (builder.error.message if builder.error
                                                       else "refused by the workload"),
                                exit_code=EXIT_REFUSED)
        with sigint_ignored():
            run = builder.build(ended, ticks, idle)
            run.result.total_seconds = time.monotonic() - began
            path = self.spool.write(run)
        status = run_pb2.RunStatus.Name(run.result.status).removeprefix("RUN_STATUS_").lower()
        style = "green" if status == "ok" else "red"
        self.display.note(f"{request.model}: {status}"
                          + (f" ({run.result.error_message.splitlines()[0]})"
                             if run.result.error_message else "")
                          + f"; saved {path}", style=style)
        for note in builder.telemetry_notes:
            self.display.note(f"{request.model}: warning: {note}", style="yellow")
        if ended.log_path is not None and status != "ok":
            self.display.note(f"{request.model}: the workload's output is in {ended.log_path}")
        return run, interrupted

    def _attempt(self, builder: RunBuilder, request: WorkloadRequest, index: int,
                 retry: int) -> tuple[Outcome, Sequence[Tick], bool]:
        """One workload process for `request`, its events into `builder`, sampled."""
        name = builder.run_id + (f".retry{retry}" if retry else "")
        log_path = self.log_dir / f"{name}.log" if self.log_dir else None
        interrupted = False
        with self.runner.start(request, log_path=log_path) as workload:
            if self.nvml is not None and workload.pid is not None:
                self.nvml.follow_workload(workload.pid)
            sampler = Sampler(
                self.nvml, self.gpu_indices, hz=self.sample_hz, workload_pids=workload.pids,
                trace=self.trace, trace_fields={"run_id": builder.run_id, "model": request.model},
            ) if self.nvml is not None else None
            self.display.model_started(request.model, request.setting("epochs") or DEFAULT_EPOCHS,
                                       sampler.latest if sampler else lambda: None, index)
            try:
                if sampler is not None:
                    sampler.start()
                for event in workload.events():
                    builder.add(event)
                    self.display.event(event)
            except KeyboardInterrupt:
                interrupted = True
                with sigint_ignored():
                    self.display.model_finished()
                    self.display.note(f"{request.model}: stopping the workload (Ctrl-C)",
                                      style="yellow")
                    workload.stop()
            finally:
                with sigint_ignored():
                    if sampler is not None:
                        sampler.stop()
                    self.display.model_finished()
            with sigint_ignored():
                ended = workload.wait()
        if sampler is not None and sampler.error:
            builder.warn(f"GPU sampling stopped early ({sampler.error})")
        return ended, (sampler.ticks if sampler else ()), interrupted
