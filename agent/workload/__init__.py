"""The standard benchmark workload: EfficientNet B0/B3/B7 on rock-paper-scissors.

Runs only in its own process (`python -m gpubench.agent.workload run ...`) or in
the workload container, and talks to the agent through JSON-lines events on
stdout (gpubench.events). Importing this package, its settings
(`options`) or the batch-size search does not import Keras or a framework: the
agent may read them without paying for, or being broken by, a framework.
"""
