"""The memory this process may use, and whether the kernel killed a process for lack of it.

A container or a service's cgroup can allow far less memory than the host has (8 GiB of
a 24 GiB host, say). When a workload passes that, the kernel's out-of-memory killer ends
it with SIGKILL, which looks like any other kill; the cgroup counts it. Read from:

- cgroup v2: `memory.events` (its `oom_kill` line) and `memory.max` of this process's
  cgroup (`0::/path` in /proc/self/cgroup);
- cgroup v1: `memory.oom_control` (`oom_kill`) and `memory.limit_in_bytes` of its memory
  cgroup (`N:memory:/path`);
- neither: /proc/vmstat's `oom_kill`, the whole host's count, and no limit.

The workload child of the local runner stays in the agent's cgroup, so the counter seen
before and after it ran tells whether the kernel killed something there meanwhile.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")
# cgroup v1 writes "no limit" as a page-rounded 2**63 - 1: any limit past this is none.
NO_LIMIT = 1 << 60


@dataclass(frozen=True)
class MemoryCgroup:
    """Where this process's out-of-memory kills are counted and its memory limit is."""

    counter: Path | None  # a file with an "oom_kill N" line
    limit_file: Path | None = None  # a file holding the limit in bytes ("max": none)

    def oom_kills(self) -> int | None:
        """Processes the kernel has killed for memory so far (None: not readable)."""
        if self.counter is None:
            return None
        try:
            for line in self.counter.read_text().splitlines():
                name, _, value = line.partition(" ")
                if name == "oom_kill":
                    return int(value)
        except (OSError, ValueError):
            return None
        return None

    def limit_bytes(self) -> int | None:
        """The most memory this cgroup may use, in bytes (None: no limit, or unread)."""
        if self.limit_file is None:
            return None
        try:
            text = self.limit_file.read_text().strip()
            limit = None if text == "max" else int(text)
        except (OSError, ValueError):
            return None
        return limit if limit is not None and limit < NO_LIMIT else None


def this_cgroup(proc_cgroup: Path = Path("/proc/self/cgroup"),
                root: Path = CGROUP_ROOT) -> MemoryCgroup:
    """The memory cgroup this process is in (see the module's docstring)."""
    try:
        lines = proc_cgroup.read_text().splitlines()
    except OSError:
        lines = []
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if "memory" in controllers.split(","):  # v1
            folder = root / "memory" / path.lstrip("/")
            if (folder / "memory.oom_control").exists():
                return MemoryCgroup(folder / "memory.oom_control",
                                    folder / "memory.limit_in_bytes")
    for line in lines:
        hierarchy, _, path = line.split(":", 2)
        folder = root / path.lstrip("/")
        if hierarchy == "0" and (folder / "memory.events").exists():  # v2
            return MemoryCgroup(folder / "memory.events", folder / "memory.max")
    vmstat = Path("/proc/vmstat")
    return MemoryCgroup(vmstat if vmstat.exists() else None)


def usable_memory(host_bytes: int, cgroup: MemoryCgroup | None = None) -> int:
    """The memory this process may use: the host's, or its cgroup's limit where lower."""
    limit = (cgroup or this_cgroup()).limit_bytes()
    return min(host_bytes, limit) if limit and host_bytes else (limit or host_bytes)


def killed_for_memory(usable_bytes: int, host_bytes: int) -> str:
    """Why a workload the kernel killed for memory died, and what to try."""
    gib = 1 << 30
    room = (f"this process may use {usable_bytes / gib:.1f} GiB of the host's "
            f"{host_bytes / gib:.0f} GiB (its cgroup's limit)"
            if usable_bytes and host_bytes and usable_bytes < host_bytes
            else f"the host has {host_bytes / gib:.0f} GiB" if host_bytes else "")
    return ("the kernel's out-of-memory killer ended it: the workload needed more memory "
            "than it may use" + (f" ({room})" if room else "") + ". Try a smaller run "
            "(--image-size 64 --train-images 192 --batch 16), or give it more memory "
            "(docker run --memory, or stop what else uses it)")
