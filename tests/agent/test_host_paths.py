"""A path the agent sees in its own container, as the docker engine sees it on the host
(runners/host_paths.py): mapped through the container's mounts, or refused clearly."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gpubench.agent.runners.host_paths import NotOnAMount, host_path
from gpubench.errors import ExitCode


def inspect(*mounts: tuple[str, str, str]) -> dict:
    """An engine's `inspect` of a container with these (type, source, destination)
    mounts, in the engine's own keys."""
    return {"Mounts": [{"Type": kind, "Source": source, "Destination": destination,
                        "RW": False} for kind, source, destination in mounts]}


def test_on_the_host_a_path_is_the_hosts() -> None:
    assert host_path("/tmp/stranger/models", None, what="--model x") == "/tmp/stranger/models"


def test_a_folder_mounted_elsewhere_maps_to_its_host_source() -> None:
    own = inspect(("bind", "/tmp/stranger/models", "/models"),
                  ("bind", "/var/run/docker.sock", "/var/run/docker.sock"))
    assert host_path("/models", own, what="--model") == "/tmp/stranger/models"
    assert host_path("/models/deep/net.py", own, what="--model") == \
        "/tmp/stranger/models/deep/net.py"


def test_the_deepest_mount_wins_and_a_named_volume_maps_to_its_folder() -> None:
    own = inspect(("bind", "/srv", "/work"),
                  ("volume", "/var/lib/docker/volumes/nets/_data", "/work/nets"))
    assert host_path("/work/nets/a", own, what="--model") == \
        "/var/lib/docker/volumes/nets/_data/a"
    assert host_path("/work/other", own, what="--model") == "/srv/other"
    # /work/netsX is not under /work/nets: path parts, not string prefixes.
    assert host_path("/work/netsX", own, what="--model") == "/srv/netsX"


def test_a_path_on_no_mount_is_exit_2_saying_what_to_mount() -> None:
    own = inspect(("bind", "/tmp/stranger/models", "/models"))
    with pytest.raises(NotOnAMount) as raised:
        host_path("/root/my.keras", own, what="--model /root/my.keras")
    assert raised.value.exit_code == ExitCode.USAGE
    message = str(raised.value)
    assert message.startswith("--model /root/my.keras: /root/my.keras is on no mount")
    assert "-v /host/folder:/models" in message


def test_a_tmpfs_has_no_host_source() -> None:
    own = {"Mounts": [{"Type": "tmpfs", "Destination": "/scratch"}]}
    with pytest.raises(NotOnAMount, match="is on a tmpfs mount"):
        host_path("/scratch/my.keras", own, what="--model /scratch/my.keras")


@pytest.mark.docker
def test_the_engines_own_inspect_maps_a_folder_another_container_reads(
        tmp_path: Path, engine) -> None:
    """As the agent container and the workload container do on a GPU host: the engine's
    inspect of a container with the host's folder mounted at /models maps
    /models/my.keras to the host's file, which a second container, given that folder,
    reads at /model."""
    client = engine
    image = os.environ.get("GPUBENCH_TEST_PYTHON_IMAGE") or next(
        (i.tags[0] for i in client.images.list(name="gpubench-base") if i.tags), None)
    if image is None:
        pytest.skip("no base image (docker/base-image.sh makes gpubench-base)")
    models = tmp_path / "stranger" / "models"
    models.mkdir(parents=True)
    (models / "my.keras").write_bytes(b"a model's bytes")
    agent = client.containers.create(image, command=["true"],
                                     volumes={str(models): {"bind": "/models", "mode": "ro"}})
    try:
        source = host_path("/models", client.containers.get(agent.id).attrs, what="--model")
    finally:
        agent.remove(force=True)
    assert source == str(models)
    # Judged by the exit status (ContainerError where it is not 0), not by the container's
    # output, which the engine's log can lose for a container that ends at once.
    client.containers.run(image, command=["grep", "-qx", "a model's bytes", "/model/my.keras"],
                          remove=True, volumes={source: {"bind": "/model", "mode": "ro"}})
