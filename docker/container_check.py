#!/usr/bin/env python3
"""Notes printed before `gpubench-agent run` or `push` starts in the agent or workload image.

Two mistakes that a container makes easy and the agent cannot see from inside it:

- The spool is not on a volume: a run the collector did not take waits in the spool,
  and with `docker run --rm` the spool goes with the container. Say so, with the flag
  that keeps it.
- The collector is given as 127.0.0.1 (or localhost), and nothing answers there: inside
  a container on docker's own network that is the container itself, not the host. Say
  how a collector on the same host is reached. (With --network host it is the host's,
  and a collector there answers: nothing is printed.)

Only notes on stderr: the exit status is always 0 and the command runs as given. Standard
library only (it runs before anything else, in either image).

    gpubench-container-check gpubench-agent run --collector 127.0.0.1:50051 ...
"""

from __future__ import annotations

import os
import socket
import sys
import textwrap

SPOOL_ENV = "GPUBENCH_SPOOL"
COLLECTOR_ENV = "GPUBENCH_COLLECTOR"
MOUNTINFO = "/proc/self/mountinfo"
CONNECT_TIMEOUT_S = 1.0
WIDTH = 79
LOOPBACK_NAMES = ("localhost", "ip6-localhost", "ip6-loopback")
NBSP = "\u00a0"  # textwrap does not break lines there


def together(words: str) -> str:
    """`words` kept on one line when the note is wrapped (a flag and its value)."""
    return words.replace(" ", NBSP)


def option(args: list[str], name: str) -> str | None:
    """The value of the last `--name VALUE` or `--name=VALUE` in args (later flags win)."""
    value = None
    for i, arg in enumerate(args):
        if arg == name and i + 1 < len(args):
            value = args[i + 1]
        elif arg.startswith(name + "="):
            value = arg[len(name) + 1 :]
    return value


def mount_points(mountinfo: str = MOUNTINFO) -> list[str]:
    """The mount points of this process's mount namespace (the fifth field of each line)."""
    try:
        with open(mountinfo, encoding="utf-8") as lines:
            # Spaces in a mount point are written as \040.
            return [line.split()[4].replace("\\040", " ") for line in lines if line.strip()]
    except OSError:
        return []


def on_a_mount(path: str, mounts: list[str]) -> bool:
    """Whether `path` is at or under a mount point other than the root (a volume, a bind)."""
    path = os.path.normpath(os.path.abspath(path))
    return any(m != "/" and (path == m or path.startswith(m.rstrip("/") + "/")) for m in mounts)


def loopback_host(address: str) -> str | None:
    """The host of HOST:PORT when it names this machine's loopback, else None."""
    host = address.rpartition(":")[0] or address
    host = host.strip("[]")
    if host.lower() in LOOPBACK_NAMES or host.startswith("127.") or host == "::1":
        return host
    return None


def answers(address: str, timeout: float = CONNECT_TIMEOUT_S) -> bool:
    """Whether something accepts a TCP connection at HOST:PORT."""
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout):
            return True
    except (OSError, ValueError):
        return False


def notes(command: list[str], env: dict[str, str], mounts: list[str]) -> list[str]:
    """What to tell the user before `command` (gpubench-agent run|push ...) runs."""
    found: list[str] = []
    verb, args = command[1], command[2:]
    spool = option(args, "--spool") or env.get(SPOOL_ENV)
    if spool and not on_a_mount(spool, mounts):
        mount = together(f"-v gpubench-spool:{spool}")
        if verb == "push":
            found.append(
                f"note: the spool {spool} is inside this container, not on a volume: it "
                "holds no run of an earlier container. Mount the volume the runs were kept "
                f"on: docker run {mount} ..."
            )
        else:
            found.append(
                f"note: the spool {spool} is inside this container, not on a volume: a "
                "run the collector has not taken is lost when the container is removed "
                f"(--rm). Keep it on a volume: docker run {mount} ..."
            )
    offline = "--offline" in args
    collector = None if offline else option(args, "--collector") or env.get(COLLECTOR_ENV)
    if collector and loopback_host(collector) and not answers(collector):
        found.append(
            f"note: nothing answers at {collector} in this container. On docker's own "
            "network 127.0.0.1 is the container itself, not the host: reach a collector "
            f"on this host with {together('--network host')}, or, started with "
            f"docker/compose.yaml, as {together('--network gpubench')} "
            f"{together('--collector collector:50051')}."
        )
    return found


def main(argv: list[str] | None = None) -> int:
    """Print the notes for the command in argv; always exit 0."""
    command = sys.argv[1:] if argv is None else argv
    if command[:1] != ["gpubench-agent"] or command[1:2] not in (["run"], ["push"]):
        return 0
    if any(arg in ("-h", "--help") for arg in command[2:]):
        return 0
    for note in notes(command, dict(os.environ), mount_points()):
        # Whole words and paths on a line: a flag broken at its hyphen cannot be copied.
        text = textwrap.fill(note, WIDTH, break_on_hyphens=False, break_long_words=False)
        print(text.replace(NBSP, " "), file=sys.stderr)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Exception as exc:  # a note must never stop the agent
        print(f"gpubench-container-check: {exc}", file=sys.stderr)
        sys.exit(0)
