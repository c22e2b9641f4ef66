"""Will the workload run on these GPUs? The check before any training starts.

Pure: it takes the GPUs' facts (NVML, through the inventory) and the builds the workload
reported (`python -m gpubench.agent.workload probe --json`, gpubench.agent.workload.probe) and
decides which Keras backend runs, or raises a GpubenchError (exit code 2) that says why
none can and what to install. No framework, no subprocess.

The rules, and where each comes from:

- Machine code (SASS, `sm_XY`) runs on GPUs of the same major compute capability and an
  equal or higher minor one: sm_86 runs on 8.9, never on 9.0 (CUDA C++ Programming
  Guide, "Binary Compatibility"; torch.cuda's DEVICE_REQUIREMENT table says the same).
  `sm_XYa` runs on X.Y only; `sm_XYf` on the X family from X.Y (CUDA 12.9 family code).
- PTX (`compute_XY`) is compiled by the driver for GPUs of compute capability X.Y and
  newer, never older (same guide, "Just-in-Time Compilation"); TensorFlow's .bazelrc
  says it too ("PTX is forward compatible beyond the current compute capability major
  release while SASS is only forward compatible inside the current major release").
- A driver runs every CUDA older than its own (backward compatibility) and, from CUDA
  11 on, newer CUDA of the same major (minor version compatibility: CUDA 12.x needs
  driver 525 or newer, CUDA 13.x 580 or newer), but not a newer major (NVIDIA, "CUDA
  Compatibility", Minor Version Compatibility). PTX JIT is not covered by minor version
  compatibility: the driver can only compile PTX written by a CUDA no newer than its own.
- What the official builds cover: torch's cu126 wheels sm_50, 60, 70, 75, 80, 86, 90;
  cu129 and cu130 sm_75, 80, 86, 90, 100, 120 (torch 2.13's PYTORCH_RELEASES_CODE_CC,
  x86_64; CUDA 13 cannot build for anything older than sm_75). TensorFlow 2.21's GPU
  build: CUDA 12.5.1, sm_60, 70, 80, 89 and compute_90 (its .bazelrc, "the same as the
  official TensorFlow builds"). JAX (kernels compiled on the GPU's first use): SM 5.2
  and newer with the CUDA 12 plugin, 7.5 and newer with CUDA 13 (JAX's installation
  guide). tests/data/README.md names the pages.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from gpubench.errors import ExitCode, GpubenchError

# When nothing is asked: torch first (the project's fastest and steadiest path on a
# GPU), then TensorFlow (the protocol's), then JAX.
PREFERENCE = ("torch", "tensorflow", "jax")
PROBE_FORMAT = "gpubench-probe"
TORCH_INDEX = "https://download.pytorch.org/whl"
# JAX's plugins compile for the GPU at run time: the lowest compute capability each
# CUDA major supports (JAX's installation guide).
JAX_LOWEST = {12: (5, 2), 13: (7, 5)}


class Incompatible(GpubenchError):
    """No backend the workload has can run on these GPUs (says why and what to do)."""

    exit_code = ExitCode.USAGE


@dataclass(frozen=True)
class Gpu:
    """What the driver says about one GPU ('' where NVML could not say)."""

    name: str
    compute_capability: str  # "8.9"
    driver_version: str  # "535.161.07"
    cuda_version: str  # "12.2": the newest CUDA this driver runs


@dataclass(frozen=True)
class Build:
    """One framework build, as the workload's probe reported it."""

    backend: str
    version: str
    cuda: str = ""  # the CUDA it was built for; '' without CUDA
    archs: tuple[str, ...] = ()  # sm_XY (machine code) and compute_XY (PTX)
    error: str = ""  # why the probe could not read it
    plugin: str = ""  # JAX: the CUDA plugin and its version

    @property
    def label(self) -> str:
        """'torch 2.11.0+cu130', 'tensorflow 2.21.0 (CUDA 12.5.1)'."""
        text = f"{self.backend} {self.version}".strip()
        if self.cuda and f"+cu{self.cuda.replace('.', '')}" not in self.version:
            text += f" (CUDA {self.cuda})"
        return text


@dataclass(frozen=True)
class Choice:
    """The backend to run, and the one line that says why."""

    backend: str
    build: Build
    line: str


# The builds to suggest, in the order they are suggested (see the module's docstring).
TORCH_WHEELS = (
    Build("torch", "cu130", "13.0", ("sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120")),
    Build("torch", "cu126", "12.6", ("sm_50", "sm_60", "sm_70", "sm_75", "sm_80", "sm_86",
                                     "sm_90")),
    Build("torch", "cu129", "12.9", ("sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120")),
)
TENSORFLOW_IMAGE = Build("tensorflow", "2.21.0", "12.5.1",
                         ("sm_60", "sm_70", "sm_80", "sm_89", "compute_90"))
# The torch workload images (docker/build.sh, the release), by the tag's variant, in the
# order the agent tries them: the default's CUDA 12.6 build (compute capability 5.0 to
# 9.0), then CUDA 12.9's for Blackwell (7.5 to 12.x: B200, RTX 50, RTX PRO 6000).
WORKLOAD_REPOSITORY = "gpubench-workload"
TORCH_IMAGES = tuple((variant, next(w for w in TORCH_WHEELS if w.version == build))
                     for variant, build in (("", "cu126"), ("cu129", "cu129")))
# The tag variants of the workload image that are not the default torch build.
IMAGE_VARIANTS = ("cu129", "tensorflow")
# What to know of a backend's GPU path, said with the choice: TensorFlow's has not been
# run by this project itself (so that nobody takes the build check for a measurement);
# JAX's spends minutes of epoch 1 compiling (measured: docs/results/h200-jax.md).
GPU_NOTES = {
    "tensorflow": "TensorFlow on a GPU has not been run by gpubench itself (its GPU "
                  "figures are torch's: docs/results/h200-containers.md); its runs are "
                  "compared only with TensorFlow's",
    "jax": "Keras on JAX compiles the training step in epoch 1 (about 2 minutes for B0 "
           "on an H200: docs/results/h200-jax.md); epoch 2, the figure, runs compiled",
}


# --- versions and architectures -----------------------------------------------------


def version_tuple(text: str) -> tuple[int, ...]:
    """'12.5.1' -> (12, 5, 1); () when there is no leading number."""
    numbers = re.match(r"\d+(?:\.\d+)*", text.strip())
    return tuple(int(n) for n in numbers.group(0).split(".")) if numbers else ()


@dataclass(frozen=True)
class Kernel:
    """One entry of an architecture list: machine code or PTX for one compute capability."""

    text: str
    ptx: bool
    capability: tuple[int, int]
    variant: str = ""  # 'a': that GPU only; 'f': its family

    def runs_on(self, capability: tuple[int, int]) -> bool:
        """Whether this code runs on a GPU of `capability` (the rules above)."""
        if self.variant == "a":
            return capability == self.capability
        same_family = capability[0] == self.capability[0] and capability[1] >= self.capability[1]
        if self.ptx and not self.variant:
            return capability >= self.capability
        return same_family


def parse_arch(text: str) -> Kernel | None:
    """'sm_86', 'compute_90', 'sm_100a', 'sm_120f', or TensorFlow's '8.6'; None otherwise."""
    found = re.fullmatch(r"(sm|compute)_(\d+)(\d)([af]?)", text.strip())
    if found:
        kind, major, minor, variant = found.groups()
        return Kernel(text.strip(), kind == "compute", (int(major), int(minor)), variant)
    dotted = re.fullmatch(r"(\d+)\.(\d)", text.strip())
    if dotted:  # TensorFlow's X.Y: machine code and PTX
        return Kernel(text.strip(), True, (int(dotted.group(1)), int(dotted.group(2))))
    return None


def capability(text: str) -> tuple[int, int] | None:
    """'8.9' -> (8, 9); None when NVML could not say."""
    parts = version_tuple(text)
    return (parts[0], parts[1]) if len(parts) >= 2 else None


# --- one build on one GPU -------------------------------------------------------------


def _driver_problem(build: Build, gpu: Gpu) -> str:
    needed, runs = version_tuple(build.cuda)[:1], version_tuple(gpu.cuda_version)[:1]
    if needed and runs and needed > runs:
        driver = f"driver {gpu.driver_version}" if gpu.driver_version else "the driver"
        return (f"{driver} runs CUDA {gpu.cuda_version} at most; {build.label} needs "
                f"CUDA {needed[0]}")
    return ""


def _kernel_for(build: Build, gpu: Gpu) -> tuple[str, str]:
    """(how the build's code runs on the GPU, '') or ('', why it cannot)."""
    card = capability(gpu.compute_capability)
    if card is None:
        return "compute capability unknown: not checked", ""
    cc = f"{card[0]}.{card[1]}"
    if build.backend == "jax" and not build.archs:
        lowest = JAX_LOWEST.get(version_tuple(build.cuda)[0]) if build.cuda else None
        if lowest is None or card >= lowest:
            return "kernels compiled for it when it first runs", ""
        return "", (f"{gpu.name} is compute capability {cc}; {build.label} runs on compute "
                    f"capability {lowest[0]}.{lowest[1]} and newer")
    kernels = [k for k in (parse_arch(a) for a in build.archs) if k is not None]
    if not kernels:
        return "architecture list unknown: not checked", ""
    # The code the GPU would run: the newest machine code that runs on it, else PTX.
    for kernel in sorted(kernels, key=lambda k: k.capability, reverse=True):
        if not kernel.ptx and kernel.runs_on(card):
            exact = kernel.capability == card
            return f"{kernel.text} kernels" + ("" if exact else f" run on {cc}"), ""
    for kernel in kernels:
        if kernel.ptx and kernel.runs_on(card):
            # Minor version compatibility does not extend to PTX: the driver compiles
            # only PTX from a CUDA as old as its own, or older.
            if gpu.cuda_version and version_tuple(gpu.cuda_version)[:2] < \
                    version_tuple(build.cuda)[:2]:
                return "", (f"{build.label} has no machine code for compute capability {cc}, "
                            f"only {kernel.text} PTX, which driver {gpu.driver_version} "
                            f"(CUDA {gpu.cuda_version}) cannot compile: it was written by "
                            f"CUDA {build.cuda}")
            return f"{kernel.text} PTX, compiled for {cc} by the driver", ""
    lowest_kernel = min(kernels, key=lambda k: k.capability)
    if card < lowest_kernel.capability:
        return "", (f"{gpu.name} is compute capability {cc}; {build.label} has kernels for "
                    f"{lowest_kernel.text} and newer")
    return "", (f"{gpu.name} is compute capability {cc}; {build.label} has kernels for "
                f"{', '.join(k.text for k in kernels)}, none of which runs on it")


def problems(build: Build, gpu: Gpu) -> list[str]:
    """Why `build` cannot run on `gpu` (empty: it can)."""
    if build.error:
        return [f"{build.label}: {build.error}"]
    if not build.cuda:
        return [f"{build.label} is built without CUDA (a CPU build)"]
    found = [_kernel_for(build, gpu)[1], _driver_problem(build, gpu)]
    return [text for text in found if text]


def _distinct(gpus: Iterable[Gpu]) -> list[Gpu]:
    return list(dict.fromkeys(gpus))


def problems_on_all(build: Build, gpus: Sequence[Gpu]) -> list[str]:
    """Why `build` cannot run on every GPU of the run (each distinct GPU said once)."""
    return list(dict.fromkeys(p for gpu in _distinct(gpus) for p in problems(build, gpu)))


def _how(build: Build, gpus: Sequence[Gpu]) -> str:
    gpu = gpus[0]
    how = _kernel_for(build, gpu)[0]
    driver = version_tuple(gpu.cuda_version)[:2]
    built = version_tuple(build.cuda)[:2]
    if driver and built and built > driver:
        how += (f"; CUDA {build.cuda} on the driver's CUDA {gpu.cuda_version} (minor version "
                "compatibility)")
    return how


# --- the workload image ---------------------------------------------------------------


def _workload_parts(image: str) -> tuple[str, str, str] | None:
    """(repository, the tag without its variant: 'latest' or a version, the variant: ''
    for the default torch build) of a workload image; None for any other image (another
    repository, or one named by digest)."""
    repository, _, tag = image.rpartition(":")
    if not repository or "/" in tag:  # no tag, or a registry's port
        repository, tag = image, "latest"
    if "@" in image or repository.rsplit("/", 1)[-1] != WORKLOAD_REPOSITORY:
        return None
    for variant in IMAGE_VARIANTS:
        if tag == variant:
            return repository, "latest", variant
        if tag.endswith(f"-{variant}"):
            return repository, tag[:-len(variant) - 1], variant
    return repository, tag, ""


def image_variant(image: str, variant: str) -> str | None:
    """The workload image `image` (any of its variants) with the tag of `variant`:
    ('gpubench-workload:latest', 'cu129') -> gpubench-workload:cu129,
    ('REGISTRY/gpubench-workload:0.2.0-tensorflow', '') -> REGISTRY/gpubench-workload:0.2.0.
    None for any other image."""
    parts = _workload_parts(image)
    if parts is None:
        return None
    repository, version, _ = parts
    if not variant:
        return f"{repository}:{version}"
    return f"{repository}:{variant if version == 'latest' else f'{version}-{variant}'}"


def torch_image_for(image: str, gpus: Sequence[Gpu]) -> tuple[str, str]:
    """The torch workload image to run on `gpus`, by their compute capability, and the
    line that says which and why: `image` where its build runs on them, else its
    variant whose build does (`image` itself, with no line, when `image` is not a default
    torch workload image; and where no variant runs, for the check to say why)."""
    parts = _workload_parts(image)
    if not gpus or parts is None or parts[2]:
        return image, ""
    cc = ", ".join(dict.fromkeys(g.compute_capability for g in gpus))
    for variant, build in TORCH_IMAGES:
        if problems_on_all(build, gpus):
            continue
        chosen = str(image_variant(image, variant))
        line = (f"workload image {chosen}: torch for CUDA {build.cuda}, with kernels for "
                f"the {_names(gpus)} (compute capability {cc})")
        if variant:
            default = TORCH_IMAGES[0][1]
            line += (f"; {image}'s CUDA {default.cuda} build has kernels up to "
                     f"{default.archs[-1]} only")
        return chosen, line
    return image, ""


# --- the advice -----------------------------------------------------------------------


def advice(gpus: Sequence[Gpu], runner: str = "local", image: str = "") -> str:
    """What to install so that the benchmark runs on these GPUs (one sentence); `image`
    is the workload image of a docker run."""
    options = []
    if runner == "docker":
        for variant, build in TORCH_IMAGES:
            other = image_variant(image, variant)
            if other is not None and other != image and not problems_on_all(build, gpus):
                options.append(f"run the workload image {other} (--image {other}: torch "
                               f"for CUDA {build.cuda})")
                break
    torch = next((w for w in TORCH_WHEELS if not problems_on_all(w, gpus)), None)
    if torch is not None:
        install = f"pip install torch --index-url {TORCH_INDEX}/{torch.version}"
        where = " and run it with --runner local" if runner == "docker" else ""
        options.append(f"install a torch build for CUDA {torch.cuda} (`{install}`){where}")
    if not problems_on_all(TENSORFLOW_IMAGE, gpus) and runner != "docker":
        options.append("run the TensorFlow workload image (--runner docker: TensorFlow "
                       f"{TENSORFLOW_IMAGE.version} with CUDA {TENSORFLOW_IMAGE.cuda})")
    if not options:
        # Nothing runs with this driver: would anything run with a newer one?
        any_driver = [replace(gpu, cuda_version="") for gpu in gpus]
        if any(not problems_on_all(b, any_driver) for b in (*TORCH_WHEELS, TENSORFLOW_IMAGE)):
            gpu = gpus[0]
            options.append(f"install a newer NVIDIA driver (driver {gpu.driver_version} runs "
                           f"CUDA {gpu.cuda_version}; CUDA 12 builds need 525 or newer, CUDA "
                           "13 builds 580 or newer)")
        else:
            options.append("install a build made for this GPU (no official torch or "
                           "TensorFlow build has kernels for compute capability "
                           f"{gpus[0].compute_capability})")
    text = ", or ".join(options)
    return text[0].upper() + text[1:] + "; or train on the CPU with --gpus 0."


# --- the choice -----------------------------------------------------------------------


def _names(gpus: Sequence[Gpu]) -> str:
    names = list(dict.fromkeys(g.name for g in gpus))
    return " and ".join(names)


def installed_before(installed: Mapping[str, Build], name: str) -> list[str]:
    """The installed backends PREFERENCE puts before `name`."""
    return [other for other in PREFERENCE[:PREFERENCE.index(name)] if other in installed]


def choose(gpus: Sequence[Gpu], builds: Sequence[Build], *, asked: str | None = None,
           asked_by: str = "--backend", where: str = "in the workload's Python",
           runner: str = "local", image: str = "") -> Choice:
    """The backend to run on `gpus`: `asked` if it can, else the first of PREFERENCE that
    can; raises Incompatible (exit code 2) with the reasons and what to install.

    `asked_by` names where the request came from (--backend, KERAS_BACKEND=...), `where`
    where the builds live, `runner` the runner that will start the workload and `image`
    its workload image (docker), for the advice to name the one that runs.
    """
    if not gpus:
        raise ValueError("choose() is for GPU runs: a CPU-only run needs no check")
    installed = {build.backend: build for build in builds}
    on = f"the {_names(gpus)}"
    if asked is not None:
        build = installed.get(asked)
        if build is None:
            raise Incompatible(f"{asked_by} {asked}: {asked} is not installed {where}. "
                               f"{advice(gpus, runner, image)}")
        found = problems_on_all(build, gpus)
        if found:
            raise Incompatible(f"{asked_by} {asked} cannot run on {on}: {'; '.join(found)}. "
                               f"{advice(gpus, runner, image)}")
        return Choice(asked, build, _said(asked, f"backend {asked} ({asked_by}): {build.label} "
                                                f"runs on {on} ({_how(build, gpus)})"))
    passed: list[str] = []
    for name in PREFERENCE:
        build = installed.get(name)
        if build is None:
            continue
        found = problems_on_all(build, gpus)
        if found:
            passed.extend(found)
            continue
        line = f"backend {name}: {build.label} runs on {on} ({_how(build, gpus)})"
        if passed:
            line += f"; not {', '.join(installed_before(installed, name))}: {'; '.join(passed)}"
        return Choice(name, build, _said(name, line))
    if not installed:
        raise Incompatible(f"none of {', '.join(PREFERENCE)} is installed {where}. "
                           f"{advice(gpus, runner, image)}")
    raise Incompatible(f"no backend installed {where} runs on {on}: {'; '.join(passed)}. "
                       f"{advice(gpus, runner, image)}")


def _said(backend: str, line: str) -> str:
    """The choice's line, with what to know of the backend on a GPU."""
    return f"{line}. Note: {GPU_NOTES[backend]}" if backend in GPU_NOTES else line


# --- reading the probe's answer -------------------------------------------------------


def builds_from_probe(data: Mapping[str, Any]) -> list[Build]:
    """The builds of a probe answer (gpubench.agent.workload.probe); ValueError if it is none."""
    if not isinstance(data, Mapping) or data.get("format") != PROBE_FORMAT:
        raise ValueError(f"not a {PROBE_FORMAT} answer")
    builds = []
    for name, found in (data.get("backends") or {}).items():
        builds.append(Build(
            backend=str(name), version=str(found.get("version") or ""),
            cuda=str(found.get("cuda") or ""),
            archs=tuple(str(a) for a in found.get("archs") or ()),
            error=str(found.get("error") or ""), plugin=str(found.get("plugin") or ""),
        ))
    return builds


def _probe_answer(text: str) -> dict[str, Any]:
    """The probe's answer: the last line of what it printed that is a JSON object (a
    framework may print other lines first). ValueError when there is none."""
    for line in reversed(text.strip().splitlines()):
        if line.startswith("{"):
            try:
                return json.loads(line)
            except json.JSONDecodeError as exc:
                raise ValueError(f"the probe's answer is not JSON ({exc})") from None
    raise ValueError("the probe printed no JSON object")


def driver_from_probe(text: str) -> dict[str, Any] | None:
    """What the CUDA driver counted where the probe ran (`probe --driver`): devices and
    CUDA version, or an error; None when the probe was not asked (or is too old to)."""
    found = _probe_answer(text).get("driver")
    return found if isinstance(found, dict) else None


def parse_probe_output(text: str) -> list[Build]:
    """The builds from what `probe --json` printed (_probe_answer)."""
    return builds_from_probe(_probe_answer(text))
