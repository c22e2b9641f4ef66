"""How the workload container is given this host's NVIDIA GPUs, chosen by the agent.

Four ways, tried in this order (the first that this host has wins; `--gpu-access` names
one):

- `container`: the agent itself runs in a container. The engine is the host's (its
  socket is mounted), so every path handed to it must be the host's, which the agent
  cannot see from inside. It hands the workload container what its own container was
  given, as the engine reports it: device requests (`--gpus`, CDI), the NVIDIA device
  nodes, the bind mounts (the driver's folder) and the library path.
- `toolkit`: the NVIDIA Container Toolkit (`docker run --gpus all`): a device request for
  every GPU, which the toolkit's hook fills in with the device nodes and the driver's
  libraries. Present when the engine lists an `nvidia` runtime or the hook is installed.
- `cdi`: the Container Device Interface (docker 25 and newer, where enabled): a device
  request for `nvidia.com/gpu=all`, which the engine fills in from the CDI spec the toolkit
  generated (`nvidia-ctk cdi generate`). Present when the engine names CDI spec folders and
  one of them holds a spec of kind nvidia.com/gpu.
- `devices`: no toolkit at all. The device nodes (/dev/nvidia*) and the driver's
  user-space libraries, found where the dynamic loader would find them as the toolkit's
  libnvidia-container does (LD_LIBRARY_PATH, the loader's cache, the system folders),
  are mounted read-only into the container, with the library path set.

Neither found: `NoGpuAccess` (exit 2) before any training, naming what to install.

No docker SDK here: the docker runner asks the engine and hands in its answers (plain
dicts), so this module reads only files and can be tested on any machine.
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpubench.errors import ExitCode, GpubenchError

WAYS = ("container", "toolkit", "cdi", "devices")
AUTO = "auto"
# Where the `devices` way puts the driver's libraries inside the workload container.
DRIVER_LIBRARIES_INSIDE = "/usr/local/gpubench-driver/lib"
# The driver's libraries that CUDA programs and NVML load (libnvidia-container's lists
# for the `utility` and `compute` capabilities), by name before the version.
DRIVER_LIBRARIES = (
    "libnvidia-ml.so", "libnvidia-cfg.so",
    "libcuda.so", "libcudadebugger.so", "libnvidia-opencl.so", "libnvidia-gpucomp.so",
    "libnvidia-ptxjitcompiler.so", "libnvidia-fatbinaryloader.so",
    "libnvidia-allocator.so", "libnvidia-compiler.so", "libnvidia-pkcs11.so",
    "libnvidia-pkcs11-openssl3.so", "libnvidia-nvvm.so",
)
# Without these two nothing trains or is sampled.
ESSENTIAL = ("libcuda.so", "libnvidia-ml.so")
SYSTEM_LIBRARY_FOLDERS = ("/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu",
                          "/usr/lib64", "/usr/lib", "/lib/x86_64-linux-gnu", "/lib64")
TOOLKIT_HOOKS = ("nvidia-container-runtime-hook", "nvidia-container-toolkit")
CDI_KIND = "nvidia.com/gpu"
# The environment a container's GPU set-up may carry, handed on with it.
HANDED_ENVIRONMENT = ("LD_LIBRARY_PATH", "NVIDIA_VISIBLE_DEVICES",
                      "NVIDIA_DRIVER_CAPABILITIES")
# The agent's own mounts that are its own business, never the workload's.
DOCKER_SOCKET = "/var/run/docker.sock"

INSTALL_ADVICE = (
    "Install the NVIDIA Container Toolkit (nvidia-container-toolkit, then `nvidia-ctk "
    "runtime configure --runtime=docker` and restart docker), or give the container the "
    "device nodes and the driver's folder as docker/README.md shows (On a GPU host, "
    "without the toolkit); or run the workload on this host with --runner local."
)


class NoGpuAccess(GpubenchError):
    """The workload container cannot be given the GPUs (says why and what to install)."""

    exit_code = ExitCode.USAGE


@dataclass(frozen=True)
class DeviceRequest:
    """A request for GPUs the engine fills in (`--gpus`, CDI), as the engine API has it."""

    driver: str = ""
    count: int = 0
    device_ids: tuple[str, ...] = ()
    capabilities: tuple[tuple[str, ...], ...] = ()


@dataclass(frozen=True)
class GpuAccess:
    """What the workload container gets, and the line that says how."""

    way: str
    line: str
    device_requests: tuple[DeviceRequest, ...] = ()
    devices: tuple[str, ...] = ()  # "HOST:CONTAINER:rwm", as `docker run --device`
    mounts: tuple[tuple[str, str], ...] = ()  # (host path, container path), read-only
    environment: Mapping[str, str] = field(default_factory=dict)


# --- what this host has -------------------------------------------------------------


def nvidia_device_nodes(dev: Path = Path("/dev")) -> list[Path]:
    """The NVIDIA character devices under `dev` (nvidiactl, nvidia0..., nvidia-uvm...,
    and the MIG capabilities under nvidia-caps/)."""
    found = []
    for path in sorted(dev.glob("nvidia*")) + sorted(dev.glob("nvidia-caps/*")):
        try:
            if stat.S_ISCHR(path.stat().st_mode):
                found.append(path)
        except OSError:
            continue
    return found


def loader_cache_folders(ldconfig: str = "ldconfig") -> list[str]:
    """The folders of the libraries in the dynamic loader's cache (`ldconfig -p`)."""
    command = shutil.which(ldconfig) or shutil.which("/sbin/ldconfig")
    if command is None:
        return []
    try:
        listed = subprocess.run([command, "-p"], capture_output=True, text=True, timeout=10,
                                check=False).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    folders = [str(Path(path).parent) for path in re.findall(r"=> (\S+)", listed)]
    return list(dict.fromkeys(folders))


def library_folders(environment: Mapping[str, str] | None = None,
                    cache: Sequence[str] | None = None) -> list[str]:
    """Where the dynamic loader looks, in its order: LD_LIBRARY_PATH, its cache, the
    system folders."""
    environment = os.environ if environment is None else environment
    given = [p for p in environment.get("LD_LIBRARY_PATH", "").split(":") if p]
    cached = loader_cache_folders() if cache is None else list(cache)
    return list(dict.fromkeys([*given, *cached, *SYSTEM_LIBRARY_FOLDERS]))


def driver_libraries(folders: Iterable[str]) -> dict[str, Path]:
    """The driver's library files by the names programs load them by (libcuda.so.1,
    libcuda.so.580.65.06, ...), each resolved to its file: of each library, those in the
    first folder that has it."""
    found: dict[str, Path] = {}
    for library in DRIVER_LIBRARIES:
        for folder in folders:
            names = sorted(Path(folder).glob(f"{library}*")) if Path(folder).is_dir() else []
            files = {path.name: path.resolve() for path in names
                     if re.fullmatch(re.escape(library) + r"(\.\d+)*", path.name)
                     and path.resolve().is_file()}
            if files:
                found.update(files)
                break
    return found


def cdi_has_gpus(spec_folders: Iterable[str]) -> bool:
    """Whether a CDI spec in `spec_folders` declares the kind nvidia.com/gpu."""
    pattern = re.compile(r"""^\s*"?kind"?\s*:\s*["']?nvidia\.com/gpu["']?""", re.M)
    for folder in spec_folders:
        for path in sorted(Path(folder).glob("*")) if Path(folder).is_dir() else []:
            if path.suffix in (".yaml", ".yml", ".json"):
                try:
                    if pattern.search(path.read_text(errors="replace")):
                        return True
                except OSError:
                    continue
    return False


def toolkit_present(engine: Mapping[str, Any]) -> bool:
    """Whether the engine can fill in `--gpus` requests: an `nvidia` runtime in its
    configuration, or the toolkit's hook installed on this host."""
    runtimes = engine.get("Runtimes") or {}
    return "nvidia" in runtimes or any(shutil.which(hook) for hook in TOOLKIT_HOOKS)


# --- the ways -------------------------------------------------------------------------


def by_toolkit() -> GpuAccess:
    """Every GPU through the NVIDIA Container Toolkit (`--gpus all`)."""
    return GpuAccess(
        "toolkit", "the NVIDIA Container Toolkit (--gpus all)",
        device_requests=(DeviceRequest(count=-1, capabilities=(("gpu",),)),))


def by_cdi() -> GpuAccess:
    """Every GPU through the engine's CDI spec (`--device nvidia.com/gpu=all`)."""
    return GpuAccess(
        "cdi", f"CDI ({CDI_KIND}=all)",
        device_requests=(DeviceRequest(driver="cdi", device_ids=(f"{CDI_KIND}=all",)),))


def by_devices(nodes: Sequence[Path], libraries: Mapping[str, Path]) -> GpuAccess:
    """The device nodes and the driver's libraries, mounted read-only (no toolkit)."""
    missing = [name for name in ESSENTIAL if not any(n.startswith(name) for n in libraries)]
    if not nodes or missing:
        raise NoGpuAccess(_nothing_found(nodes, missing))
    # Each name a program may load (libcuda.so.1 and its versioned name) is mounted.
    mounts = tuple((str(path), f"{DRIVER_LIBRARIES_INSIDE}/{name}")
                   for name, path in sorted(libraries.items()))
    folders = sorted({str(p.parent) for p in libraries.values()})
    return GpuAccess(
        "devices",
        f"the device nodes ({len(nodes)} under /dev) and the driver's libraries from "
        f"{', '.join(folders)}, mounted read-only (no NVIDIA Container Toolkit)",
        devices=tuple(f"{node}:{node}:rwm" for node in nodes),
        mounts=mounts,
        environment={"LD_LIBRARY_PATH": DRIVER_LIBRARIES_INSIDE},
    )


def _nothing_found(nodes: Sequence[Path], missing: Sequence[str]) -> str:
    parts = []
    if not nodes:
        parts.append("no NVIDIA device nodes under /dev")
    if missing:
        parts.append(f"no {' or '.join(f'{name}.1' for name in missing)} where the loader "
                     "looks (LD_LIBRARY_PATH, ldconfig's cache, the system folders)")
    return ("the workload container cannot be given the GPUs: the docker engine has no "
            "NVIDIA Container Toolkit and no CDI spec for nvidia.com/gpu, and this host has "
            f"{' and '.join(parts)}. {INSTALL_ADVICE}")


def handed_on(container: Mapping[str, Any]) -> GpuAccess:
    """What the agent's own container (the engine's `inspect` of it) was given for the
    GPUs, to give the workload container the same."""
    host = container.get("HostConfig") or {}
    requests = tuple(
        DeviceRequest(driver=str(r.get("Driver") or ""), count=int(r.get("Count") or 0),
                      device_ids=tuple(r.get("DeviceIDs") or ()),
                      capabilities=tuple(tuple(c) for c in r.get("Capabilities") or ()))
        for r in host.get("DeviceRequests") or ())
    devices = tuple(
        f"{d['PathOnHost']}:{d['PathInContainer']}:{d.get('CgroupPermissions') or 'rwm'}"
        for d in host.get("Devices") or () if "nvidia" in str(d.get("PathOnHost")))
    mounts = tuple((str(m["Source"]), str(m["Destination"]))
                   for m in container.get("Mounts") or ()
                   if m.get("Type") == "bind" and m.get("Destination") != DOCKER_SOCKET
                   and not m.get("RW", True))
    environment = {}
    for entry in (container.get("Config") or {}).get("Env") or ():
        name, _, value = str(entry).partition("=")
        if name in HANDED_ENVIRONMENT:
            environment[name] = value
    if not requests and not devices:
        raise NoGpuAccess(
            "the agent runs in a container that was given no GPU, so it has none to hand "
            "to the workload container: start it with --gpus all (NVIDIA Container "
            "Toolkit), --device nvidia.com/gpu=all (CDI), or the device nodes and the "
            "driver's folder (docker/README.md, On a GPU host).")
    given = [what for what, has in (("its --gpus or CDI request", requests),
                                    (f"{len(devices)} device node(s)", devices),
                                    (f"{len(mounts)} read-only mount(s)", mounts)) if has]
    return GpuAccess("container", "what the agent's own container was given: "
                     + ", ".join(given), device_requests=requests, devices=devices,
                     mounts=mounts, environment=environment)


def choose(way: str, *, engine: Mapping[str, Any], own_container: Mapping[str, Any] | None,
           dev: Path = Path("/dev"), folders: Sequence[str] | None = None) -> GpuAccess:
    """The way the workload container gets the GPUs: `way` if named, else the first this
    host has (the module's docstring). `engine` is the engine's `info`, `own_container`
    the engine's `inspect` of the agent's own container (None on the host). Raises
    NoGpuAccess (exit 2) when the way asked for, or every way, is missing."""
    if way not in (AUTO, *WAYS):
        raise ValueError(f"unknown way {way!r}")
    if way == "container" or (way == AUTO and own_container is not None):
        if own_container is None:
            raise NoGpuAccess("--gpu-access container: the agent does not run in a "
                              "container of this docker engine")
        return handed_on(own_container)
    if way == "toolkit" or (way == AUTO and toolkit_present(engine)):
        return by_toolkit()
    spec_folders = [str(f) for f in engine.get("CDISpecDirs") or ()]
    if way == "cdi" or (way == AUTO and cdi_has_gpus(spec_folders)):
        if way == "cdi" and not cdi_has_gpus(spec_folders):
            raise NoGpuAccess(
                "--gpu-access cdi: the docker engine names no CDI spec of nvidia.com/gpu "
                f"(spec folders: {', '.join(spec_folders) or 'none; docker 25+ with CDI'}); "
                "`nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml` (the NVIDIA Container "
                "Toolkit's) writes one")
        return by_cdi()
    return by_devices(nvidia_device_nodes(dev),
                      driver_libraries(library_folders() if folders is None else folders))


# --- which container is this? ---------------------------------------------------------

CONTAINER_ID = re.compile(r"/containers/([0-9a-f]{64})/(?:hostname|hosts|resolv\.conf)\b")


def own_container_id(mountinfo: Path = Path("/proc/self/mountinfo"),
                     dockerenv: Path = Path("/.dockerenv")) -> str | None:
    """This process's container id, when it runs in a docker container: docker mounts the
    container's own hostname, hosts and resolv.conf files from its folder on the host."""
    if not dockerenv.exists():
        return None
    try:
        found = CONTAINER_ID.search(mountinfo.read_text(errors="replace"))
    except OSError:
        return None
    return found.group(1) if found else None
