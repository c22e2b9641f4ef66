"""What the installed frameworks were built for, read without starting CUDA.

`probe()` says, for each Keras backend installed here (torch, tensorflow, jax): its
version, the CUDA version it was built for ('' for a build without CUDA) and the GPU
architectures its kernels cover; and Keras's version. The agent runs it in the
workload's environment (`python -m gpubench.agent.workload probe --json`, or the same
in the workload image) before any training and checks the answer against the GPUs
(agent/gpubench/agent/compat.py).

It must be cheap and must not touch a GPU: a build that cannot run on the card is what
it looks for, so it must not be the thing that fails. Only with `driver` (the workload
image's check that its container was given the GPUs) does it ask the CUDA driver how many
GPUs it sees, through the driver's library alone. Most is read from files
(torch/version.py, TensorFlow's build_info.py, the package metadata) without importing
the framework; only a CUDA build of torch is imported, because its architecture list is
compiled into the library (torch imports lazily: CUDA starts at the first use of a GPU,
never at import).

This file imports nothing from gpubench and nothing outside the standard library, so it
can be loaded by path where the package is not installed.
"""

from __future__ import annotations

import ast
import ctypes
import importlib.metadata
import importlib.util
import platform
from pathlib import Path
from typing import Any

PROBE_FORMAT = "gpubench-probe"
PROBE_VERSION = 1
BACKEND_ORDER = ("torch", "tensorflow", "jax")
# The CUDA plugins JAX installs for `jax[cuda12]` and `jax[cuda13]`, by CUDA major.
JAX_CUDA_PLUGINS = {"13": "jax-cuda13-plugin", "12": "jax-cuda12-plugin"}


def _package_dir(name: str) -> Path | None:
    """Where a top-level package is installed, found without importing it."""
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def _assignments(path: Path) -> dict[str, Any]:
    """The literal values a generated Python file assigns at top level, by name.

    `name = <literal>`, `name: T = <literal>` and `name = f([...])` (TensorFlow's
    build_info = collections.OrderedDict([...])) are read; anything else is skipped.
    """
    found: dict[str, Any] = {}
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, value = node.targets[0], node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            target, value = node.target, node.value
        else:
            continue
        if not isinstance(target, ast.Name):
            continue
        if isinstance(value, ast.Call) and len(value.args) == 1 and not value.keywords:
            value = value.args[0]
        try:
            found[target.id] = ast.literal_eval(value)
        except ValueError:
            continue
    return found


def _distribution_version(*names: str) -> str:
    """The version of the first of `names` that is installed, or ''."""
    for name in names:
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return ""


def probe_torch() -> dict[str, Any] | None:
    """torch's version, CUDA version and architecture list; None when not installed."""
    folder = _package_dir("torch")
    if folder is None:
        return None
    found: dict[str, Any] = {"version": "", "cuda": "", "archs": []}
    try:
        values = _assignments(folder / "version.py")
    except (OSError, SyntaxError) as exc:
        return {**found, "error": f"cannot read torch/version.py ({exc})"}
    found["version"] = str(values.get("__version__") or _distribution_version("torch"))
    found["cuda"] = str(values.get("cuda") or "")
    if not found["cuda"]:
        return found  # a CPU (or ROCm) build has no CUDA kernels: nothing to import
    try:
        import torch

        # The compile-time list (TORCH_CUDA_ARCH_LIST), e.g. sm_75 ... sm_120. Read
        # directly where torch has it: older releases' get_arch_list() asked
        # is_available() first, which starts the driver and answers [] when the
        # driver is too old, the very case to report.
        flags = getattr(torch._C, "_cuda_getArchFlags", None)
        listed = flags() if flags is not None else None
        found["archs"] = listed.split() if listed else torch.cuda.get_arch_list()
    except Exception as exc:  # noqa: BLE001 - a broken install is an answer too
        found["error"] = f"import torch failed: {type(exc).__name__}: {exc}"
    return found


def probe_tensorflow() -> dict[str, Any] | None:
    """TensorFlow's version and its build info's CUDA version and compute capabilities,
    read from tensorflow/python/platform/build_info.py (importing TensorFlow takes
    seconds); None when not installed."""
    folder = _package_dir("tensorflow")
    if folder is None:
        return None
    # tensorflow-cpu, tensorflow and the nightlies install the same package.
    names = importlib.metadata.packages_distributions().get("tensorflow") or ["tensorflow"]
    found: dict[str, Any] = {"version": _distribution_version(*names), "cuda": "", "archs": []}
    try:
        # A dict, or the list of pairs given to collections.OrderedDict.
        info = dict(_assignments(folder / "python" / "platform" / "build_info.py")["build_info"])
    except (OSError, SyntaxError, KeyError, TypeError, ValueError) as exc:
        return {**found, "error": f"cannot read TensorFlow's build_info.py ({exc})"}
    if info.get("is_cuda_build"):
        found["cuda"] = str(info.get("cuda_version") or "")
        found["archs"] = [str(a) for a in info.get("cuda_compute_capabilities") or ()]
    return found


def probe_jax() -> dict[str, Any] | None:
    """jaxlib's version and which CUDA plugin is installed; None without JAX.

    The plugins' kernels are compiled for each GPU when a program first runs
    (XLA), so there is no architecture list to read.
    """
    if _package_dir("jax") is None:
        return None
    found: dict[str, Any] = {"version": _distribution_version("jaxlib", "jax"), "cuda": "",
                             "archs": []}
    for major, plugin in JAX_CUDA_PLUGINS.items():
        plugin_version = _distribution_version(plugin)
        if plugin_version:
            found.update(cuda=major, plugin=f"{plugin} {plugin_version}")
            break
    return found


PROBES = {"torch": probe_torch, "tensorflow": probe_tensorflow, "jax": probe_jax}
CUDA_DRIVER = "libcuda.so.1"


def probe_driver() -> dict[str, Any]:
    """Whether the CUDA driver is reachable here and how many GPUs it counts, through
    the driver's own library (no framework, no context, no kernel): what a container
    given the GPUs must answer before any training."""
    try:
        cuda = ctypes.CDLL(CUDA_DRIVER)
    except OSError as exc:
        return {"devices": 0, "error": f"cannot load {CUDA_DRIVER} ({exc})"}
    code = cuda.cuInit(0)
    if code != 0:
        return {"devices": 0, "error": f"cuInit failed with CUDA error {code}"}
    count = ctypes.c_int(0)
    code = cuda.cuDeviceGetCount(ctypes.byref(count))
    if code != 0:
        return {"devices": 0, "error": f"cuDeviceGetCount failed with CUDA error {code}"}
    version = ctypes.c_int(0)
    cuda.cuDriverGetVersion(ctypes.byref(version))
    return {"devices": count.value,
            "cuda": f"{version.value // 1000}.{version.value % 1000 // 10}"}


def probe(driver: bool = False) -> dict[str, Any]:
    """What this Python has: each installed backend's build, and Keras's version; with
    `driver`, what the CUDA driver counts (probe_driver)."""
    backends = {}
    for name in BACKEND_ORDER:
        answer = PROBES[name]()
        if answer is not None:
            backends[name] = answer
    found = {
        "format": PROBE_FORMAT,
        "version": PROBE_VERSION,
        "python": platform.python_version(),
        "keras": _distribution_version("keras"),
        "backends": backends,
    }
    if driver:
        found["driver"] = probe_driver()
    return found
