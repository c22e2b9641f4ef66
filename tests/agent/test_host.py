"""The run's set-up (gpubench.agent.host) through the runner interface: a runner of its
own, registered as --runner names runners, is made ready, probed and started by the same
code as the two that ship; and the agent's command line asks a runner only what the
interface says."""

from __future__ import annotations

import io
import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from rich.console import Console

from gpubench.agent import cli, host, runners
from gpubench.agent.display import RunDisplay
from gpubench.agent.runners import RUNNERS, Runner, RunnerOptions, Workload, WorkloadRequest
from gpubench.agent.runners.base import Outcome
from gpubench.agent.runners.docker import DockerRunner
from gpubench.agent.runners.gpu_access import NoGpuAccess
from gpubench.agent.runners.local import LocalRunner
from gpubench.errors import ExitCode, GpubenchError
from gpubench.events import Event
from gpubench.settings import BadSettings

AGENT = Path(__file__).resolve().parents[2] / "agent" / "gpubench" / "agent"
T4 = Path(__file__).resolve().parent.parent / "data" / "nvml-t4-colab.json"
# The probe's answer of torch's cu126 wheel (runs on the Colab T4: compute 7.5, driver 525).
PROBE = json.dumps({"format": "gpubench-probe", "version": 1, "python": "3.12.3",
                    "keras": "3.15.1", "backends": {"torch": {
                        "version": "2.11.0+cu126", "cuda": "12.6",
                        "archs": ["sm_50", "sm_60", "sm_70", "sm_75", "sm_80", "sm_86",
                                  "sm_90"]}}})


class NoWorkload(Workload):
    """A workload that ended before it said anything."""

    @property
    def pid(self) -> int | None:
        return None

    def events(self) -> Iterator[Event]:
        return iter(())

    def pids(self) -> frozenset[int]:
        return frozenset()

    def stop(self) -> None:
        pass

    def wait(self) -> Outcome:
        return Outcome(exit_code=0)


class ElsewhereRunner(Runner):
    """A runner of the test's own: where it runs, what it probed, what it was given."""

    name = "elsewhere"
    made: list[ElsewhereRunner] = []

    def __init__(self, options: RunnerOptions) -> None:
        self.options = options
        self.probed: list[int] = []
        ElsewhereRunner.made.append(self)

    @classmethod
    def from_options(cls, options: RunnerOptions) -> ElsewhereRunner:
        return cls(options)

    @property
    def where(self) -> str:
        return "on the moon"

    def prepare(self) -> str | None:
        return "GPUs: handed over by the test"

    def probe(self, gpu_count: int) -> str:
        self.probed.append(gpu_count)
        return PROBE

    def start(self, request, *, log_path=None) -> Workload:  # noqa: ANN001
        return NoWorkload()


def recording() -> tuple[RunDisplay, Console]:
    console = Console(record=True, file=io.StringIO(), width=300)
    return RunDisplay(console), console


@pytest.fixture
def elsewhere(monkeypatch: pytest.MonkeyPatch) -> type[ElsewhereRunner]:
    monkeypatch.setitem(RUNNERS, ElsewhereRunner.name, ElsewhereRunner)
    monkeypatch.setenv(host.NVML_TRACE_ENV, str(T4))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.delenv("KERAS_BACKEND", raising=False)
    ElsewhereRunner.made.clear()
    return ElsewhereRunner


def test_a_registered_runner_is_set_up_through_the_interface(elsewhere) -> None:
    display, console = recording()
    with host.set_up(display, gpus=None, runner="elsewhere",
                     options=RunnerOptions(image="ignored"), backend=None,
                     skip_compat=False) as found:
        [made] = elsewhere.made
        assert found.runner is made and found.gpu_count == 1 and found.nvml is not None
        assert made.options.gpu_count == 1 and made.probed == [1]
        assert found.backend == "torch" and found.inventory.gpus[0].name == "Tesla T4"
    assert found.nvml is None  # closed on the way out
    said = console.export_text()
    assert "replaying the NVML trace" in said and "GPUs: handed over by the test" in said
    assert "backend torch" in said
    # Its words for where it runs reach the check's refusal.
    with pytest.raises(GpubenchError, match="jax is not installed on the moon") as refused:
        host.set_up(recording()[0], gpus=1, runner="elsewhere", options=RunnerOptions(),
                    backend="jax", skip_compat=False)
    assert refused.value.exit_code == ExitCode.USAGE


def test_more_gpus_than_the_host_has_is_a_usage_error(elsewhere) -> None:
    with pytest.raises(GpubenchError, match="--gpus: 2 asked, but this host has 1") as error:
        host.set_up(recording()[0], gpus=2, runner="elsewhere", options=RunnerOptions(),
                    backend=None, skip_compat=False)
    assert error.value.exit_code == ExitCode.USAGE and not elsewhere.made


def test_a_search_set_up_closes_nvml_at_once(elsewhere) -> None:
    found = host.set_up(recording()[0], gpus=0, runner="elsewhere", options=RunnerOptions(),
                        backend=None, skip_compat=False, keep_nvml=False)
    assert found.nvml is None and found.gpu_count == 0
    assert elsewhere.made[0].probed == []  # the CPU runs every build: nothing to probe


def test_a_runner_that_cannot_give_the_gpus_stops_the_set_up(elsewhere, monkeypatch) -> None:
    def refuse(self: ElsewhereRunner, gpu_count: int) -> str:
        raise NoGpuAccess("no way to give the GPUs")

    def unknown(self: ElsewhereRunner, gpu_count: int) -> str:
        raise RuntimeError("`probe --json` exited with 2: No such command 'probe'.")

    monkeypatch.setattr(ElsewhereRunner, "probe", refuse)
    with pytest.raises(NoGpuAccess):
        host.set_up(recording()[0], gpus=1, runner="elsewhere", options=RunnerOptions(),
                    backend=None, skip_compat=False)
    monkeypatch.setattr(ElsewhereRunner, "probe", unknown)
    display, console = recording()
    found = host.set_up(display, gpus=1, runner="elsewhere", options=RunnerOptions(),
                        backend="tensorflow", skip_compat=False)
    found.close()
    assert found.backend == "tensorflow"  # as asked: not knowing is no reason to stop
    assert "the workload could not say what it was built for" in console.export_text()


def test_the_settings_check_says_why_a_cpu_only_run_has_no_gpu(elsewhere) -> None:
    found = host.set_up(recording()[0], gpus=0, runner="elsewhere", options=RunnerOptions(),
                        backend=None, skip_compat=False, keep_nvml=False)
    found.inventory.no_gpu_reason = "no NVIDIA driver found (NVML: test); running CPU-only"
    request = WorkloadRequest("B0", settings={"gpus": 0, "cuda_graphs": True,
                                              "backend": "torch"})
    with pytest.raises(BadSettings, match=r"this host has none the run can use \(no NVIDIA"):
        host.check_settings([request], found.inventory)


def test_the_registry_drives_runner_and_every_runner_is_whole() -> None:
    [option] = [p for p in cli.main.commands["run"].params if p.name == "runner"]
    assert tuple(option.type.choices) == tuple(RUNNERS) == ("local", "docker")
    assert option.default == runners.DEFAULT_RUNNER
    for name, kind in RUNNERS.items():
        assert kind.name == name and issubclass(kind, Runner)
    local = runners.make_runner("local", RunnerOptions(command=("python3", "-m", "w")))
    assert isinstance(local, LocalRunner) and local.where == "in the workload's Python (python3)"
    docker = runners.make_runner("docker", RunnerOptions(gpu_count=0, image="x:1"))
    assert isinstance(docker, DockerRunner) and docker.where == "in the image x:1"
    assert docker.prepare() is None  # no GPUs: nothing to choose, no engine asked


def test_a_runner_or_workload_missing_part_of_the_interface_is_refused() -> None:
    class Half(Runner):
        name = "half"

        def start(self, request, *, log_path=None) -> Workload:  # noqa: ANN001
            return NoWorkload()

    with pytest.raises(TypeError, match="abstract"):
        Half()  # type: ignore[abstract]

    class Mute(Workload):
        def events(self) -> Iterator[Event]:
            return iter(())

    with pytest.raises(TypeError, match="abstract"):
        Mute()  # type: ignore[abstract]


def test_only_runners_know_which_runner_they_are() -> None:
    # Outside runners/, the agent asks a runner only what the interface says.
    for path in AGENT.rglob("*.py"):
        if "runners" in path.relative_to(AGENT).parts:
            continue
        text = path.read_text()
        assert not re.search(r"\.name\s*==\s*[\"']docker|_client\(\)|hasattr\(workload",
                             text), path
