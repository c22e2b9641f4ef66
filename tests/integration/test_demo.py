"""`make demo` end to end: the real commands, a real collector process, a real run, from a
clean checkout of the committed tree, twice."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from terminal import popen_with_ctrl_c

from gpubench.collector.queries import RunFilter
from gpubench.collector.store import Store

ROOT = Path(__file__).resolve().parents[2]
VENV = Path(sys.executable).parent.parent


# What a clean tree has none of: what `make` and the demo leave (.tools: what `make test`
# fetches, whose links point outside it), and the generated code.
LEFT_BY_USE = (".venv", ".demo", ".tools", ".git", "__pycache__", ".pytest_cache", ".ruff_cache",
               "*.egg-info", "build", "dist", "*_pb2.py", "*_pb2.pyi", "*_pb2_grpc.py")


def is_git_checkout(root: Path) -> bool:
    """Whether `root` is the top of a git checkout that git can read (not a release
    tarball or a `git archive` copy)."""
    if not (root / ".git").exists():
        return False
    found = subprocess.run(["git", "-C", str(root), "rev-parse", "--show-toplevel"],
                           capture_output=True, text=True, check=False)
    return found.returncode == 0 and Path(found.stdout.strip()).resolve() == root.resolve()


def clean_checkout(tmp_path: Path) -> Path:
    """A clean tree of this project (no .venv, no .demo, no wire code): a `git clone` of
    the committed HEAD in a checkout; from a tarball or `git archive` copy, a copy of the
    tree without what using it leaves."""
    repo = tmp_path / "repo"
    if not is_git_checkout(ROOT):
        shutil.copytree(ROOT, repo, ignore=shutil.ignore_patterns(*LEFT_BY_USE))
        return repo
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], check=True,
                          capture_output=True, text=True).stdout.strip()
    subprocess.run(["git", "clone", "-q", "--no-checkout", str(ROOT), str(repo)], check=True)
    subprocess.run(["git", "-C", str(repo), "checkout", "-q", head], check=True)
    return repo


def make(repo: Path, target: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    """`make TARGET` in the checkout, with this virtual environment: `-o` keeps make from
    installing into it again (the checkout's files are newer than its stamp), which would
    point its editable install at the temporary checkout."""
    return subprocess.run(["make", "-s", "-o", f"{VENV}/.installed", target, f"VENV={VENV}"],
                          cwd=repo, env=env,
                          capture_output=True, text=True, timeout=900)


def demo_env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("GPUBENCH_") and k != "MAKEFLAGS"}
    env.update(GPUBENCH_CACHE=str(tmp_path / "cache"), COLUMNS="80")
    return env


def stored_runs(db: Path) -> list:
    store = Store(db)
    try:
        runs, _ = store.runs.list(RunFilter(), page_size=20)
    finally:
        store.close()
    return runs


@pytest.mark.slow
@pytest.mark.e2e
def test_make_demo_twice_from_a_clean_checkout(tmp_path: Path) -> None:
    repo = clean_checkout(tmp_path)
    env = demo_env(tmp_path)
    first = make(repo, "demo", env)
    # Step headings wrap at 80 columns: compare with the white space folded.
    out = " ".join((first.stdout + first.stderr).split())
    assert first.returncode == 0, out[-4000:]
    assert f"a first demo: its database, spool and token go to {repo / '.demo'}" in out
    # The refusal to mix unlike runs names what differs; the mixed comparison shows both.
    assert "differ in" in out and "image_size (224, 64" in out
    assert "1x NVIDIA H200" in out and "CPU" in out
    # The article's T4 in a section of its own, with how it was made unlike the runs.
    assert "published figures: transcribed, not measured by gpubench" in out
    assert "1x Tesla T4" in out and "weights imagenet" in out
    assert "B0 leaderboard" in out
    # Where this run stands, and what to try next.
    assert "where you stand" in out and "measured runs (yours in bold)" in out
    # The measured runs' ratios, named as `gpubench compare` names them, fastest first, each
    # with what makes it not like for like; the published figures are set against nothing.
    assert "the published figures are not set against it" in out
    assert "(1x Tesla T4): speedup" not in out
    # A CPU smoke run at 64 px is like none of the H200's runs: each is named with what
    # differs and no ratio (a ratio of unlike work printed 3x to 12x for the same two runs).
    assert "x as many" not in out
    unlike = re.findall(r"\(1x NVIDIA H200\): not like yours in ([a-z0-9 ,-]+?): no speedup",
                        out)
    assert len(unlike) == 3 and all("image size" in words for words in unlike), unlike
    assert not re.search(r"\(1x NVIDIA H200\): speedup", out)
    # Every line fits 80 columns (a table's padding aside); only a word wider than that (a
    # long path) stands alone past it.
    wide = [line for line in (first.stdout + first.stderr).splitlines()
            if len(line.rstrip()) > 80 and " " in line.strip()]
    assert not wide, wide
    assert "what now: the collector served 127.0.0.1:" in out
    assert re.search(r"the results site answers at http://127\.0\.0\.1:\d+/", out)
    assert "web --token-file .demo/token" in out
    assert out.count("collector stopped") == 1
    for command in ("runs list --model B0", "compare --model B0 --allow-mixed",
                    "leaderboard --model B0"):
        assert f".venv/bin/gpubench {command}" in out or f"gpubench {command}" in out
    assert "Traceback" not in out
    token = (repo / ".demo" / "token").read_text().strip()
    assert token.startswith("gpb_") and (repo / ".demo" / "token").stat().st_mode & 0o077 == 0

    # Every run is in the database once the collector has stopped (it checkpointed).
    db = repo / ".demo" / "collector.duckdb"
    references = sorted((repo / "docs" / "results" / "runs").glob("*.json"))
    runs = stored_runs(db)
    assert sorted(r.submitter for r in runs) == ["demo"] + ["reference"] * len(references)
    assert sum(r.run.published for r in runs) == 3 and not any(r.flagged for r in runs)
    assert not list((repo / ".demo" / "spool" / "pending").glob("*.json"))

    # A second demo starts afresh: says so, and holds one demo run, its own.
    second = make(repo, "demo", env)
    again = " ".join((second.stdout + second.stderr).split())
    assert second.returncode == 0, again[-4000:]
    assert "starting afresh: removed the previous demo's collector.duckdb" in again
    assert again.count("collector stopped") == 1 and "Traceback" not in again
    assert [r.submitter for r in stored_runs(db)].count("demo") == 1

    cleaned = make(repo, "clean", env)
    assert cleaned.returncode == 0 and "removed .demo/" in cleaned.stdout
    assert not (repo / ".demo").exists()


def test_a_failed_step_says_what_failed_and_why(tmp_path: Path) -> None:
    repo = clean_checkout(tmp_path)
    broken = repo / "docs" / "results" / "runs" / "h200-b0-quick.json"
    broken.write_text('{"published": false, "run_id": "not a uuid"}')
    done = make(repo, "demo", demo_env(tmp_path))
    assert done.returncode != 0
    assert "demo: importing the reference runs failed with exit code 6" in " ".join(
        done.stderr.split())
    assert "h200-b0-quick.json" in done.stderr  # the collector's own error, above it
    assert "Traceback" not in done.stderr and "CalledProcessError" not in done.stderr
    assert "what now" not in done.stdout and "setting up" not in done.stdout


def test_a_demo_does_not_start_afresh_while_a_collector_serves_its_database(
        tmp_path: Path) -> None:
    """`make demo` again while the collector its "what now" suggested still serves
    .demo/collector.duckdb: it stops with what to do, and removes nothing (before, it
    deleted the database under the collector and exited 0)."""
    demo_dir = tmp_path / "demo"
    db = demo_dir / "collector.duckdb"
    demo_dir.mkdir()
    Store(db).close()
    (demo_dir / "token").write_text("gpb_the-previous-demos\n")
    bin_dir = Path(sys.executable).parent
    env = {**demo_env(tmp_path), "GPUBENCH_DEMO_DIR": str(demo_dir)}
    server = subprocess.Popen([str(bin_dir / "gpubench-collector"), "serve", "--db", str(db),
                               "--port", "0"], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL, text=True)
    try:
        # Serving: the collector says so, on its first line, once its database is open.
        assert server.stdout is not None
        assert "collector serving on" in server.stdout.readline()
        done = subprocess.run([sys.executable, str(ROOT / "scripts" / "demo.py")], env=env,
                              cwd=tmp_path,
                              capture_output=True, text=True, timeout=300)
    finally:
        server.terminate()
        server.wait(timeout=60)
    said = " ".join(done.stderr.split())
    assert done.returncode == 1, done.stdout + done.stderr
    assert "demo: starting afresh failed with exit code 1" in said, said
    assert "collector.duckdb is in use by another process" in said
    assert "stop it (Ctrl-C in its terminal), then run `make demo` again" in said
    assert db.exists() and (demo_dir / "token").exists()
    assert not [line for line in (done.stdout + done.stderr).splitlines() if len(line) > 80]


@pytest.mark.e2e  # the demo's collector, site and agent, then a Ctrl-C: make test-e2e
def test_ctrl_c_in_the_demo_says_so_before_the_collector_stops(tmp_path: Path) -> None:
    """A Ctrl-C while the agent runs (the terminal signals the demo's whole process
    group): the demo says it was interrupted, then stops the site and the collector,
    whose own "collector stopped" comes after; before, that came first, then
    "interrupted", as if the collector had stopped on its own."""
    import shlex
    import signal
    import time

    fake = ROOT / "tests" / "agent" / "fake_workload.py"
    env = {**demo_env(tmp_path), "GPUBENCH_DEMO_DIR": str(tmp_path / "demo"),
           "GPUBENCH_WORKLOAD_COMMAND": shlex.join([sys.executable, str(fake)]),
           "FAKE_WORKLOAD_MODE": "hang"}
    # As from a terminal: the demo and its agent must not inherit an ignored SIGINT.
    demo = popen_with_ctrl_c([sys.executable, str(ROOT / "scripts" / "demo.py")], env=env,
                             cwd=tmp_path, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True, start_new_session=True)
    said: list[str] = []
    try:
        assert demo.stdout is not None
        deadline = time.monotonic() + 240
        for line in demo.stdout:
            said.append(line)
            if "B0: tensorflow" in line or time.monotonic() > deadline:
                break
        time.sleep(0.5)
        os.killpg(demo.pid, signal.SIGINT)  # what the terminal sends on Ctrl-C
        rest, _ = demo.communicate(timeout=120)
    finally:
        if demo.poll() is None:
            os.killpg(demo.pid, signal.SIGKILL)
            demo.wait()
    text = "".join(said) + rest
    assert demo.returncode == 130, text
    interrupted = text.find("demo: interrupted; stopping the results site and the collector")
    stopped = text.find("collector stopped")
    assert 0 <= interrupted < stopped, text
    assert "what now" not in text
