"""Runners: where the workload runs (a child process, or the workload container).

Each implements base.Runner; the agent only asks a runner to get ready, probe the
workload's builds and start workloads, and then reads a workload's event stream and asks
it to stop. RUNNERS, the registry, names them: --runner offers its names, and a new
runner is one module plus one entry here.
"""

from __future__ import annotations

from gpubench.agent.runners.base import (
    Outcome,
    Runner,
    RunnerOptions,
    SearchRequest,
    Workload,
    WorkloadRequest,
)
from gpubench.agent.runners.docker import DockerRunner
from gpubench.agent.runners.local import LocalRunner

# --runner's values, the default first. Neither module imports more than the standard
# library at import time (the docker SDK and psutil are imported where they are used),
# so --help stays quick.
RUNNERS: dict[str, type[Runner]] = {runner.name: runner for runner in (LocalRunner,
                                                                        DockerRunner)}
DEFAULT_RUNNER = LocalRunner.name


def make_runner(name: str, options: RunnerOptions) -> Runner:
    """The runner registered as `name`, made from the command line's options."""
    return RUNNERS[name].from_options(options)


__all__ = ["DEFAULT_RUNNER", "RUNNERS", "Outcome", "Runner", "RunnerOptions", "SearchRequest",
           "Workload", "WorkloadRequest", "make_runner"]
