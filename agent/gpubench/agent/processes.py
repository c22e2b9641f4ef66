"""Process trees: which processes belong to the workload (the one module using psutil)."""

from __future__ import annotations


def process_tree(pid: int) -> frozenset[int]:
    """`pid` and all its descendants that are alive now (empty if `pid` is gone)."""
    import psutil

    try:
        root = psutil.Process(pid)
        children = root.children(recursive=True)
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return frozenset()
    return frozenset([pid, *(child.pid for child in children)])
