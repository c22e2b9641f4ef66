"""The gpubench agent: runs the standard benchmark on a GPU host and pushes the result.

It never imports the training framework: the workload (gpubench.agent.workload)
runs in a child process or the workload container and streams JSON-lines events
back (gpubench.events).
"""
