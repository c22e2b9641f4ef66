"""`gpubench-agent`: run the standard benchmark on this host and send the results.

A thin layer over the agent's modules: it parses flags, catches
gpubench.errors.GpubenchError at the top (one line, its exit code) and imports
everything heavy inside the commands, so `--help` answers at once. It never
imports the training framework: the workload runs in a child process or a
container.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from functools import wraps
from pathlib import Path
from typing import Any

import click

from gpubench.versions import VERSION
from gpubench.errors import ExitCode, GpubenchError, wrap_message
from gpubench.settings import (
    NATIVE_IMAGE_SIZE,
    QUICK_BATCH,
    QUICK_MODEL,
    RULE_QUICK,
    parse_size,
)
from gpubench.settings_cli import BatchSize, Model, agent_options, given_settings, model_names

EXIT_OK, EXIT_FAILED, EXIT_USAGE = ExitCode.OK, ExitCode.FAILURE, ExitCode.USAGE
EXIT_UNAVAILABLE, EXIT_AUTH, EXIT_INTERRUPTED = (ExitCode.UNAVAILABLE, ExitCode.AUTH,
                                                 ExitCode.INTERRUPTED)

# For development and tests on machines without a GPU: replay a recorded NVML
# trace instead of the driver, and run another command as the workload.
NVML_TRACE_ENV = "GPUBENCH_NVML_TRACE"
WORKLOAD_COMMAND_ENV = "GPUBENCH_WORKLOAD_COMMAND"

CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 100}
# Lines of a failed workload command's own output shown with its error.
TAIL_LINES = 20
# --quick is sized for a GPU; on the CPU the same B0 epochs take many minutes.
QUICK_ON_CPU = (
    f"warning: --quick on the CPU trains {QUICK_MODEL} at full size "
    f"({NATIVE_IMAGE_SIZE[QUICK_MODEL]} px, batch "
    f"{QUICK_BATCH}): many minutes here, where a GPU takes about one. The time left shows "
    "once its first training steps are timed. A smoke run instead: --models B0 "
    "--image-size 64 --limit-images 240 --batch 16"
)


def _fail(message: str, code: int) -> None:
    click.echo(wrap_message("gpubench-agent: ", message), err=True)
    sys.exit(code)


def handles_errors(command: Callable[..., int | None]) -> Callable[..., None]:
    """Turn GpubenchError into one line on stderr and its exit code."""

    @wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> None:
        try:
            code = command(*args, **kwargs)
        except GpubenchError as exc:
            _fail(str(exc), exc.exit_code)
        except KeyboardInterrupt:
            _fail("interrupted", EXIT_INTERRUPTED)
        sys.exit(code or EXIT_OK)

    return wrapper


def _size(value: str) -> int:
    try:
        return parse_size(value)
    except GpubenchError as exc:
        raise click.BadParameter(str(exc), param_hint="'--memory-limit'") from None


def spool_option(command: Callable[..., Any]) -> Callable[..., Any]:
    """--spool DIR."""
    return click.option(
        "--spool", "spool_dir", type=click.Path(file_okay=False, path_type=Path),
        help="The spool folder: runs are written there before any push "
             "[default: $GPUBENCH_SPOOL or ~/.local/share/gpubench/spool].",
    )(command)


def _options(*options: Callable[..., Any]) -> Callable[..., Any]:
    """Apply click options in the order written (the first is listed first in --help)."""

    def apply(command: Callable[..., Any]) -> Callable[..., Any]:
        for option in reversed(options):
            command = option(command)
        return command

    return apply


RUNNER_OPTIONS = _options(
    click.option("--runner", type=click.Choice(("local", "docker")), default="local",
                 show_default=True,
                 help="Run the workload in a child process, or in the workload image."),
    click.option("--image", default="gpubench-workload:latest", show_default=True,
                 help="The workload image (--runner docker): gpubench-workload:latest is "
                      "Keras on torch, gpubench-workload:tensorflow Keras on TensorFlow."),
    click.option("--gpu-access", type=click.Choice(("auto", "container", "toolkit", "cdi",
                                                    "devices")),
                 default="auto", show_default=True,
                 help="How the workload container is given the GPUs (--runner docker): what "
                      "the agent's own container was given (when it runs in one), the NVIDIA "
                      "Container Toolkit (--gpus all), CDI (nvidia.com/gpu=all), or the "
                      "device nodes and the driver's libraries; auto: the first of these "
                      "this host has, said on the console."),
)


def collector_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """--collector, --token or --token-file, --ca; the command gets `token` either way."""

    @wraps(command)
    def with_token(*args: Any, token_file: str | None = None, **kwargs: Any) -> Any:
        kwargs["token"] = token_of(kwargs.get("token"), token_file)
        return command(*args, **kwargs)

    for option in reversed((
        click.option("--collector", metavar="HOST:PORT", envvar="GPUBENCH_COLLECTOR",
                     help="The collector to send runs to [env: GPUBENCH_COLLECTOR]."),
        click.option("--token", metavar="TOKEN", envvar="GPUBENCH_TOKEN",
                     help="Access token for the collector [env: GPUBENCH_TOKEN]; on a shared "
                          "machine prefer --token-file or the environment, which other users "
                          "cannot read from the process list."),
        click.option("--token-file", metavar="FILE", envvar="GPUBENCH_TOKEN_FILE",
                     type=click.Path(dir_okay=False, allow_dash=True),
                     help="Read the access token from FILE ('-': the first line of stdin) "
                          "[env: GPUBENCH_TOKEN_FILE]."),
        click.option("--ca", type=click.Path(dir_okay=False, exists=True, path_type=Path),
                     help="PEM certificate to trust: talk TLS to the collector."),
    )):
        with_token = option(with_token)
    return with_token


def token_of(token: str | None, token_file: str | None) -> str | None:
    """The access token: --token, or the one --token-file names ('-': stdin's first line)."""
    if token_file is None:
        return token
    if token is not None and click.get_current_context().get_parameter_source(
            "token") is click.core.ParameterSource.COMMANDLINE:
        raise click.UsageError("give --token or --token-file, not both")
    try:
        text = sys.stdin.readline() if token_file == "-" else Path(token_file).read_text()
    except OSError as exc:
        raise click.BadParameter(f"{token_file}: cannot read it ({exc.strerror or exc})",
                                 param_hint="--token-file") from None
    found = text.strip().splitlines()[0].strip() if text.strip() else ""
    if not found:
        where = "stdin" if token_file == "-" else token_file
        raise click.BadParameter(f"{where}: holds no token", param_hint="--token-file")
    return found


def compat_option(command: Callable[..., Any]) -> Callable[..., Any]:
    """--no-compat-check."""
    return click.option(
        "--no-compat-check", "skip_compat", is_flag=True,
        help="Start the workload without first checking its framework builds against the "
             "GPU and driver (for setups the check cannot see, such as NVIDIA's CUDA "
             "forward-compatibility package on a data-centre GPU).",
    )(command)


def _client_factory(collector: str, token: str | None, ca: Path | None,
                    timeout: float, origins: Any = None) -> Callable[[], Any]:
    """Clients of the collector; `origins` (gpubench.client.Origins) says where its
    address and token came from, for the errors."""
    def make() -> Any:
        from gpubench.client import Client

        return Client(collector, token, ca=ca, timeout=timeout, origins=origins)

    return make


def _origins(ctx: click.Context) -> Any:
    """Where --collector and --token came from (the flag or the variable)."""
    from gpubench.cli_shared import connection_origins

    return connection_origins(ctx)


@click.group(context_settings=CONTEXT)
@click.version_option(VERSION, prog_name="gpubench-agent")
def main() -> None:
    """Run the standard gpubench benchmark (Keras EfficientNet B0/B3/B7) on this host,
    with GPU telemetry, and send the results to a collector.

    Exit codes: 0 all ok, 1 a run failed or ran out of memory, 2 bad flags or no
    framework build that runs on this GPU, 3 the collector could not be reached (runs
    stay in the spool), 4 token refused, 130 interrupted (Ctrl-C, or SIGTERM during a
    run).
    """


@main.command(context_settings=CONTEXT, epilog=(
    "Environment: GPUBENCH_COLLECTOR, GPUBENCH_TOKEN, GPUBENCH_SPOOL; for development "
    "without a GPU, GPUBENCH_NVML_TRACE=FILE replays a recorded NVML trace instead of the "
    "driver and GPUBENCH_WORKLOAD_COMMAND replaces `python -m gpubench.agent.workload`."))
@click.option("--models", type=Model(model_names), default="B0,B3,B7", show_default=True,
              help="Comma list of the models to run, in order.")
@click.option("--batch", type=BatchSize(), default="auto", show_default=True,
              help="Batch size per GPU. 'auto': search the largest batch that fits (recorded) "
                   "and time the largest power of two that fits and leaves at least 8 training "
                   "steps an epoch; 'largest': time the largest that fits; N: time N (a run "
                   "that runs out of memory then ends so).")
@click.option("--quick", is_flag=True,
              help="B0 only, at the article's Tesla T4 batch (128), the protocol's float32: a "
                   "comparable figure in about a minute on a large GPU.")
@agent_options("run")
@RUNNER_OPTIONS
@compat_option
@collector_options
@click.option("--offline", is_flag=True, help="Do not send anything; keep runs in the spool.")
@spool_option
@click.option("--sample-hz", type=click.FloatRange(min=0.1, max=100), default=10.0,
              show_default=True, help="GPU telemetry samples per second.")
@click.option("--trace", "trace_path", type=click.Path(dir_okay=False, path_type=Path),
              help="Also write every raw telemetry sample to this file (JSON lines).")
@click.option("--idle-timeout", type=click.FloatRange(min=0), default=60.0, show_default=True,
              help="Seconds to wait at most, before each model, for the GPU to be idle.")
@click.option("--idle-temperature", type=click.FloatRange(min=0), default=50.0,
              show_default=True, help="The temperature (C) the GPU should be under first.")
@click.option("--label", default="", help="Free text stored with the runs, e.g. 'lab box'.")
@click.option("--json", "as_json", is_flag=True,
              help="Print the run records as JSON on stdout instead of tables.")
@handles_errors
@click.pass_context
def run(ctx: click.Context, models: list[str], batch: tuple[int | None, str], quick: bool,
        runner: str, image: str, gpu_access: str, skip_compat: bool, collector: str | None,
        token: str | None, ca: Path | None, offline: bool, spool_dir: Path | None, sample_hz: float,
        trace_path: Path | None, idle_timeout: float, idle_temperature: float, label: str,
        as_json: bool, **settings: Any) -> int:
    """Run the benchmark: each model in turn, then a summary (and a comparison with
    the collector's runs). Every run is written to the spool before it is sent.

    By default each model's largest batch is searched (a few short trials) and its
    speed is timed at the largest power of two that fits with at least 8 training
    steps an epoch; docs/protocol.md says why.
    """
    from click.core import ParameterSource
    from gpubench.agent.benchmark import Benchmark, IdleRule
    from gpubench.agent.display import RunDisplay
    from gpubench.agent.push import RetryPolicy
    from gpubench.agent.runners.base import WorkloadRequest
    from gpubench.agent.spool import Spool


    if offline and collector:
        if ctx.get_parameter_source("collector") == ParameterSource.ENVIRONMENT:
            collector = None  # --offline wins over an exported GPUBENCH_COLLECTOR
        else:
            raise click.UsageError("--offline and --collector: choose one")
    if quick:
        quick_conflicts = [flag for flag, name in (("--models", "models"), ("--batch", "batch"),
                                                   ("--precision", "precision"))
                           if ctx.get_parameter_source(name) != ParameterSource.DEFAULT]
        if quick_conflicts:
            raise click.UsageError(f"--quick sets {', '.join(quick_conflicts)}: leave them out")
        models, batch = [QUICK_MODEL], (QUICK_BATCH, RULE_QUICK)
    if not offline and not collector:
        raise click.UsageError(
            "give --collector HOST:PORT --token T (or $GPUBENCH_COLLECTOR), or --offline"
        )
    _sigterm_interrupts()
    display = RunDisplay()
    nvml, inventory = _open_host(display)
    try:
        gpu_count = _gpu_count(settings.get("gpus"), inventory, display)
        chosen = _make_runner(runner, image, gpu_count, gpu_access, display)
        given = given_settings(settings, "run")
        given["gpus"] = gpu_count
        given["backend"] = _check_builds(chosen, inventory, gpu_count, given.get("backend"),
                                         display, skip_compat)
        requests = [WorkloadRequest(model, batch=batch[0], batch_rule=batch[1],
                                    settings=given) for model in models]
        _check_settings(requests, inventory)
        if quick and gpu_count == 0 and not (given.get("image_size") or
                                             given.get("limit_images")):
            display.note(QUICK_ON_CPU, style="yellow")
        spool = Spool(spool_dir)
        retry = RetryPolicy()
        origins = None if offline else _origins(ctx)
        unreachable = None
        if not offline:
            from gpubench.agent.preflight import check_collector

            found = check_collector(_client_factory(collector or "", token, ca, retry.call_timeout,
                                                    origins), collector or "", spool.root)
            display.note(found.message, style="" if found.reachable else "yellow")
            unreachable = found.error
        trace = open(trace_path, "a", encoding="utf-8") if trace_path else None  # noqa: SIM115
        try:
            benchmark = Benchmark(
                runner=chosen, spool=spool, inventory=inventory, nvml=nvml, display=display,
                gpu_count=gpu_count, sample_hz=sample_hz,
                idle=IdleRule(timeout=idle_timeout, max_temperature=idle_temperature),
                label=label, trace=trace, retry=retry, log_dir=spool.root / "logs",
                client_factory=None if offline else _client_factory(
                    collector or "", token, ca, retry.call_timeout, origins),
                unreachable=unreachable,
            )
            outcome = benchmark.run(requests)
        finally:
            if trace is not None:
                trace.close()
    finally:
        if nvml is not None:
            nvml.close()
    _report(outcome, display, as_json, collector, token, ca)
    return _exit_code(outcome)


def _check_settings(requests: list[Any], inventory: Any) -> None:
    """Refuse, before anything runs or is spooled, settings the workload would refuse
    (BadSettings, exit 2): each request's as the workload will read them, each
    --memory-limit of a search too. A run without a GPU says why it has none."""
    from gpubench.agent.runners.base import WorkloadRequest

    from gpubench.settings import BadSettings, RunSettings, default_backend

    for request in requests:
        values = {name: value for name, value in request.settings.items() if value is not None}
        values.setdefault("backend", default_backend())
        if isinstance(request, WorkloadRequest):
            values.update(batch=request.batch, batch_rule=request.batch_rule)
        for limit in getattr(request, "limits", ()) or (values.get("memory_limit_bytes"),):
            try:
                RunSettings(**{**values, "model": request.model, "memory_limit_bytes": limit})
            except BadSettings as exc:
                if not values.get("gpus") and inventory.no_gpu_reason:
                    reason = inventory.no_gpu_reason.removesuffix("; running CPU-only")
                    raise BadSettings(f"{exc}; this host has none the run can use "
                                      f"({reason})") from None
                raise


def _sigterm_interrupts() -> None:
    """SIGTERM (`kill`, `docker stop`, a service manager) stops a run as Ctrl-C does: the
    workload is stopped, the model's run recorded as interrupted, the exit code 130."""
    import signal

    def interrupt(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, interrupt)


def _open_host(display: Any, *, as_workload_sees: bool = True) -> tuple[Any, Any]:
    """NVML (the real driver, or a replayed trace) and this host's inventory; with
    `as_workload_sees`, only the GPUs the workload will train on, numbered as CUDA
    numbers them (CUDA_VISIBLE_DEVICES), matched to NVML's devices by UUID."""
    from gpubench.agent import devices
    from gpubench.agent.inventory import open_and_take_inventory, take_inventory
    from gpubench.agent.nvml_replay import FakeNvml

    if os.environ.get(NVML_TRACE_ENV):
        nvml: Any = FakeNvml.from_trace(os.environ[NVML_TRACE_ENV])
        display.note(f"replaying the NVML trace {os.environ[NVML_TRACE_ENV]} (no real GPU is "
                     "read)", style="yellow")
        # The trace stands for the GPUs: this machine's own CUDA devices are not them.
        ask_cuda: Any = lambda: None  # noqa: E731
    else:
        nvml, inventory = open_and_take_inventory()
        if nvml is None or not as_workload_sees:
            return nvml, inventory
        ask_cuda = devices.cuda_uuids
    if not as_workload_sees:
        return nvml, take_inventory(nvml)
    every = nvml.gpu_count()
    nvml, visible = devices.visible_nvml(nvml, ask_cuda=ask_cuda)
    if visible.warning:
        display.note(visible.warning, style="yellow")
    elif os.environ.get(devices.VISIBLE_ENV) is not None:
        display.note(f"GPUs: {visible.how}")
    inventory = take_inventory(nvml)
    if every and not inventory.gpus:
        inventory.no_gpu_reason = (f"{devices.VISIBLE_ENV}={os.environ.get(devices.VISIBLE_ENV)} "
                                   f"leaves none of this host's {every} GPU(s); running CPU-only")
    return nvml, inventory


def _gpu_count(gpus: int | None, inventory: Any, display: Any) -> int:
    """The GPUs to train on: as asked (checked against the host), else 1 or 0."""

    if inventory.no_gpu_reason:
        display.note(inventory.no_gpu_reason, style="yellow")
    available = len(inventory.gpus)
    gpu_count = gpus if gpus is not None else min(available, 1)
    if gpu_count > available:
        raise GpubenchError(f"--gpus: {gpu_count} asked, but this host has {available}",
                            exit_code=EXIT_USAGE)
    if gpu_count == 0:
        display.note("CPU-only run: the figures are labelled CPU and compared as such")
    return gpu_count


def _make_runner(kind: str, image: str, gpu_count: int, gpu_access: str = "auto",
                 display: Any = None) -> Any:
    """The runner that starts the workload: a child process, or the workload image (whose
    way of getting the GPUs is chosen here and said on the console; NoGpuAccess, exit 2,
    when there is none)."""
    import shlex

    if kind == "docker":
        from gpubench.agent.runners.docker import DockerRunner

        runner = DockerRunner(image, gpus=gpu_count > 0, gpu_way=gpu_access)
        access = runner.gpu_access()
        if access is not None and display is not None:
            display.note(f"GPUs: the workload container gets them through {access.line}")
        return runner
    from gpubench.agent.runners.local import LocalRunner

    command = os.environ.get(WORKLOAD_COMMAND_ENV)
    return LocalRunner(shlex.split(command) if command else None)


# Seconds the workload may take to say what it was built for (a CUDA build of torch is
# imported to read its architecture list; a container starts first under docker).
PROBE_TIMEOUT = 120.0


def _check_builds(runner: Any, inventory: Any, gpu_count: int, backend: str | None,
                  display: Any, skip: bool) -> str | None:
    """The backend to run: the workload's framework builds checked against the GPUs the
    run uses (agent/gpubench/agent/compat.py), at the cost of one short child process. Raises
    GpubenchError (exit 2) saying why nothing runs there and what to install; leaves
    `backend` as given on a CPU-only run, with --no-compat-check, or when the workload
    cannot answer (an image older than the check)."""
    if gpu_count == 0:
        return backend  # the CPU runs every build
    if skip:
        display.note("--no-compat-check: the workload's builds are not checked against "
                     "the GPU", style="yellow")
        return backend
    from gpubench.agent import compat

    from gpubench.settings import environment_backend

    asked, asked_by = backend, "--backend"
    if asked is None and environment_backend():
        asked = environment_backend()
        asked_by = f"KERAS_BACKEND={asked}"
    from gpubench.agent.runners.gpu_access import NoGpuAccess

    try:
        output = _probe_output(runner)
        builds = compat.parse_probe_output(output)
    except NoGpuAccess:
        raise
    except Exception as exc:  # noqa: BLE001 - not knowing is no reason to stop the run
        display.note(f"the workload could not say what it was built for ({exc}); its "
                     "builds are not checked against the GPU", style="yellow")
        return backend
    if runner.name == "docker":
        _check_container_sees_gpus(runner, compat.driver_from_probe(output), gpu_count)
    gpus = [compat.Gpu(gpu.name, gpu.compute_capability, gpu.driver_version,
                       gpu.cuda_version) for gpu in inventory.gpus[:gpu_count]]
    where = (f"in the image {runner.image}" if runner.name == "docker"
             else f"in the workload's Python ({runner.command[0]})")
    choice = compat.choose(gpus, builds, asked=asked, asked_by=asked_by, where=where,
                           runner=runner.name)
    display.note(choice.line)
    return choice.backend


def _check_container_sees_gpus(runner: Any, driver: dict[str, Any] | None,
                               gpu_count: int) -> None:
    """Raise NoGpuAccess (exit 2) when the probe's container, given the GPUs as the
    workload will be, saw fewer than the run needs (an image too old to say: no check)."""
    from gpubench.agent.runners.gpu_access import INSTALL_ADVICE, NoGpuAccess

    if driver is None or int(driver.get("devices") or 0) >= gpu_count:
        return
    access = runner.gpu_access()
    seen = driver.get("error") or f"it sees {driver.get('devices')} GPU(s)"
    raise NoGpuAccess(f"the workload container, given the GPUs through "
                      f"{access.line if access else 'no way'}, cannot use {gpu_count} GPU(s): "
                      f"{seen}. {INSTALL_ADVICE}")


def _probe_output(runner: Any) -> str:
    """What `probe --json` prints where the runner runs the workload."""
    import subprocess

    if runner.name == "docker":
        return runner.probe_output()
    done = subprocess.run([*runner.command, "probe", "--json"], stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=PROBE_TIMEOUT, check=False)
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or [""])[-1]
        raise RuntimeError(f"`probe --json` exited with {done.returncode}: {last}")
    return done.stdout


def _exit_code(outcome: Any) -> int:
    from gpubench.errors import AccessDenied

    if outcome.interrupted:
        return EXIT_INTERRUPTED
    push = outcome.push
    if push is not None and push.stopped is not None:
        return EXIT_AUTH if isinstance(push.stopped, AccessDenied) else EXIT_UNAVAILABLE
    if any(run.result.status != 1 for run in outcome.runs):  # 1: RUN_STATUS_OK
        return EXIT_FAILED
    if push is not None and (push.refused or push.damaged):
        return EXIT_FAILED
    return EXIT_OK


def _report(outcome: Any, display: Any, as_json: bool, collector: str | None,
            token: str | None, ca: Path | None) -> None:
    from gpubench.agent.summary import summary_table

    from gpubench import record

    if as_json:
        import json

        click.echo(json.dumps([record.to_dict(run) for run in outcome.runs], indent=1))
        return
    if not outcome.runs:
        return
    display.console.print(summary_table(outcome.runs))
    push = outcome.push
    if push is None or push.stopped is not None or not collector:
        if push is not None and push.left:
            display.note(f"{push.left} run(s) wait in the spool: `gpubench-agent push` sends "
                         "them later")
        return
    _compare(outcome.runs, display, collector, token, ca)


def _compare(runs: list[Any], display: Any, collector: str, token: str | None,
             ca: Path | None) -> None:
    """How each run compares with the collector's other runs like it (the same model and
    comparison key, itself left out), or that there is nothing to compare with yet."""
    from gpubench.agent.summary import others_like, standing

    from gpubench.client import Client
    from gpubench.errors import GpubenchError

    try:
        with Client(collector, token, ca=ca, timeout=10.0) as client:
            for run in runs:
                if run.result.status != 1:
                    continue
                stored = client.iter_runs(model=run.config.model,
                                          backend=run.software.backend or None,
                                          precision=run.config.precision or None)
                shown = standing(run, others_like(run, stored))
                if isinstance(shown, str):
                    display.note(shown)
                else:
                    display.console.print(shown)
    except GpubenchError as exc:
        display.note(f"no comparison: {exc}", style="yellow")


@main.command("largest-batch", context_settings=CONTEXT)
@click.option("--models", type=Model(model_names), default="B0,B3,B7", show_default=True,
              help="Comma list of the models to search, in order.")
@click.option("--memory-limit", "limits", metavar="SIZE", multiple=True,
              help="Search as a GPU of this size, e.g. 16GiB (repeat, or give a comma "
                   "list: 8GiB,16GiB,48GiB) [default: the whole card].")
@agent_options("largest-batch")
@RUNNER_OPTIONS
@compat_option
@click.option("--json", "as_json", is_flag=True, help="Print the results as JSON.")
@handles_errors
def largest_batch(models: list[str], limits: tuple[str, ...], runner: str, image: str,
                  gpu_access: str, skip_compat: bool, as_json: bool, **settings: Any) -> int:
    """Only the batch search: the largest batch each model trains at on this GPU, or on
    a GPU of each --memory-limit. Nothing is trained to the end, recorded or sent."""
    from gpubench.agent.display import RunDisplay
    from gpubench.agent.largest import print_table, search_models
    from gpubench.agent.runners.base import SearchRequest

    sizes = tuple(_size(part.strip()) for given in limits for part in given.split(",")
                  if part.strip())
    given = given_settings(settings, "largest-batch")
    display = RunDisplay()
    nvml, inventory = _open_host(display)
    if nvml is not None:
        nvml.close()
    gpu_count = _gpu_count(given.get("gpus"), inventory, display)
    chosen = _make_runner(runner, image, gpu_count, gpu_access, display)
    given["gpus"] = gpu_count
    given["backend"] = _check_builds(chosen, inventory, gpu_count, given.get("backend"), display,
                                     skip_compat)
    requests = [SearchRequest(model, limits=sizes, settings=given) for model in models]
    _check_settings(requests, inventory)
    found, failed = search_models(chosen, requests, display)
    if as_json:
        import json

        click.echo(json.dumps(found, indent=1))
    elif found:  # every search failed: its error was said, and there is no table
        from rich.console import Console

        print_table(found, Console())
    return EXIT_FAILED if failed else EXIT_OK


@main.command(context_settings=CONTEXT)
@collector_options
@spool_option
@handles_errors
def push(collector: str | None, token: str | None, ca: Path | None,
         spool_dir: Path | None) -> int:
    """Send the runs waiting in the spool to the collector."""
    from gpubench.agent.push import FreshConnection, RetryPolicy, push_pending
    from gpubench.agent.spool import Spool
    from rich.console import Console

    from gpubench.errors import AccessDenied

    if not collector:
        raise click.UsageError("give --collector HOST:PORT (or $GPUBENCH_COLLECTOR)")
    console = Console(stderr=True)
    spool = Spool(spool_dir)
    retry = RetryPolicy()
    origins = _origins(click.get_current_context())
    with FreshConnection(_client_factory(collector, token, ca, retry.call_timeout,
                                         origins)) as client:
        report = push_pending(
            spool, client, retry,
            on_retry=lambda n, pause, error: console.print(
                f"{error}; trying again in {pause:.1f} s", style="yellow", highlight=False),
        )
    for name, reason in report.damaged:
        console.print(f"damaged spool file moved to {spool.root / 'damaged' / name}: {reason}",
                      style="red", highlight=False)
    for name, reason in report.refused:
        console.print(f"refused by the collector, moved to {spool.root / 'refused' / name}: "
                      f"{reason}", style="red", highlight=False)
    console.print(f"sent {len(report.sent)} run(s); {report.left} pending", highlight=False)
    if report.stopped is not None:
        console.print(str(report.stopped), style="red", highlight=False)
        return EXIT_AUTH if isinstance(report.stopped, AccessDenied) else EXIT_UNAVAILABLE
    return EXIT_OK if report.ok else EXIT_FAILED


@main.command(context_settings=CONTEXT)
@spool_option
@click.option("--json", "as_json", is_flag=True, help="Print the listing as JSON.")
@handles_errors
def status(spool_dir: Path | None, as_json: bool) -> int:
    """List the spool: runs pending, sent, refused and damaged."""
    from gpubench.agent.spool import FOLDERS, Spool

    from gpubench.errors import InvalidRecord

    spool = Spool(spool_dir)
    rows = []
    for folder in FOLDERS:
        for entry in spool.entries(folder):
            row = {"folder": folder, "file": entry.name, "model": "", "gpu": "",
                   "status": "", "created": "", "reason": entry.reason}
            if folder != "damaged":
                try:
                    run = spool.load(entry)
                except InvalidRecord as exc:
                    row["reason"] = row["reason"] or str(exc)
                else:
                    from gpubench import record

                    row.update(
                        model=run.config.model,
                        gpu=record.gpu_config_name(run.gpus[0].name if run.gpus else "",
                                                   run.config.gpu_count),
                        status=record.status_name(run.result.status),
                        created=run.created_at.ToDatetime().strftime("%Y-%m-%d %H:%M"),
                    )
            rows.append(row)
    if as_json:
        import json

        click.echo(json.dumps({"spool": str(spool.root), "counts": spool.counts(), "runs": rows},
                              indent=1))
        return EXIT_OK
    from rich.console import Console
    from rich.table import Table

    counts = spool.counts()
    table = Table(title=f"spool {spool.root}: " + ", ".join(f"{n} {k}" for k, n in counts.items()))
    for column in ("folder", "file", "model", "gpu", "status", "created", "reason"):
        table.add_column(column)
    for row in rows:
        table.add_row(*(str(row[c]) for c in ("folder", "file", "model", "gpu", "status",
                                              "created", "reason")))
    Console().print(table)
    return EXIT_OK


@main.command(context_settings=CONTEXT)
@click.option("--json", "as_json", is_flag=True, help="Print the inventory as JSON.")
@handles_errors
def inventory(as_json: bool) -> int:
    """What this host has: CPU, RAM, OS and every GPU the NVIDIA driver sees."""
    from gpubench.agent.display import RunDisplay

    nvml, found = _open_host(RunDisplay(quiet=True), as_workload_sees=False)
    if nvml is not None:
        nvml.close()
    data = found.to_dict()
    if as_json:
        import json

        click.echo(json.dumps(data, indent=1))
        return EXIT_OK
    from rich.console import Console
    from rich.table import Table

    console = Console()
    host = data["host"]
    console.print(f"{host['cpu_model']}, {host['cpu_cores']} cores, "
                  f"{int(host['ram_bytes']) / (1 << 30):.0f} GiB RAM, {host['os']}",
                  highlight=False)
    if found.no_gpu_reason:
        console.print(found.no_gpu_reason, style="yellow", highlight=False)
    if data["gpus"]:
        table = Table()
        columns = ("index", "name", "memory", "driver", "CUDA", "compute", "ECC", "power limit",
                   "PCIe", "persistence")
        for column in columns:
            table.add_column(column)
        for gpu in data["gpus"]:
            table.add_row(
                str(gpu.get("index", 0)), gpu["name"],
                f"{int(gpu['memory_total_bytes']) / (1 << 30):.1f} GiB",
                gpu["driver_version"], gpu["cuda_version"], gpu["compute_capability"],
                gpu["ecc_mode"], f"{gpu['power_limit_watts']:.0f} W",
                f"gen {gpu['pcie_generation']} x{gpu['pcie_width']}", gpu["persistence_mode"],
            )
        console.print(table)
    for name, why in found.missing.items():
        console.print(f"{name}: not available ({why})", style="yellow", highlight=False)
    return EXIT_OK


@main.command(context_settings=CONTEXT)
@click.option("--json", "as_json", is_flag=True, help="Print the models as JSON.")
@handles_errors
def models(as_json: bool) -> int:
    """The benchmark's models and their parameter counts (asks the workload)."""
    import shlex
    import subprocess

    from gpubench.agent.runners.local import workload_command

    command = os.environ.get(WORKLOAD_COMMAND_ENV)
    argv = [*(shlex.split(command) if command else workload_command()), "models"]
    if as_json:
        argv.append("--json")
    # The framework's start-up log (TensorFlow's, CUDA's) is shown only if it fails.
    done = subprocess.run(argv, stderr=subprocess.PIPE, text=True, errors="replace",
                          check=False)
    if done.returncode != 0:
        said = done.stderr.strip().splitlines()[-TAIL_LINES:]
        click.echo("\n".join(said), err=True)
        raise GpubenchError(f"the workload ({shlex.join(argv)}) exited with code "
                            f"{done.returncode}" + (f": {said[-1]}" if said else ""))
    return EXIT_OK


if __name__ == "__main__":  # pragma: no cover
    main()
