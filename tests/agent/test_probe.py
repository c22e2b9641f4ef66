"""`python -m gpubench.agent.workload probe`: the installed builds, read without a GPU.

The real workload command on this environment's CPU builds of torch and TensorFlow; the
file readers on the formats a CUDA build ships (TensorFlow's generated build_info.py,
torch's version.py).
"""

from __future__ import annotations

import importlib.metadata
import json
import platform
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from builds import cpu_torch_only

from gpubench.agent.workload import probe

WORKLOAD = [sys.executable, "-m", "gpubench.agent.workload"]


@cpu_torch_only
def test_probe_json_reports_the_installed_cpu_builds() -> None:
    done = subprocess.run([*WORKLOAD, "probe", "--json"], capture_output=True, text=True,
                          timeout=120, check=True)
    [line] = done.stdout.strip().splitlines()  # one JSON object, on one line
    found = json.loads(line)
    assert found["format"] == "gpubench-probe" and found["version"] == 1
    assert found["python"] == platform.python_version()
    assert found["keras"] == importlib.metadata.version("keras")
    torch, tensorflow = found["backends"]["torch"], found["backends"]["tensorflow"]
    assert torch == {"version": importlib.metadata.version("torch"), "cuda": "", "archs": []}
    assert torch["version"].endswith("+cpu")
    assert tensorflow == {"version": importlib.metadata.version("tensorflow-cpu"), "cuda": "",
                          "archs": []}
    if "jax" in found["backends"]:
        assert found["backends"]["jax"]["version"]


@cpu_torch_only
def test_probe_imports_no_framework_for_cpu_builds() -> None:
    # Importing TensorFlow takes seconds; a CPU build of torch has nothing to read inside.
    script = ("import sys\n"
              "from gpubench.agent.workload.probe import probe\n"
              "probe()\n"
              "print(sorted({m.split('.')[0] for m in sys.modules}"
              " & {'torch', 'tensorflow', 'keras', 'jax', 'jaxlib'}))\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=120, check=True)
    assert done.stdout.strip() == "[]"


@cpu_torch_only
def test_probe_without_json_is_a_table() -> None:
    done = subprocess.run([*WORKLOAD, "probe"], capture_output=True, text=True, timeout=120,
                          check=True)
    lines = done.stdout.splitlines()
    assert lines[0].startswith("torch ") and "no CUDA (a CPU build)" in lines[0]
    assert lines[-1].startswith(f"keras {importlib.metadata.version('keras')}, Python ")


# TensorFlow's generated build_info.py, as a GPU wheel ships it (the values of a recorded
# tf.sysconfig.get_build_info(); tests/data/README.md).
GPU_BUILD_INFO = '''# Copyright 2020 The TensorFlow Authors. All Rights Reserved.
"""Auto-generated module providing information about the build."""
import collections

build_info = collections.OrderedDict([('cpu_compiler', 'clang 18'), \
('cuda_compute_capabilities', ['sm_60', 'sm_70', 'sm_80', 'sm_89', 'compute_90']), \
('cuda_version', '12.5.1'), ('cudnn_version', '9'), ('is_cuda_build', True), \
('is_rocm_build', False), ('is_tensorrt_build', False)])
'''

# torch/version.py of a CUDA wheel (the format of this environment's CPU wheel's file).
TORCH_VERSION = '''from typing import Optional

__all__ = ['__version__', 'debug', 'cuda', 'git_version', 'hip', 'rocm', 'xpu']
__version__ = '2.11.0+cu130'
debug = False
cuda: Optional[str] = '13.0'
git_version = '0000000000000000000000000000000000000000'
hip: Optional[str] = None
'''


def test_generated_files_are_read_without_running_them(tmp_path: Path) -> None:
    build_info = tmp_path / "build_info.py"
    build_info.write_text(GPU_BUILD_INFO)
    info = dict(probe._assignments(build_info)["build_info"])
    assert info["cuda_version"] == "12.5.1" and info["is_cuda_build"] is True
    assert info["cuda_compute_capabilities"] == ["sm_60", "sm_70", "sm_80", "sm_89",
                                                 "compute_90"]
    version = tmp_path / "version.py"
    version.write_text(TORCH_VERSION)
    values = probe._assignments(version)
    assert values["__version__"] == "2.11.0+cu130" and values["cuda"] == "13.0"
    assert values["hip"] is None


def test_the_installed_files_have_the_expected_form() -> None:
    # The real files of this environment: if a release changed their form, the probe
    # would answer '' and the check would be blind.
    torch_dir = probe._package_dir("torch")
    tensorflow_dir = probe._package_dir("tensorflow")
    assert torch_dir is not None and tensorflow_dir is not None
    # The distribution's version may leave out the build's local part: PyPI's CUDA wheel
    # is 2.13.0, its version.py says 2.13.0+cu130.
    written = probe._assignments(torch_dir / "version.py")["__version__"]
    assert written.split("+")[0] == importlib.metadata.version("torch").split("+")[0]
    info = dict(probe._assignments(tensorflow_dir / "python" / "platform" / "build_info.py")
                ["build_info"])
    assert info["is_cuda_build"] is False


@pytest.mark.gpu
@pytest.mark.skipif(shutil.which("nvidia-smi") is None, reason="no NVIDIA GPU on this host")
def test_a_cuda_build_of_torch_is_probed_without_starting_cuda() -> None:
    """On a GPU host (`pytest -m gpu tests/agent/test_probe.py`): the architecture list is
    read, and the driver was never started (cuCtxGetCurrent answers 3,
    CUDA_ERROR_NOT_INITIALIZED, until something calls cuInit)."""
    script = ("import ctypes, json\n"
              "from gpubench.agent.workload.probe import probe\n"
              "torch = probe()['backends'].get('torch') or {}\n"
              "state = None\n"
              "if torch.get('cuda'):\n"
              "    context = ctypes.c_void_p()\n"
              "    state = ctypes.CDLL('libcuda.so.1').cuCtxGetCurrent(ctypes.byref(context))\n"
              "print(json.dumps({'torch': torch, 'state': state}))\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=300, check=True)
    found = json.loads(done.stdout.strip().splitlines()[-1])
    if not found["torch"].get("cuda"):
        pytest.skip("torch here is not a CUDA build")
    assert found["torch"]["archs"] and all(a.startswith(("sm_", "compute_"))
                                           for a in found["torch"]["archs"])
    assert found["state"] == 3
