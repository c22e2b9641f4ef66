"""`python -m gpubench.agent.workload ...` (see cli)."""

from gpubench.agent.workload.cli import entry

entry()
