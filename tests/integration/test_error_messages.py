"""Errors that say what to do, as a person meets them: each case runs the real command
(a real collector on port 0, the agent with its stand-in workload) at 80 columns, and
its message names where the address or token came from and the flag or variable that
sets it, says what to do, and fits 80 columns, wrapped."""

from __future__ import annotations

import errno
import os
import re
import shlex
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from gpubench.agent.cli import main as agent
from gpubench.cli import EXIT_CODES
from gpubench.cli import cli as query
from gpubench.client import DEFAULT_PORT
from gpubench.errors import ExitCode
from gpubench.settings_cli import model_names

BIN = Path(sys.executable).parent
FAKE_WORKLOAD = Path(__file__).resolve().parents[1] / "agent" / "fake_workload.py"
WIDTH = 80


@dataclass
class Case:
    """One command and what its error must say."""

    name: str
    command: list[str]
    exit_code: int
    prefix: str  # the message's first words ("gpubench: error: ")
    says: tuple[str, ...]  # each in the message, its wrapped lines joined
    env: dict[str, str] = field(default_factory=dict)
    first: bool = False  # the message is the first thing on stderr (no gRPC log line)


@dataclass
class Scene:
    """What the cases run against: a collector needing tokens, a --public-read one, the
    database of a `gpubench-collector serve` process, a port nothing listens on, one
    something listens on, and a folder of their own."""

    private: Any
    public: Any
    served_db: Path
    closed_port: int
    taken_port: int
    tmp: Path


def message(stderr: str, prefix: str) -> str:
    """The message starting with `prefix` in `stderr`, its wrapped (indented) lines
    joined with spaces ("" when there is none)."""
    lines = stderr.splitlines()
    starts = [i for i, line in enumerate(lines) if line.startswith(prefix)]
    if not starts:
        return ""
    found = [lines[starts[0]]]
    for line in lines[starts[0] + 1:]:
        if not line.startswith("  "):
            break
        found.append(line.strip())
    return " ".join(found)


def cases(scene: Scene) -> list[Case]:
    """The table: every case the errors must cover."""
    private, public = scene.private.address, scene.public.address
    closed = f"127.0.0.1:{scene.closed_port}"
    agent_run = ["gpubench-agent", "run", "--models", "B0", "--batch", "8"]
    return [
        Case("nothing at the default address", ["gpubench", "runs", "list"],
             ExitCode.UNAVAILABLE, "gpubench: error: ",
             (f"cannot reach the collector at 127.0.0.1:{DEFAULT_PORT} (Connection refused)",
              "the default address", "gpubench-collector serve",
              "--collector HOST:PORT or $GPUBENCH_COLLECTOR")),
        Case("--collector without a port", ["gpubench", "--collector", "127.0.0.1", "runs",
                                            "list"],
             ExitCode.UNAVAILABLE, "gpubench: error: ",
             ("the address from --collector has no port, so gRPC tried 443",
              "--collector HOST:PORT or $GPUBENCH_COLLECTOR", f"listens on {DEFAULT_PORT}")),
        Case("nothing at the address of the variable", ["gpubench", "leaderboard", "--model",
                                                        "B0"],
             ExitCode.UNAVAILABLE, "gpubench: error: ",
             (f"cannot reach the collector at {closed}",
              "the address from $GPUBENCH_COLLECTOR",
              "--collector HOST:PORT or $GPUBENCH_COLLECTOR"),
             env={"GPUBENCH_COLLECTOR": closed}),
        Case("a wrong token from --token", ["gpubench", "runs", "list", "--collector", private,
                                            "--token", "gpb_wrong"],
             ExitCode.AUTH, "gpubench: error: ",
             ("token unknown or revoked", "The token came from --token",
              "works only at the collector whose database made it",
              "--token-file FILE or $GPUBENCH_TOKEN", "where the collector serves --public-read")),
        Case("a left-over token on a --public-read collector",
             ["gpubench", "--collector", public, "runs", "list"],
             ExitCode.AUTH, "gpubench: error: ",
             ("token unknown or revoked", "The token came from $GPUBENCH_TOKEN",
              "or none at all where the collector serves --public-read"),
             env={"GPUBENCH_TOKEN": "gpb_left-over"}),
        Case("no token where one is needed", ["gpubench", "--collector", private, "runs",
                                              "list"],
             ExitCode.AUTH, "gpubench: error: ",
             ("needs a token for listing runs and none was given",
              "does not serve --public-read", "--token-file FILE or $GPUBENCH_TOKEN",
              "gpubench-collector token create NAME")),
        Case("the agent's wrong token", [*agent_run, "--collector", private],
             ExitCode.AUTH, "gpubench-agent: ",
             ("did not accept the token (checking access): token unknown or revoked",
              "The token came from $GPUBENCH_TOKEN",
              "works only at the collector whose database made it",
              "--token-file or $GPUBENCH_TOKEN", "Nothing was run", "--offline"),
             env={"GPUBENCH_TOKEN": "gpb_wrong"}),
        Case("--memory-limit without a GPU", [*agent_run, "--offline", "--memory-limit",
                                              "16GiB"],
             ExitCode.USAGE, "gpubench-agent: ",
             ("--memory-limit makes a GPU behave as a smaller one",
              "it needs --gpus 1 or more", "this host has none the run can use"),
             env={"CUDA_VISIBLE_DEVICES": ""}),
        Case("a port in use", ["gpubench-collector", "serve", "--db",
                               str(scene.tmp / "second.duckdb"), "--port",
                               str(scene.taken_port)],
             ExitCode.FAILURE, "gpubench-collector: ",
             (f"--port {scene.taken_port}: 127.0.0.1:{scene.taken_port} is in use",
              "choose another port with --port (0: any free port)"), first=True),
        Case("a token in a default database that is not there",
             ["gpubench-collector", "token", "create", "alice"],
             ExitCode.USAGE, "gpubench-collector: ",
             (f"no collector database at {scene.tmp}/data/gpubench/collector.duckdb (the "
              "default): give --db FILE, the file `gpubench-collector serve --db` serves, "
              "or set $GPUBENCH_COLLECTOR_DB", "(`serve` makes a new database)"),
             env={"XDG_DATA_HOME": str(scene.tmp / "data")}),
        Case("a backup of a default database that is not there",
             ["gpubench-collector", "backup", str(scene.tmp / "backup")],
             ExitCode.USAGE, "gpubench-collector: ",
             ("no collector database at", "(the default): give --db FILE"),
             env={"XDG_DATA_HOME": str(scene.tmp / "data")}),
        Case("a token made through the collector serving the database",
             ["gpubench-collector", "token", "create", "bob", "--db", str(scene.served_db)],
             ExitCode.OK, "created token ",
             (f"created token 'bob' in the database {scene.served_db}, through the "
              "collector serving it",)),
    ]


@pytest.fixture
def free_default_port() -> Iterator[None]:
    """The default collector port held (bound, not listening) by this test, so nothing
    answers there while it runs; skipped where something listens there already."""
    with socket.socket() as holder:
        try:
            holder.bind(("127.0.0.1", DEFAULT_PORT))
        except OSError as exc:
            if exc.errno != errno.EADDRINUSE:
                raise
            pytest.skip(f"127.0.0.1:{DEFAULT_PORT} is in use here: the default address case "
                        "needs it free")
        yield


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Path]:
    """The database of a `gpubench-collector serve` process on a free port."""
    db = tmp_path / "served.duckdb"
    process = subprocess.Popen([str(BIN / "gpubench-collector"), "serve", "--db", str(db),
                                "--port", "0"], stdout=subprocess.PIPE,
                               stderr=subprocess.DEVNULL, text=True)
    try:
        assert process.stdout is not None
        line = process.stdout.readline()  # said once it serves, its address first
        assert line.startswith("collector serving on 127.0.0.1:"), line
        yield db
    finally:
        process.terminate()
        process.wait(60)


@pytest.fixture
def scene(collector_factory: Callable[..., Any], served: Path, tmp_path: Path,
          free_default_port: None) -> Iterator[Scene]:
    private = collector_factory(db_path=tmp_path / "private.duckdb")
    public = collector_factory(db_path=tmp_path / "public.duckdb", public_read=True)
    with socket.socket() as closed, socket.socket() as taken:
        closed.bind(("127.0.0.1", 0))  # bound, never listening: connections are refused
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        yield Scene(private, public, served, closed.getsockname()[1], taken.getsockname()[1],
                    tmp_path)


def _environment(case: Case, tmp: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUBENCH_")}
    env.update(COLUMNS=str(WIDTH), GPUBENCH_SPOOL=str(tmp / "spool"),
               GPUBENCH_WORKLOAD_COMMAND=shlex.join([sys.executable, str(FAKE_WORKLOAD)]))
    env.update(case.env)
    return env


def test_every_error_says_what_to_do_at_80_columns(scene: Scene) -> None:
    failures = []
    for case in cases(scene):
        done = subprocess.run([str(BIN / case.command[0]), *case.command[1:]],
                              env=_environment(case, scene.tmp), capture_output=True,
                              text=True, timeout=120, check=False)
        said = message(done.stderr, case.prefix)
        problems = [f"exit {done.returncode}, not {case.exit_code}"] \
            if done.returncode != case.exit_code else []
        if not said:
            problems.append(f"no line starts with {case.prefix!r}")
        problems += [f"does not say {words!r}" for words in case.says if words not in said]
        # Only a word wider than the width (a long path) may stand alone past it.
        problems += [f"a line of {len(line)} columns: {line!r}"
                     for line in done.stderr.splitlines()
                     if len(line) > WIDTH and " " in line.strip()]
        if case.first and not done.stderr.startswith(case.prefix):
            problems.append("something is said before the message")
        if problems:
            failures.append(f"{case.name}: {'; '.join(problems)}\n{done.stderr}")
    assert not failures, "\n\n".join(failures)
    # The usage error ran nothing: the spool holds no run.
    assert not list((scene.tmp / "spool").rglob("*.json"))


def test_both_clis_name_the_models_as_the_protocol_does() -> None:
    """`b9` is refused in the protocol's names (B0, B3, B7) by both commands, and `b0`
    is taken as B0."""
    runner = CliRunner()
    for group, args in ((query, ["compare", "--model", "b9"]),
                        (query, ["fit", "--model", "b9", "--memory-limit", "16GiB"]),
                        (agent, ["run", "--models", "b0,b9", "--offline"]),
                        (agent, ["largest-batch", "--models", "b9"])):
        done = runner.invoke(group, args)
        assert done.exit_code == ExitCode.USAGE, done.output
        assert "'b9' is not one of B0, B3, B7" in done.output, done.output
    assert model_names("b0, B7,b0") == ["B0", "B7"]


def test_the_query_clis_exit_codes_are_documented() -> None:
    """Every exit code `gpubench` can end with, in its --help and in README."""
    done = CliRunner().invoke(query, ["--help"], env={"COLUMNS": str(WIDTH)})
    shown = " ".join(done.output.split())
    assert EXIT_CODES in shown
    codes = {value for name, value in vars(ExitCode).items() if name.isupper()}
    assert {int(code) for code in re.findall(r"(\d+) [a-z]", EXIT_CODES)} == codes
    readme = Path(__file__).resolve().parents[2] / "README.md"
    assert EXIT_CODES in " ".join(readme.read_text().split())
