"""`gpubench-agent`: run the standard benchmark on this host and send the results.

A thin layer over the agent's modules: it parses flags, calls them (host.py sets up a run,
runners/ start the workload, benchmark.py runs the models), prints what they return,
catches gpubench.errors.GpubenchError at the top (one line, its exit code) and imports
everything heavy inside the commands, so `--help` answers at once. It never imports the
training framework: the workload runs in a child process or a container.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from functools import wraps
from pathlib import Path
from typing import Any

import click

from gpubench.agent.runners import DEFAULT_RUNNER, RUNNERS
from gpubench.agent.runners import gpu_access as ways
from gpubench.agent.runners.docker import DEFAULT_IMAGE
from gpubench.cli_vocabulary import (
    HELP_CONTEXT,
    MEMORY_SIZE,
    TRAIN_IMAGES,
    card_memory,
    old_spelling,
    say_renamed,
)
from gpubench.errors import ExitCode, GpubenchError, wrap_message
from gpubench.settings import (
    MIN_IMAGES,
    MIN_TRAIN_IMAGES,
    NATIVE_IMAGE_SIZE,
    QUICK_BATCH,
    QUICK_MODEL,
    RULE_QUICK,
    RULE_STEPS,
    VALIDATION_SPLIT,
    BadSettings,
    images_for_training,
    switches,
)
from gpubench.settings_cli import (
    LABEL_HELP,
    Label,
    Model,
    agent_options,
    given_settings,
    label_of,
    model_names,
    settings_label,
)
from gpubench.token_file import TOKEN_FILE_ENV, TOKEN_FILE_HELP, TOKEN_IN_ARGV, token_from_file
from gpubench.usage import FriendlyGroup, example
from gpubench.versions import VERSION

EXIT_OK, EXIT_FAILED = ExitCode.OK, ExitCode.FAILURE
MODEL_WORDS = (" B0, B3, B7 (the protocol's EfficientNets), ViT-B16, GPT2-small, a "
               "keras.applications architecture (ConvNeXtTiny), a .keras file or "
               "path/to/file.py:function.")
EXIT_UNAVAILABLE, EXIT_AUTH, EXIT_INTERRUPTED = (ExitCode.UNAVAILABLE, ExitCode.AUTH,
                                                 ExitCode.INTERRUPTED)

CONTEXT = HELP_CONTEXT
# Lines of a failed workload command's own output shown with its error.
TAIL_LINES = 20
# How many of a run id's characters `status` shows.
SHORT_ID = 8
# --quick is sized for a GPU; on the CPU the same B0 epochs take many minutes.
QUICK_ON_CPU = (
    f"warning: --quick on the CPU trains {QUICK_MODEL} at full size "
    f"({NATIVE_IMAGE_SIZE[QUICK_MODEL]} px, batch "
    f"{QUICK_BATCH}): many minutes here, where a GPU takes about one. The time left shows "
    "once its first training steps are timed. A smoke run instead: --models B0 "
    "--image-size 64 --train-images 192 --batch 16"
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
    click.option("--runner", type=click.Choice(tuple(RUNNERS)), default=DEFAULT_RUNNER,
                 show_default=True,
                 help="Run the workload in a child process, or in the workload image."),
    click.option("--image", default=DEFAULT_IMAGE, show_default=True,
                 help="The workload image (--runner docker): gpubench-workload:latest is "
                      "Keras on torch, gpubench-workload:tensorflow Keras on TensorFlow."),
    click.option("--gpu-access", type=click.Choice((ways.AUTO, *ways.WAYS)),
                 default=ways.AUTO, show_default=True,
                 help="How the workload container is given the GPUs (--runner docker): what "
                      "the agent's own container was given (when it runs in one), the NVIDIA "
                      "Container Toolkit (--gpus all), CDI (nvidia.com/gpu=all), or the "
                      "device nodes and the driver's libraries; auto: the first of these "
                      "this host has, said on the console."),
)


def format_option(what: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """--format table|json, as gpubench's commands say it; the command gets `as_json`.
    --json, the old spelling, is kept hidden for one release: it works, and a person at a
    terminal is told the new one."""

    def decorate(command: Callable[..., Any]) -> Callable[..., Any]:
        @wraps(command)
        def with_format(*args: Any, fmt: str = "table", old_json: bool = False,
                        **kwargs: Any) -> Any:
            if old_json:
                say_renamed("gpubench-agent", "--json", "--format json")
            return command(*args, as_json=old_json or fmt == "json", **kwargs)

        with_format = old_spelling("--json", "old_json", "--format json", is_flag=True)(
            with_format)
        return click.option("--format", "fmt", type=click.Choice(["table", "json"]),
                            default="table", show_default=True,
                            help=f"table for people; json (on stdout) for scripts: {what}.",
                            )(with_format)

    return decorate


def train_images_option(command: Callable[..., Any]) -> Callable[..., Any]:
    """--train-images N; the command gets `limit_images`, the images the workload uses for
    N of them to train an epoch (None: all). --limit-images, the old spelling (the
    images before the validation split), is kept hidden for one release."""

    @wraps(command)
    def with_images(*args: Any, train_images: int | None = None,
                    old_limit_images: int | None = None, **kwargs: Any) -> Any:
        if train_images is not None and old_limit_images is not None:
            raise click.UsageError("--train-images and --limit-images: give --train-images "
                                   "(--limit-images is its old spelling)")
        limit = images_for_training(train_images) if train_images is not None \
            else old_limit_images
        if old_limit_images is not None:
            trained = old_limit_images - int(VALIDATION_SPLIT * old_limit_images)
            say_renamed("gpubench-agent", f"--limit-images {old_limit_images}",
                        f"--train-images {trained}")
        return command(*args, limit_images=limit, **kwargs)

    with_images = old_spelling("--limit-images", "old_limit_images", "--train-images",
                               type=click.IntRange(min=MIN_IMAGES))(with_images)
    return click.option("--train-images", "train_images", metavar="N",
                        type=click.IntRange(min=MIN_TRAIN_IMAGES),
                        help=f"Train on {TRAIN_IMAGES}: fewer make a quick check, "
                             "compared only with runs of as many [default: all, 1709 in "
                             "the benchmark's set].")(with_images)


def collector_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """--collector, --token-file (or $GPUBENCH_TOKEN), --ca, --tls; the command gets `token`.

    The token never comes from argv, where every user of the machine reads it (`ps`):
    --token is refused with what to use instead.
    """

    @wraps(command)
    def with_token(*args: Any, token_file: str | None = None, **kwargs: Any) -> Any:
        kwargs["token"] = token_of(kwargs.get("token"), token_file)
        return command(*args, **kwargs)

    for option in reversed((
        click.option("--collector", metavar="HOST:PORT", envvar="GPUBENCH_COLLECTOR",
                     help="The collector to send runs to [env: GPUBENCH_COLLECTOR]."),
        # Hidden: kept only to refuse it clearly (token_of); the variable is the way in.
        click.option("--token", metavar="TOKEN", envvar="GPUBENCH_TOKEN", hidden=True),
        click.option("--token-file", metavar="FILE", envvar=TOKEN_FILE_ENV,
                     type=click.Path(dir_okay=False, allow_dash=True),
                     help=TOKEN_FILE_HELP),
        click.option("--ca", type=click.Path(dir_okay=False, exists=True, path_type=Path),
                     help="PEM certificate to trust: talk TLS to the collector, verified "
                          "against this CA."),
        click.option("--tls", is_flag=True,
                     help="Talk TLS to the collector, verified against the system's roots "
                          "(implied by --ca)."),
    )):
        with_token = option(with_token)
    return with_token


def token_of(token: str | None, token_file: str | None) -> str | None:
    """The access token: $GPUBENCH_TOKEN, or the one --token-file names ('-': stdin's
    first line); a UsageError (exit 2) when --token was given on the command line."""
    if token is not None and click.get_current_context().get_parameter_source(
            "token") is click.core.ParameterSource.COMMANDLINE:
        raise click.UsageError(TOKEN_IN_ARGV)
    if token_file is None:
        return token
    return token_from_file(token_file)


def compat_option(command: Callable[..., Any]) -> Callable[..., Any]:
    """--no-compat-check."""
    return click.option(
        "--no-compat-check", "skip_compat", is_flag=True,
        help="Start the workload without first checking its framework builds against the "
             "GPU and driver (for setups the check cannot see, such as NVIDIA's CUDA "
             "forward-compatibility package on a data-centre GPU).",
    )(command)


def _client_factory(collector: str, token: str | None, ca: Path | None, tls: bool,
                    timeout: float, origins: Any = None) -> Callable[[], Any]:
    """Clients of the collector; `origins` (gpubench.client.Origins) says where its
    address and token came from, for the errors."""
    def make() -> Any:
        from gpubench.client import Client

        return Client(collector, token, ca=ca, tls=tls, timeout=timeout, origins=origins)

    return make


def _origins(ctx: click.Context) -> Any:
    """Where --collector and --token came from (the flag or the variable)."""
    from gpubench.cli_shared import connection_origins

    return connection_origins(ctx, set_token="--token-file or $GPUBENCH_TOKEN")


class AgentGroup(FriendlyGroup):
    """Usage errors as the agent's other errors: `gpubench-agent: ...`, wrapped."""

    program = "gpubench-agent"
    prefix = "gpubench-agent: "


@click.group(context_settings=CONTEXT, cls=AgentGroup)
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
    "driver and GPUBENCH_WORKLOAD_COMMAND replaces `python -m gpubench.agent.workload`.\n\n"
    + example("gpubench-agent run --quick --offline")))
@click.option("--models", type=Model(model_names), default="B0,B3,B7", show_default=True,
              help="Comma list of the models to run, in order:" + MODEL_WORDS)
@click.option("--quick", is_flag=True,
              help="B0 only, at the article's Tesla T4 batch (128), the protocol's float32: a "
                   "comparable figure in about a minute on a large GPU.")
@click.option("--settings", "label", type=Label(), metavar="LABEL", help=LABEL_HELP)
@agent_options("run", leave_out=("memory_limit_bytes",))
@click.option("--memory-limit", "memory_limit_bytes", metavar="SIZE", callback=card_memory,
              default=None,
              help=f"Train as on a GPU of less memory: {MEMORY_SIZE}; torch caps its "
                   "allocator's share of the card, TensorFlow sets a logical device limit "
                   "[default: the whole card].")
@train_images_option
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
@click.option("--label", "text_label", default="",
              help="Free text stored with the runs, e.g. 'lab box'.")
@format_option("the run records")
@handles_errors
@click.pass_context
def run(ctx: click.Context, models: list[str], quick: bool, label: dict[str, bool] | None,
        limit_images: int | None,
        runner: str, image: str, gpu_access: str, skip_compat: bool, collector: str | None,
        token: str | None, ca: Path | None, tls: bool, offline: bool, spool_dir: Path | None,
        sample_hz: float, trace_path: Path | None, idle_timeout: float,
        idle_temperature: float, text_label: str, as_json: bool, **settings: Any) -> int:
    """Run the benchmark: each model in turn, then a summary (and a comparison with
    the collector's runs). Every run is written to the spool before it is sent.

    By default each model's largest batch is searched (a few short trials) and its
    speed is timed at the largest power of two that fits with at least 8 training
    steps an epoch; docs/protocol.md says why.
    """
    from click.core import ParameterSource

    from gpubench.agent.benchmark import Benchmark, IdleRule
    from gpubench.agent.display import RunDisplay
    from gpubench.agent.host import check_settings, set_up
    from gpubench.agent.push import RetryPolicy
    from gpubench.agent.runners import RunnerOptions, WorkloadRequest
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
        models, settings["batch"] = [QUICK_MODEL], (QUICK_BATCH, RULE_QUICK)
    if not offline and not collector:
        raise click.UsageError(
            "give --collector HOST:PORT (or $GPUBENCH_COLLECTOR) and the token in "
            "--token-file or $GPUBENCH_TOKEN, or --offline"
        )
    old_switches = _switches_given(ctx, settings)
    if label is not None:
        if old_switches:
            raise click.UsageError(f"--settings and {' '.join(old_switches)}: give the "
                                   "settings once, in --settings")
        settings.update(label)
    _sigterm_interrupts()
    display = RunDisplay()
    given = given_settings(settings, "run")
    if limit_images is not None:
        given["limit_images"] = limit_images
    batch, rule = given.pop("batch", None), given.pop("batch_rule", RULE_STEPS)
    with set_up(display, gpus=given.get("gpus"), runner=runner,
                options=RunnerOptions(image=image, gpu_access=gpu_access),
                backend=given.get("backend"), skip_compat=skip_compat) as host:
        given.update(gpus=host.gpu_count, backend=host.backend)
        if old_switches:
            said = settings_label(given, models[0])
            say_renamed("gpubench-agent", " ".join(old_switches),
                        f"--settings {said or 'LABEL'}")
        requests = [WorkloadRequest(model, batch=batch, batch_rule=rule, settings=given)
                    for model in models]
        try:
            check_settings(requests, host.inventory)
        except BadSettings as exc:
            if label is None:
                raise
            raise BadSettings(f"--settings {label_of(label)}: {exc}") from None
        if quick and host.gpu_count == 0 and not (given.get("image_size") or
                                                  given.get("limit_images")):
            display.note(QUICK_ON_CPU, style="yellow")
        spool = Spool(spool_dir)
        retry = RetryPolicy()
        origins = None if offline else _origins(ctx)
        unreachable = None
        if not offline:
            from gpubench.agent.preflight import check_collector
            from gpubench.client import answers_http

            found = check_collector(_client_factory(collector or "", token, ca, tls,
                                                    retry.call_timeout, origins),
                                    collector or "", spool.root)
            if found.error is not None and answers_http(getattr(found.error, "detail", "")):
                # A wrong address, not a collector down: no run would ever reach it.
                raise GpubenchError(f"{found.error}; nothing was run", exit_code=ExitCode.USAGE)
            display.note(found.message, style="" if found.reachable else "yellow")
            unreachable = found.error
        trace = open(trace_path, "a", encoding="utf-8") if trace_path else None  # noqa: SIM115
        try:
            benchmark = Benchmark(
                runner=host.runner, spool=spool, inventory=host.inventory, nvml=host.nvml,
                display=display, gpu_count=host.gpu_count, sample_hz=sample_hz,
                idle=IdleRule(timeout=idle_timeout, max_temperature=idle_temperature),
                label=text_label, trace=trace, retry=retry, log_dir=spool.root / "logs",
                client_factory=None if offline else _client_factory(
                    collector or "", token, ca, tls, retry.call_timeout, origins),
                unreachable=unreachable,
            )
            outcome = benchmark.run(requests)
        finally:
            if trace is not None:
                trace.close()
    _report(outcome, display, as_json, collector, token, ca, tls)
    return _exit_code(outcome)


def _switches_given(ctx: click.Context, values: dict[str, Any]) -> list[str]:
    """The on/off switches given on the command line, as written (--no-cuda-graphs): the
    old spelling of --settings, kept hidden for one release."""
    from click.core import ParameterSource

    from gpubench.settings import SETTINGS

    return [SETTINGS[name].flag if values.get(name) else SETTINGS[name].off_flag
            for name in switches()
            if ctx.get_parameter_source(name) == ParameterSource.COMMANDLINE]


def _sigterm_interrupts() -> None:
    """SIGTERM (`kill`, `docker stop`, a service manager) stops a run as Ctrl-C does: the
    workload is stopped, the model's run recorded as interrupted, the exit code 130."""
    import signal

    def interrupt(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, interrupt)


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
            token: str | None, ca: Path | None, tls: bool) -> None:
    from gpubench import record
    from gpubench.agent.summary import summary_table

    if as_json:
        import json

        click.echo(json.dumps([record.to_dict(run) for run in outcome.runs], indent=1))
        return
    if not outcome.runs:
        return
    display.console.print(summary_table(outcome.runs))
    from gpubench.agent.spool import finished

    unfinished = [run.config.model for run in outcome.runs if not finished(run)]
    if unfinished:
        display.note(f"{', '.join(unfinished)}: did not finish, so kept in the spool's "
                     "unfinished/ folder and not sent (`gpubench-agent push "
                     "--include-failed` sends it)")
    push = outcome.push
    if push is None or push.stopped is not None or not collector:
        if push is not None and push.left:
            display.note(f"{push.left} run(s) wait in the spool: `gpubench-agent push` sends "
                         "them later")
        return
    _compare(outcome.runs, display, collector, token, ca, tls)


def _compare(runs: list[Any], display: Any, collector: str, token: str | None,
             ca: Path | None, tls: bool) -> None:
    """How each run compares with the collector's other runs like it (the same model and
    comparison key, itself left out), or that there is nothing to compare with yet."""
    from gpubench.agent.summary import others_like, standing
    from gpubench.client import Client
    from gpubench.errors import GpubenchError

    try:
        with Client(collector, token, ca=ca, tls=tls, timeout=10.0) as client:
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


@main.command("largest-batch", context_settings=CONTEXT,
              epilog=example('gpubench-agent largest-batch --models B7 --memory-limit 8GiB,16GiB'))
@click.option("--models", type=Model(model_names), default="B0,B3,B7", show_default=True,
              help="Comma list of the models to search, in order:" + MODEL_WORDS)
@click.option("--memory-limit", "limits", metavar="SIZE", multiple=True, callback=card_memory,
              help=f"Search as on a GPU of less memory: {MEMORY_SIZE}; repeat, or give "
                   "a comma list: 8GiB,16GiB,48GiB [default: the whole card].")
@agent_options("largest-batch")
@train_images_option
@RUNNER_OPTIONS
@compat_option
@format_option("the results")
@handles_errors
def largest_batch(models: list[str], limits: tuple[int, ...], limit_images: int | None,
                  runner: str, image: str, gpu_access: str, skip_compat: bool, as_json: bool,
                  **settings: Any) -> int:
    """Only the batch search: the largest batch each model trains at on this GPU, or on
    a GPU of each --memory-limit. Nothing is trained to the end, recorded or sent."""
    from gpubench.agent.display import RunDisplay
    from gpubench.agent.host import check_settings, set_up
    from gpubench.agent.largest import print_table, search_models
    from gpubench.agent.runners import RunnerOptions, SearchRequest

    given = given_settings(settings, "largest-batch")
    if limit_images is not None:
        given["limit_images"] = limit_images
    display = RunDisplay()
    host = set_up(display, gpus=given.get("gpus"), runner=runner,
                  options=RunnerOptions(image=image, gpu_access=gpu_access),
                  backend=given.get("backend"), skip_compat=skip_compat,
                  keep_nvml=False)  # a search samples nothing
    given.update(gpus=host.gpu_count, backend=host.backend)
    requests = [SearchRequest(model, limits=limits, settings=given) for model in models]
    check_settings(requests, host.inventory)
    found, failed = search_models(host.runner, requests, display)
    if as_json:
        import json

        click.echo(json.dumps([row.as_json() for row in found], indent=1))
    elif found:  # every search failed: its error was said, and there is no table
        from rich.console import Console

        print_table(found, Console())
    return EXIT_FAILED if failed else EXIT_OK


@main.command(context_settings=CONTEXT,
              epilog=example('gpubench-agent push --token-file ~/.gpubench-token'))
@collector_options
@spool_option
@click.option("--include-failed", is_flag=True,
              help="Also send the runs that did not finish (interrupted, or failed: "
                   "kept in the spool's unfinished/ folder), which others then see.")
@handles_errors
def push(collector: str | None, token: str | None, ca: Path | None, tls: bool,
         spool_dir: Path | None, include_failed: bool) -> int:
    """Send the runs waiting in the spool to the collector (not those that did not
    finish, unless --include-failed)."""
    from rich.console import Console

    from gpubench.agent.push import FreshConnection, RetryPolicy, push_pending
    from gpubench.agent.spool import Spool
    from gpubench.errors import AccessDenied

    if not collector:
        raise click.UsageError("give --collector HOST:PORT (or $GPUBENCH_COLLECTOR)")
    console = Console(stderr=True)
    spool = Spool(spool_dir)
    retry = RetryPolicy()
    origins = _origins(click.get_current_context())
    with FreshConnection(_client_factory(collector, token, ca, tls, retry.call_timeout,
                                         origins)) as client:
        report = push_pending(
            spool, client, retry, include_failed=include_failed,
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
    unsent = len(spool.unfinished())
    if unsent:
        console.print(wrap_message("", f"{unsent} run(s) that did not finish (interrupted or "
                                   f"failed) kept unsent in {spool.root / 'unfinished'}: "
                                   "--include-failed sends them", console.width),
                      highlight=False, soft_wrap=True)
    if report.stopped is not None:
        console.print(str(report.stopped), style="red", highlight=False)
        return EXIT_AUTH if isinstance(report.stopped, AccessDenied) else EXIT_UNAVAILABLE
    return EXIT_OK if report.ok else EXIT_FAILED


@main.command(context_settings=CONTEXT, epilog=example('gpubench-agent status --format json'))
@spool_option
@format_option("the listing")
@handles_errors
def status(spool_dir: Path | None, as_json: bool) -> int:
    """List the spool: runs pending, sent, refused and damaged."""
    from gpubench.agent.spool import LISTING_COLUMNS, Spool, listing

    spool = Spool(spool_dir)
    rows = listing(spool)
    counts = spool.counts()
    if as_json:
        import json

        click.echo(json.dumps({"spool": str(spool.root), "counts": counts, "runs": rows},
                              indent=1))
        return EXIT_OK
    from rich.console import Console

    from gpubench.tables import text_table

    console = Console(highlight=False, markup=False)
    # The summary wraps at the output's width, not the table's.
    console.print(wrap_message("", f"spool {spool.root}: "
                               + ", ".join(f"{n} {k}" for k, n in counts.items()),
                               console.width), soft_wrap=True)
    if rows:
        # At 80 columns a run's whole file name (its 36-character id) leaves no room: the
        # id's first characters name it, as `gpubench runs list` does; --json has them all.
        shown = [{**row, "file": Path(row["file"]).stem[:SHORT_ID]} for row in rows]
        console.print(text_table(
            ["run" if column == "file" else column for column in LISTING_COLUMNS],
            ([row[column] for column in LISTING_COLUMNS] for row in shown),
            unbroken=("run", "model")))
        console.print(wrap_message("", f"run: the run id's first {SHORT_ID} characters; its "
                                   "file is FOLDER/RUN_ID.json in the spool (--json lists "
                                   "the files)", console.width), soft_wrap=True)
    if not counts["pending"]:
        console.print(wrap_message("", "nothing waiting to be sent" + (
            "" if rows else " (the spool is empty: gpubench-agent run puts its runs there)"),
            console.width), soft_wrap=True)
    return EXIT_OK


@main.command(context_settings=CONTEXT, epilog=example('gpubench-agent inventory'))
@format_option("the inventory")
@handles_errors
def inventory(as_json: bool) -> int:
    """What this host has: CPU, RAM, OS and every GPU the NVIDIA driver sees."""
    from gpubench.agent.display import RunDisplay
    from gpubench.agent.host import read_host
    from gpubench.agent.inventory import GPU_COLUMNS, gpu_cells, host_line

    nvml, found = read_host(RunDisplay(quiet=True), as_workload_sees=False)
    if nvml is not None:
        nvml.close()
    data = found.to_dict()
    if as_json:
        import json

        click.echo(json.dumps(data, indent=1))
        return EXIT_OK
    from rich.console import Console

    from gpubench.tables import text_table

    console = Console()
    console.print(host_line(data), highlight=False)
    if found.no_gpu_reason:
        console.print(found.no_gpu_reason, style="yellow", highlight=False)
    if data["gpus"]:
        console.print(text_table(GPU_COLUMNS, map(gpu_cells, data["gpus"])))
    for name, why in found.missing.items():
        console.print(f"{name}: not available ({why})", style="yellow", highlight=False)
    return EXIT_OK


@main.command(context_settings=CONTEXT, epilog=example('gpubench-agent models --format json'))
@format_option("the models")
@handles_errors
def models(as_json: bool) -> int:
    """The benchmark's models and their parameter counts (asks the workload)."""
    import shlex
    import subprocess

    from gpubench.agent.runners.local import workload_command

    argv = [*workload_command(), "models"]
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
