"""How the workload container gets the GPUs (agent/gpubench/agent/runners/gpu_access.py):
the choice, from real files (device nodes made with mknod, library files, CDI specs) and
the engine's answers in the shape its API gives them. make test-docker runs the same
against a real engine (tests/agent/test_docker_runner.py)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from gpubench.agent.runners import gpu_access
from gpubench.agent.runners.gpu_access import NoGpuAccess, choose
from gpubench.errors import ExitCode

NVIDIA_MAJOR = 195


def make_nodes(dev: Path, *names: str) -> None:
    """Character devices as the driver makes them (root only)."""
    dev.mkdir(parents=True, exist_ok=True)
    for minor, name in enumerate(names):
        try:
            os.mknod(dev / name, 0o666 | stat.S_IFCHR, os.makedev(NVIDIA_MAJOR, minor))
        except PermissionError:
            pytest.skip("making device nodes needs root")


def make_driver(folder: Path, version: str = "580.65.06") -> Path:
    """A driver's libraries as its installer lays them out: the versioned file, and the
    soname and development names as links to it."""
    folder.mkdir(parents=True, exist_ok=True)
    for library in ("libcuda.so", "libnvidia-ml.so", "libnvidia-ptxjitcompiler.so"):
        real = folder / f"{library}.{version}"
        real.write_bytes(b"\x7fELF")
        (folder / f"{library}.1").symlink_to(real.name)
    (folder / "libcuda.so").symlink_to("libcuda.so.1")
    (folder / "libcudart.so.12").write_bytes(b"\x7fELF")  # CUDA's runtime: not the driver's
    return folder


def test_no_toolkit_no_cdi_gives_the_device_nodes_and_the_driver_libraries(
        tmp_path: Path) -> None:
    make_nodes(tmp_path / "dev", "nvidiactl", "nvidia0", "nvidia-uvm")
    (tmp_path / "dev" / "nvidia-not-a-device").write_text("")
    driver = make_driver(tmp_path / "nvidia" / "lib64")
    access = choose("auto", engine={"Runtimes": {"runc": {}}}, own_container=None,
                    dev=tmp_path / "dev", folders=[str(tmp_path / "empty"), str(driver)])
    assert access.way == "devices"
    assert access.devices == tuple(f"{tmp_path}/dev/{n}:{tmp_path}/dev/{n}:rwm"
                                   for n in ("nvidia-uvm", "nvidia0", "nvidiactl"))
    inside = dict((target, source) for source, target in access.mounts)
    lib = gpu_access.DRIVER_LIBRARIES_INSIDE
    # Every name a program loads, each mounted from the one real file.
    assert inside[f"{lib}/libcuda.so.1"] == str(driver / "libcuda.so.580.65.06")
    assert inside[f"{lib}/libcuda.so"] == str(driver / "libcuda.so.580.65.06")
    assert f"{lib}/libnvidia-ml.so.1" in inside and f"{lib}/libcudart.so.12" not in inside
    assert access.environment == {"LD_LIBRARY_PATH": lib}
    assert str(driver) in access.line and "no NVIDIA Container Toolkit" in access.line


def test_the_loader_order_decides_which_driver_folder(tmp_path: Path) -> None:
    first, second = make_driver(tmp_path / "a", "1.1"), make_driver(tmp_path / "b", "2.2")
    folders = gpu_access.library_folders({"LD_LIBRARY_PATH": f"{second}:"}, cache=[str(first)])
    assert folders[:2] == [str(second), str(first)]
    found = gpu_access.driver_libraries(folders)
    assert found["libcuda.so.1"] == second / "libcuda.so.2.2"


def test_nothing_to_give_is_exit_2_naming_what_to_install(tmp_path: Path) -> None:
    with pytest.raises(NoGpuAccess) as caught:
        choose("auto", engine={}, own_container=None, dev=tmp_path / "dev",
               folders=[str(tmp_path)])
    message = str(caught.value)
    assert caught.value.exit_code == ExitCode.USAGE == 2
    assert "no NVIDIA device nodes under /dev" in message
    assert "libcuda.so.1 or libnvidia-ml.so.1" in message
    assert "nvidia-container-toolkit" in message and "--runner local" in message
    make_nodes(tmp_path / "dev", "nvidia0")
    with pytest.raises(NoGpuAccess, match="no libcuda.so.1 or libnvidia-ml.so.1 where"):
        choose("auto", engine={}, own_container=None, dev=tmp_path / "dev",
               folders=[str(tmp_path)])


def test_the_toolkit_and_cdi_come_first(tmp_path: Path) -> None:
    toolkit = choose("auto", engine={"Runtimes": {"nvidia": {}, "runc": {}}},
                     own_container=None, dev=tmp_path, folders=[])
    assert toolkit.way == "toolkit"
    [request] = toolkit.device_requests
    assert (request.count, request.capabilities) == (-1, (("gpu",),))
    specs = tmp_path / "cdi"
    specs.mkdir()
    (specs / "other.yaml").write_text('cdiVersion: "0.6.0"\nkind: "vendor.com/fpga"\n')
    engine = {"CDISpecDirs": [str(specs), str(tmp_path / "missing")]}
    with pytest.raises(NoGpuAccess, match="no CDI spec of nvidia.com/gpu"):
        choose("cdi", engine=engine, own_container=None, dev=tmp_path, folders=[])
    (specs / "nvidia.yaml").write_text('cdiVersion: "0.5.0"\nkind: nvidia.com/gpu\n'
                                       "devices:\n- name: all\n")
    cdi = choose("auto", engine=engine, own_container=None, dev=tmp_path, folders=[])
    assert cdi.way == "cdi"
    assert cdi.device_requests[0].driver == "cdi"
    assert cdi.device_requests[0].device_ids == ("nvidia.com/gpu=all",)


# The engine's inspect of an agent container started as docker/README.md's
# gpu-agent-devices block starts it (the fields the choice reads, as the API names them).
AGENT_CONTAINER = {
    "Config": {"Env": ["PATH=/opt/gpubench/bin:/usr/bin", "LD_LIBRARY_PATH=/usr/local/nvidia/lib64",
                       "GPUBENCH_SPOOL=/var/lib/gpubench/spool"]},
    "HostConfig": {
        "DeviceRequests": None,
        "Devices": [{"PathOnHost": "/dev/nvidia0", "PathInContainer": "/dev/nvidia0",
                     "CgroupPermissions": "rwm"},
                    {"PathOnHost": "/dev/nvidiactl", "PathInContainer": "/dev/nvidiactl",
                     "CgroupPermissions": "rwm"},
                    {"PathOnHost": "/dev/fuse", "PathInContainer": "/dev/fuse",
                     "CgroupPermissions": "rwm"}],
    },
    "Mounts": [
        {"Type": "bind", "Source": "/usr/local/nvidia/lib64",
         "Destination": "/usr/local/nvidia/lib64", "RW": False},
        {"Type": "bind", "Source": "/var/run/docker.sock",
         "Destination": "/var/run/docker.sock", "RW": True},
        {"Type": "volume", "Name": "gpubench-spool", "Source": "/var/lib/docker/volumes/x",
         "Destination": "/var/lib/gpubench/spool", "RW": True},
    ],
}


def test_an_agent_in_a_container_hands_on_what_it_was_given(tmp_path: Path) -> None:
    access = choose("auto", engine={"Runtimes": {"nvidia": {}}}, own_container=AGENT_CONTAINER,
                    dev=tmp_path, folders=[])
    assert access.way == "container"  # before the toolkit: the paths must be the host's
    assert access.devices == ("/dev/nvidia0:/dev/nvidia0:rwm",
                              "/dev/nvidiactl:/dev/nvidiactl:rwm")
    assert access.mounts == (("/usr/local/nvidia/lib64", "/usr/local/nvidia/lib64"),)
    assert access.environment == {"LD_LIBRARY_PATH": "/usr/local/nvidia/lib64"}
    assert "2 device node(s), 1 read-only mount(s)" in access.line

    with_gpus = {**AGENT_CONTAINER, "HostConfig": {"DeviceRequests": [
        {"Driver": "", "Count": -1, "DeviceIDs": None, "Capabilities": [["gpu"]]}]}}
    [request] = choose("auto", engine={}, own_container=with_gpus, dev=tmp_path,
                       folders=[]).device_requests
    assert (request.count, request.capabilities) == (-1, (("gpu",),))

    with pytest.raises(NoGpuAccess, match="was given no GPU, so it has none to hand"):
        choose("auto", engine={}, own_container={"HostConfig": {}, "Mounts": []},
               dev=tmp_path, folders=[])


def test_the_container_id_from_its_own_mounts(tmp_path: Path) -> None:
    container = "4f" * 32
    mountinfo = tmp_path / "mountinfo"
    mountinfo.write_text(
        "612 590 0:52 / / rw,relatime master:1 - overlay overlay rw,lowerdir=...\n"
        f"631 612 254:1 /var/lib/docker/containers/{container}/resolv.conf /etc/resolv.conf "
        "rw,relatime - ext4 /dev/vda rw\n")
    dockerenv = tmp_path / ".dockerenv"
    assert gpu_access.own_container_id(mountinfo, dockerenv) is None  # not in a container
    dockerenv.write_text("")
    assert gpu_access.own_container_id(mountinfo, dockerenv) == container
