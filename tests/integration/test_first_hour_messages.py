"""What a newcomer meets in a first hour, at 80 columns: each case runs the real command
(a real collector on port 0 holding the reference runs of docs/results/runs/, the real
results site in front of it) and checks its exit code, its words and that no line of
its output passes 80 columns. The sizes `gpubench fit` takes, click's usage errors in
the project's form, the published runs' short ids, a --gpu or --baseline that names no
GPU with runs, a collector address written as a URL or pointing at the results site,
the start lines, and an empty spool."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from factories import REFERENCE_RUNS, import_reference_runs

from gpubench.errors import ExitCode

BIN = Path(sys.executable).parent
WIDTH = 80
# The first characters of the article's published B0 run's id (docs/results/runs/).
PUBLISHED_B0 = "5b0f5c2e"


@dataclass
class Case:
    """One command: its exit code, and words its stdout or stderr says (white space
    folded, so that wrapping does not matter)."""

    name: str
    command: list[str]
    exit_code: int
    says: tuple[str, ...]
    never: tuple[str, ...] = ()  # words it must not say
    env: dict[str, str] = field(default_factory=dict)


@dataclass
class Scene:
    """A --public-read collector holding the reference runs, the results site in front
    of it (and its start lines), and a folder of the test's own."""

    address: str
    site_port: int
    site_said: str
    tmp: Path


def cases(scene: Scene) -> list[Case]:
    """The table."""
    fit = ["gpubench", "fit", "--model", "B7"]
    return [
        Case("a card's memory without its unit", [*fit, "--memory-limit", "8"], ExitCode.USAGE,
             ("gpubench: error: --memory-limit: '8' has no unit: write 8GiB for 8 GiB",
              "gpubench fit --help")),
        Case("less memory than the smallest card", [*fit, "--memory-limit", "2GiB"],
             ExitCode.USAGE,
             ("gpubench: error: --memory-limit: '2GiB' is less memory than any card the "
              "benchmark knows (the smallest has 3 GiB)",)),
        Case("a card of 8 GiB is answered", [*fit, "--memory-limit", "8GiB"], ExitCode.OK,
             ("B7 on a card of 8 GiB (8.59 GB)", "Published figures")),
        Case("no such model", ["gpubench", "fit", "--model", "B8", "--memory-limit", "16GiB"],
             ExitCode.USAGE, ("gpubench: error: --model: 'B8' is not one of B0, B3, B7 "
                              "(another EfficientNet by its keras.applications name, e.g. "
                              "EfficientNetB5) (see gpubench fit --help)",),
             never=("Usage:", "Error:")),
        Case("a size that is no size", [*fit, "--memory-limit", "eight"], ExitCode.USAGE,
             ("gpubench: error: --memory-limit: 'eight' is not a size: write e.g. 16GiB",),
             never=("Usage:", "Error:")),
        Case("no --model", ["gpubench", "fit", "--memory-limit", "16GiB"], ExitCode.USAGE,
             ("gpubench: error: missing option '--model'",), never=("Usage:", "Error:")),
        Case("the published runs listed by 8 characters",
             ["gpubench", "runs", "list", "--model", "B0"], ExitCode.OK,
             # One model: named in the titles, its column left out for the others'.
             (f"{PUBLISHED_B0} 1x Tesla", "measured runs of B0",
              "published figures (transcribed, not measured by gpubench) of B0")),
        Case("a published run shown by the 8 characters listed",
             ["gpubench", "runs", "show", PUBLISHED_B0], ExitCode.OK,
             (f"run {PUBLISHED_B0}-", "the article")),
        Case("--gpu naming no GPU with runs",
             ["gpubench", "estimate", "--model", "B7", "--epochs", "10", "--gpu", "Tesla T5"],
             ExitCode.NOT_FOUND,
             ("gpubench: error: --gpu 'Tesla T5': no GPU with runs of B7 is named so; did "
              "you mean Tesla T4? (GPUs with runs of B7: NVIDIA H200, Tesla T4)",)),
        Case("--gpu naming a GPU by a part of its name",
             ["gpubench", "runs", "list", "--gpu", "H200"], ExitCode.NOT_FOUND,
             ("gpubench: error: --gpu 'H200': no GPU with runs is named so; did you mean "
              "NVIDIA H200? (GPUs with runs: NVIDIA H200, Tesla T4)",)),
        Case("--baseline naming no GPU with runs",
             ["gpubench", "compare", "--model", "B7", "--precision", "float32", "--baseline",
              "Tesla T5"], ExitCode.NOT_FOUND,
             ("gpubench: error: --baseline 'Tesla T5': no GPU with runs of B7 is named so; "
              "did you mean Tesla T4? (GPUs with runs of B7: NVIDIA H200, Tesla T4)",)),
        Case("--baseline naming a GPU with published figures only",
             ["gpubench", "compare", "--model", "B7", "--precision", "float32", "--baseline",
              "tesla t4"], ExitCode.NOT_FOUND,
             ("gpubench: error: baseline_gpu (--baseline): no runs of 1x tesla t4 to compare "
              "against (found: 1x NVIDIA H200)",)),
        Case("a collector address written as a URL",
             ["gpubench", "--collector", f"http://{scene.address}", "runs", "list"],
             ExitCode.USAGE,
             (f"gpubench: error: the address from --collector is http://{scene.address}, a "
              f"URL: a collector's address is HOST:PORT without a scheme, {scene.address}",
              "--collector HOST:PORT or $GPUBENCH_COLLECTOR")),
        Case("the results site's address given as the collector's",
             ["gpubench", "--collector", f"127.0.0.1:{scene.site_port}", "runs", "list"],
             ExitCode.UNAVAILABLE,
             (f"gpubench: error: 127.0.0.1:{scene.site_port} (the address from --collector) "
              "answers HTTP, not gRPC: that is a web server, such as the results site",
              "not the collector"), never=("HTTP/2", "SETTINGS frame")),
        Case("a leaderboard of a setting with no runs",
             ["gpubench", "leaderboard", "--model", "B0", "--settings", "keras"], ExitCode.OK,
             ("no runs of B0 with settings keras and batch rule steps yet",
              # What it can be asked for instead: the stored runs' settings, most first.
              "stored runs of B0: --settings kernels+")),
        Case("importing runs", ["gpubench-collector", "import", "--db",
                                str(scene.tmp / "a-second-database-for-the-import.duckdb"),
                                *map(str, sorted(REFERENCE_RUNS.glob("published-*.json")))],
             ExitCode.OK, ("3 run(s) stored in", "are left as they were")),
        Case("an empty spool", ["gpubench-agent", "status", "--spool",
                                str(scene.tmp / "empty-spool")], ExitCode.OK,
             ("0 pending, 0 unfinished, 0 sent, 0 refused, 0 damaged",
              "nothing waiting to be sent "
              "(the spool is empty"), never=("folder file",)),
    ]


def too_wide(text: str) -> list[str]:
    """The lines of `text` past WIDTH columns (a table's padding aside); only a word wider
    than the width (a long path) may stand alone past it."""
    return [line for line in text.splitlines()
            if len(line.rstrip()) > WIDTH and " " in line.strip()]


def _environment(scene: Scene, case: Case) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GPUBENCH_", "GRPC_"))}
    env.update(COLUMNS=str(WIDTH), GPUBENCH_COLLECTOR=scene.address, **case.env)
    return env


@pytest.fixture
def scene(collector_factory: Callable[..., Any], tmp_path: Path) -> Iterator[Scene]:
    db = tmp_path / "references.duckdb"
    import_reference_runs(db)
    running = collector_factory(db_path=db, public_read=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GPUBENCH_", "GRPC_"))}
    site = subprocess.Popen([str(BIN / "gpubench-collector"), "web", "--collector",
                             running.address, "--port", "0"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env={**env, "COLUMNS": "80"})
    try:
        assert site.stdout is not None
        # Two lines at 80 columns: the site's address, then the collector it reads.
        said = site.stdout.readline() + site.stdout.readline()
        found = re.search(r"results site on http://127\.0\.0\.1:(\d+)/", said)
        assert found, said
        yield Scene(running.address, int(found.group(1)), said, tmp_path)
    finally:
        site.terminate()
        site.wait(60)


@pytest.mark.e2e  # 18 real commands against a collector and its site: make test-e2e
def test_what_a_newcomer_meets_at_80_columns(scene: Scene) -> None:
    failures = []
    for case in cases(scene):
        done = subprocess.run([str(BIN / case.command[0]), *case.command[1:]],
                              env=_environment(scene, case), capture_output=True, text=True,
                              timeout=120, check=False)
        said = " ".join((done.stdout + done.stderr).split())
        problems = [f"exit {done.returncode}, not {case.exit_code}"] \
            if done.returncode != case.exit_code else []
        problems += [f"does not say {words!r}" for words in case.says if words not in said]
        problems += [f"says {words!r}" for words in case.never if words in said]
        problems += [f"a line of {len(line.rstrip())} columns: {line!r}"
                     for line in too_wide(done.stdout + done.stderr)]
        if problems:
            failures.append(f"{case.name}: {'; '.join(problems)}\n{done.stdout}{done.stderr}")
    assert not failures, "\n\n".join(failures)


def test_the_start_lines_fit_80_columns(scene: Scene, tmp_path: Path) -> None:
    """`gpubench-collector serve` and `web` say where they serve within 80 columns, the
    address on the first line (scripts read it there), however long the database's
    path."""
    assert not too_wide(scene.site_said), scene.site_said
    assert "reading the collector at" in scene.site_said
    db = tmp_path / ("a-folder-with-a-rather-long-name-" * 2) / "collector.duckdb"
    db.parent.mkdir()
    serving = subprocess.Popen([str(BIN / "gpubench-collector"), "serve", "--db", str(db),
                                "--port", "0"], stdout=subprocess.PIPE,
                               stderr=subprocess.DEVNULL, text=True,
                               env={**os.environ, "COLUMNS": "80"})
    try:
        assert serving.stdout is not None
        first, second = serving.stdout.readline(), serving.stdout.readline()
        assert re.match(r"collector serving on 127\.0\.0\.1:\d+ \(plaintext, reads: token\)",
                        first), first
        assert second.strip() == str(db) and not too_wide(first), first + second
    finally:
        serving.terminate()
        serving.wait(60)


GOAWAY = """
import threading
from concurrent import futures
import gpubench.client  # what every command imports before grpc
import grpc
server = grpc.server(futures.ThreadPoolExecutor(2),
                     options=[("grpc.max_connection_idle_ms", 300)])
port = server.add_insecure_port("127.0.0.1:0")
server.start()
channel = grpc.insecure_channel(f"127.0.0.1:{port}")
seen, closed = [], threading.Event()
def watch(state):
    seen.append(state)
    if grpc.ChannelConnectivity.READY in seen and state == grpc.ChannelConnectivity.IDLE:
        closed.set()  # the server closed the idle connection
channel.subscribe(watch, try_to_connect=True)
print("closed" if closed.wait(60) else "still open", flush=True)
"""


@pytest.mark.parametrize("verbosity", [None, "INFO"], ids=["default", "asked-for"])
def test_grpcs_own_info_lines_are_off_unless_asked_for(verbosity: str | None) -> None:
    """A connection a server closes when idle (as the collector does after 120 s) makes
    gRPC's C core log a line of its own on stderr (chttp2_transport.cc ... Got goaway): not
    in a gpubench command's output, unless GRPC_VERBOSITY asks for it."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GRPC_")}
    if verbosity:
        env["GRPC_VERBOSITY"] = verbosity
    done = subprocess.run([sys.executable, "-c", GOAWAY], env=env, capture_output=True,
                          text=True, timeout=120, check=False)
    assert done.returncode == 0 and done.stdout.strip() == "closed", done.stdout + done.stderr
    assert ("Got goaway" in done.stderr) == (verbosity == "INFO"), done.stderr
