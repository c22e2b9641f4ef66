"""Runners: where the workload runs (a child process, or the workload container).

Both implement `Runner.start(request) -> Workload` (see base.py); the agent only
reads the workload's event stream and asks it to stop.
"""

from __future__ import annotations

from gpubench.agent.runners.base import Outcome, Runner, Workload, WorkloadRequest

__all__ = ["Outcome", "Runner", "Workload", "WorkloadRequest"]
