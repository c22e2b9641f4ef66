"""`make demo`: a collector on a local DuckDB file, a benchmark run, a comparison.

Everything goes through the real commands a person would type:

1. the previous demo's state in .demo/ (database, spool, token) is removed, so that every
   demo starts alike and runs any number of times (`make clean` removes .demo/ too);
2. `gpubench-collector import` loads the reference runs (docs/results/runs/*.json) into
   .demo/collector.duckdb: the current code's default run and --quick measured on an
   H200, and the article's published Tesla T4 figures (transcribed, kept apart);
3. `gpubench-collector serve` starts the collector on a free loopback port;
4. `gpubench-collector token create` makes a token against the live collector (kept in
   .demo/token for the commands suggested at the end);
5. `gpubench-agent run` benchmarks this machine (with a GPU: `--quick`, B0 at the
   article's T4 batch; without one: a small, clearly labelled CPU run) and pushes the
   result;
6. `gpubench compare` shows how this machine compares, like for like, with the article's
   T4 in a section of its own; `gpubench leaderboard` ranks the default run's runs;
7. `gpubench-collector web` serves the read-only results site beside the collector; the
   demo checks that its front page answers and gives its address (in a terminal, both
   stay up until Enter is pressed);
8. "where you stand": this run beside the reference runs and the published T4, and what
   to try next.

A step that fails stops the demo with what the command said and its exit code. The
collector is stopped with SIGTERM at the end, as a service manager would.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import textwrap
import time
import urllib.request
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# Where the demo keeps its database, spool and token ($GPUBENCH_DEMO_DIR, else .demo/).
DEMO = Path(os.environ.get("GPUBENCH_DEMO_DIR", ROOT / ".demo")).resolve()
BIN = Path(sys.executable).parent
REFERENCE_RUNS = ROOT / "docs" / "results" / "runs"
# What a demo leaves in DEMO; only these are removed when the next one starts.
STATE = ("collector.duckdb", "collector.duckdb.wal", "spool", "token")
# The ports the "what now" commands start the collector and the results site on again.
SUGGESTED_PORT = 50051
SUGGESTED_SITE_PORT = 8080


class Interrupted(Exception):
    """Ctrl-C during the demo, said already: the collector and the site are stopped after
    that line, so that their own last words ("collector stopped") come after it."""


class StepFailed(Exception):
    """A command of the demo failed: what it was doing, its exit code, what it said."""

    def __init__(self, what: str, code: int, said: str = "") -> None:
        super().__init__(what)
        self.what, self.code, self.said = what, code, said.strip()


def tool(name: str) -> str:
    """The console script installed next to this interpreter."""
    path = BIN / name
    return str(path) if path.exists() else name


def step(text: str) -> None:
    """A step's heading, wrapped at 80 columns."""
    heading = textwrap.fill(text, 80, initial_indent="==> ", subsequent_indent="    ",
                            break_on_hyphens=False, break_long_words=False)
    print(f"\n{heading}", flush=True)


def run(what: str, args: Sequence[str], env: dict[str, str], *, capture: bool = False,
        ok: Sequence[int] = (0,)) -> subprocess.CompletedProcess:
    """Run one command; an exit code not in `ok` raises StepFailed. Uncaptured, its
    output (errors included) goes straight to the terminal; captured, its stderr comes
    with the failure."""
    done = subprocess.run(list(args), env=env, capture_output=capture, text=True)
    if done.returncode not in ok:
        raise StepFailed(what, done.returncode, done.stderr if capture else "")
    return done


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def has_gpu() -> bool:
    smi = shutil.which("nvidia-smi")
    if not smi:
        return False
    return subprocess.run([smi, "-L"], capture_output=True).returncode == 0


def wait_for_port(port: int, proc: subprocess.Popen, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise StepFailed("starting the collector", proc.returncode or 1,
                             "it exited before listening; its error is above")
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.2)
    raise StepFailed("starting the collector", 1, f"it did not listen on port {port} in "
                     f"{timeout:.0f} s")


def is_published(path: Path) -> bool:
    """Whether a reference run is published figures (one that cannot be read counts as
    not: the import says what is wrong with it)."""
    try:
        return bool(json.loads(path.read_text()).get("published", False))
    except (OSError, ValueError, AttributeError):
        return False


def reset() -> None:
    """Remove what the previous demo left (only the demo's own files), and say so; not
    while a collector (the one "what now" suggests starting) still serves its database:
    it would go on serving the deleted file and refuse the new demo's token."""
    from gpubench.collector.database import database_in_use

    DEMO.mkdir(parents=True, exist_ok=True)
    db = DEMO / "collector.duckdb"
    if db.exists() and database_in_use(db):
        raise StepFailed(
            "starting afresh", 1,
            f"{shown(db)} is in use by another process (the collector started after the "
            "last demo?): stop it (Ctrl-C in its terminal), then run `make demo` again; "
            "nothing was removed")
    found = [DEMO / name for name in STATE if (DEMO / name).exists()]
    for path in found:
        if path.is_dir():
            shutil.rmtree(path)
        else:
            path.unlink()
    if found:
        step(f"starting afresh: removed the previous demo's {', '.join(p.name for p in found)} "
             f"from {DEMO}")
    else:
        step(f"a first demo: its database, spool and token go to {DEMO}")


def main() -> int:
    """The demo; its exit code is the agent's (0, or 1 when its run failed), or the
    failed step's."""
    try:
        return demo()
    except StepFailed as failed:
        from gpubench.errors import wrap_message

        said = f": {failed.said}" if failed.said else " (its error is above)"
        print("\n" + wrap_message("demo: ", f"{failed.what} failed with exit code "
                                 f"{failed.code}{said}"), file=sys.stderr, flush=True)
        return failed.code or 1
    except Interrupted:
        return 130
    except KeyboardInterrupt:
        print("\ndemo: interrupted", file=sys.stderr, flush=True)
        return 130


def demo() -> int:
    reset()
    db = DEMO / "collector.duckdb"
    env = dict(os.environ, GPUBENCH_COLLECTOR_DB=str(db))

    references = sorted(REFERENCE_RUNS.glob("*.json"))
    if references:
        published = sum(is_published(p) for p in references)
        step(f"importing {len(references)} reference run(s): {len(references) - published} "
             f"measured on an H200 by this code, {published} published (the article's Tesla "
             "T4, transcribed, kept apart from measured runs)")
        run("importing the reference runs",
            [tool("gpubench-collector"), "import", "--db", str(db), "--submitter", "reference",
             *map(str, references)], env)

    port = free_port()
    address = f"127.0.0.1:{port}"
    step(f"starting the collector on {address} (database {db})")
    # The collector and the site in sessions of their own: a Ctrl-C in the terminal reaches
    # the demo (and the agent), which says so, then stops them itself.
    server = subprocess.Popen([tool("gpubench-collector"), "serve", "--db", str(db),
                               "--port", str(port)], env=env, start_new_session=True)
    site: subprocess.Popen | None = None
    try:
        wait_for_port(port, server)
        created = run("creating the demo's token",
                      [tool("gpubench-collector"), "token", "create", "demo", "--db", str(db)],
                      env, capture=True)
        token = created.stdout.strip().splitlines()[-1].strip()
        token_file = DEMO / "token"
        token_file.write_text(token + "\n")
        token_file.chmod(0o600)
        env.update(GPUBENCH_COLLECTOR=address, GPUBENCH_TOKEN=token)
        site_port = free_port()
        # The site reads through the collector's API with the demo's token ($GPUBENCH_TOKEN).
        site = subprocess.Popen([tool("gpubench-collector"), "web", "--collector", address,
                                 "--port", str(site_port)], env=env, start_new_session=True)
        wait_for_port(site_port, site)

        if has_gpu():
            step("benchmarking this machine's GPU: --quick, B0 at the article's T4 batch (128)")
            settings = ["--quick"]
            compare = ["--model", "B0", "--batch-rule", "quick"]
        else:
            step("no NVIDIA GPU here: a small CPU run of B0 (64 px, 192 training images, "
                 "batch 16, TensorFlow), labelled CPU; its figures are not comparable with GPU "
                 "runs. About a minute: TensorFlow starts, then epoch 1 builds its kernels")
            settings = ["--models", "B0", "--image-size", "64", "--train-images", "192",
                        "--batch", "16"]
            compare = ["--model", "B0", "--allow-mixed"]
        # 1: the run failed or was refused; it is reported in the summary, the demo goes on.
        agent = run("benchmarking this machine (gpubench-agent run)",
                    [tool("gpubench-agent"), "run", *settings, "--spool", str(DEMO / "spool"),
                     "--label", "make demo"], env, ok=(0, 1))

        if "--allow-mixed" in compare:
            step("gpubench compare refuses to put unlike runs side by side, and says why")
            run("gpubench compare", [tool("gpubench"), "compare", "--model", "B0"], env,
                ok=(0, 1))
            step("asked to anyway (--allow-mixed): the runs side by side, with no speedup "
                 "for a run unlike the baseline (the CPU run is a 64 px smoke run)")
        else:
            step("how this machine compares with the H200's --quick run (gpubench compare)")
            alike = subprocess.run([tool("gpubench"), "compare", *compare], env=env)
            if alike.returncode == 0:
                compare = []
            else:
                step("this machine's run is unlike the H200's in what the refusal names; "
                     "compared anyway (--allow-mixed)")
                compare.append("--allow-mixed")
        if compare:
            run("gpubench compare --allow-mixed", [tool("gpubench"), "compare", *compare], env)
        step("the B0 leaderboard: standard runs of the default run's settings and batch rule, "
             "ranked by the median epoch-2 time")
        run("gpubench leaderboard", [tool("gpubench"), "leaderboard", "--model", "B0"], env)
        standing(address, token)
        show_site(site_port)
    except KeyboardInterrupt:
        print("\ndemo: interrupted; stopping the results site and the collector",
              file=sys.stderr, flush=True)
        raise Interrupted from None
    finally:
        if site is not None:
            stop(site)
        stop(server)  # the collector says "collector stopped" itself, once
    what_now(db, port)
    return agent.returncode


def standing(address: str, token: str) -> None:
    """Where the demo's run stands beside the reference runs and the published T4."""
    from demo_standing import standing_tables
    from rich.console import Console

    from gpubench.cli_shared import output_width
    from gpubench.client import Client

    step("where you stand: this run beside the reference runs (B0)")
    with Client(address, token) as client:
        frame = client.list_runs(model="B0", limit=100)
    console = Console(width=output_width(), highlight=False)
    for renderable in standing_tables(frame, you="demo"):
        console.print(renderable)


def show_site(port: int) -> None:
    """Check that the results site's front page answers; in a terminal, keep the site and
    the collector up until Enter is pressed."""
    url = f"http://127.0.0.1:{port}/"
    try:
        with urllib.request.urlopen(url, timeout=30) as page:
            page.read()
    except OSError as exc:
        raise StepFailed(f"opening the results site ({url})", 1, str(exc)) from None
    step(f"the results site answers at {url}: leaderboards, the comparison with a chart, a "
         "page per GPU and per run")
    if sys.stdin.isatty() and sys.stdout.isatty():
        try:
            input("open it in a browser; Enter stops the site and the collector ")
        except EOFError:
            pass


def stop(process: subprocess.Popen) -> None:
    """SIGTERM, as a service manager would; SIGKILL after 30 s."""
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def shown(path: Path | str) -> str:
    """`path` relative to the current folder where it is inside it (shorter to type)."""
    try:
        return str(Path(path).relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def command(*words: str) -> str:
    """A command indented two spaces, continued with a backslash where it would pass 80
    columns (a long path to the console scripts, say), so that it still pastes whole."""
    lines, line = [], " "
    for word in words:
        if len(line) + 1 + len(word) > 78 and line.strip():
            lines.append(line + " \\")
            line = "   "
        line = f"{line} {shlex.quote(word)}"
    lines.append(line)
    return "\n".join(lines)


def what_now(db: Path, port: int) -> None:
    """Where the runs are, and three commands to try next."""
    token = shown(DEMO / "token")
    query = shown(tool("gpubench"))
    collector = shown(tool("gpubench-collector"))
    print(f"""
what now: the collector served 127.0.0.1:{port} during the demo, stopped now.
The runs are kept in {shown(db)}, the demo's token in {token}.
Start the collector again, on 127.0.0.1:{SUGGESTED_PORT} (Ctrl-C stops it):
{command(collector, "serve", "--db", shown(db))}
then, in another terminal, try:
  export GPUBENCH_COLLECTOR=127.0.0.1:{SUGGESTED_PORT} GPUBENCH_TOKEN=$(cat {token})
{command(query, "runs", "list", "--model", "B0")}
{command(query, "compare", "--model", "B0", "--allow-mixed")}
{command(query, "leaderboard", "--model", "B0")}
and the results site, at http://127.0.0.1:{SUGGESTED_SITE_PORT}/:
{command(collector, "web", "--token-file", token)}
`make demo` again starts afresh; `make clean` removes {shown(DEMO)}/.""", flush=True)


if __name__ == "__main__":
    sys.exit(main())
