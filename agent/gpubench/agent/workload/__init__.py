"""The standard benchmark workload: EfficientNet B0/B3/B7 on rock-paper-scissors.

Runs only in its own process (`python -m gpubench.agent.workload run ...`) or in
the workload container, and talks to the agent through JSON-lines events on
stdout (gpubench.events). Its settings are gpubench.settings, which the agent
reads too; the workload imports nothing else of the agent. Importing this package
or its batch-size search does not import Keras or a framework.
"""
