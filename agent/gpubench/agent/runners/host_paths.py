"""Paths as the docker engine sees them: what the agent names, mapped through its mounts.

The docker runner hands the workload container a model file's folder and the data folder
as bind mounts, and the engine reads a bind mount's source on the host. When the agent
itself runs in a container of that engine (README's agent container), the path it sees
(`/models/my.keras`) is a path inside its own container: the host's is found through the
container's mounts, as the engine's `inspect` of it lists them (`Destination` inside,
`Source` on the host; a named volume's `Source` is its folder on the host too).

A path on no mount lives in the agent container's own file system, which the engine
cannot hand to another container: NotOnAMount (exit 2) says so and what to mount.
Standard library only: the runner asks the engine and hands in its answer (a plain dict).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import PurePosixPath
from typing import Any

from gpubench.errors import ExitCode, GpubenchError


class NotOnAMount(GpubenchError):
    """A path the agent was given is not on any mount of its own container."""

    exit_code = ExitCode.USAGE


def host_path(path: str, container: Mapping[str, Any] | None, *, what: str) -> str:
    """The host's path for `path` (absolute, as this process sees it): unchanged when
    `container` (the engine's `inspect` of the agent's own container) is None, else
    mapped through the deepest of its mounts that holds it. `what` names the path in
    errors ("--model /models/my.keras"). Raises NotOnAMount (exit 2)."""
    if container is None:
        return path
    inside = PurePosixPath(path)
    best: tuple[PurePosixPath, Mapping[str, Any]] | None = None
    for mount in container.get("Mounts") or ():
        destination = PurePosixPath(str(mount.get("Destination") or "/"))
        if (inside == destination or destination in inside.parents) and (
                best is None or len(destination.parts) > len(best[0].parts)):
            best = (destination, mount)
    if best is None or not best[1].get("Source"):
        kind = f"a {best[1].get('Type')} mount" if best else "no mount"
        raise NotOnAMount(
            f"{what}: {path} is on {kind} of the agent's own container, so the docker "
            "engine cannot hand it to the workload container. Mount its folder from the "
            "host into the agent container (docker run -v /host/folder:/models ...) and "
            "name the file under that mount (--models /models/NAME.keras).")
    destination, mount = best
    source = PurePosixPath(str(mount["Source"]))
    return str(source / inside.relative_to(destination))
