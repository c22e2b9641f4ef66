"""`make demo`: a collector on a local DuckDB file, a benchmark run, a comparison.

Everything goes through the real commands a person would type:

1. `gpubench-collector import` loads the reference runs (docs/results/runs/*.json) into
   .demo/collector.duckdb: the current code's default run and --quick measured on an
   H200, and the article's published Tesla T4 figures (transcribed, kept apart);
2. `gpubench-collector serve` starts the collector on a free loopback port;
3. `gpubench-collector token create` makes a token against the live collector;
4. `gpubench-agent run` benchmarks this machine (with a GPU: `--quick`, B0 at the
   article's T4 batch; without one: a small, clearly labelled CPU run) and pushes the
   result;
5. `gpubench compare` shows how this machine compares, like for like, with the article's
   T4 in a section of its own; `gpubench leaderboard` ranks the default run's runs.

The collector is stopped with SIGTERM at the end, as a service manager would.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# Where the demo keeps its database and spool ($GPUBENCH_DEMO_DIR, else .demo/).
DEMO = Path(os.environ.get("GPUBENCH_DEMO_DIR", ROOT / ".demo")).resolve()
BIN = Path(sys.executable).parent
REFERENCE_RUNS = ROOT / "docs" / "results" / "runs"


def tool(name: str) -> str:
    """The console script installed next to this interpreter."""
    path = BIN / name
    return str(path) if path.exists() else name


def step(text: str) -> None:
    print(f"\n==> {text}", flush=True)


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
            raise SystemExit(f"demo: the collector exited early (code {proc.returncode})")
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.2)
    raise SystemExit(f"demo: the collector did not listen on port {port} in {timeout:.0f} s")


def main() -> int:
    DEMO.mkdir(parents=True, exist_ok=True)
    db = DEMO / "collector.duckdb"
    env = dict(os.environ, GPUBENCH_COLLECTOR_DB=str(db))

    references = sorted(REFERENCE_RUNS.glob("*.json"))
    if references:
        published = sum(json.loads(p.read_text()).get("published", False) for p in references)
        step(f"importing {len(references)} reference run(s): {len(references) - published} "
             f"measured on an H200 by this code, {published} published (the article's Tesla "
             "T4, transcribed, kept apart from measured runs)")
        subprocess.run([tool("gpubench-collector"), "import", "--db", str(db),
                        "--submitter", "reference", *map(str, references)], check=True, env=env)

    port = free_port()
    address = f"127.0.0.1:{port}"
    step(f"starting the collector on {address} (database {db})")
    server = subprocess.Popen([tool("gpubench-collector"), "serve", "--db", str(db),
                               "--port", str(port)], env=env)
    try:
        wait_for_port(port, server)
        # A demo before this one left its token: revoke it, so that the name is free again
        # (`token create` replaces a revoked token) and the demo runs any number of times.
        subprocess.run([tool("gpubench-collector"), "token", "revoke", "demo", "--db", str(db)],
                       capture_output=True, env=env)
        created = subprocess.run([tool("gpubench-collector"), "token", "create", "demo",
                                  "--db", str(db)], check=True, capture_output=True, text=True,
                                 env=env)
        token = created.stdout.strip().splitlines()[-1].strip()
        env.update(GPUBENCH_COLLECTOR=address, GPUBENCH_TOKEN=token)

        if has_gpu():
            step("benchmarking this machine's GPU: --quick, B0 at the article's T4 batch (128)")
            settings = ["--quick"]
            compare = ["--model", "B0", "--batch-rule", "quick"]
        else:
            step("no NVIDIA GPU here: a small CPU run of B0 (64 px, 240 images, batch 16, "
                 "TensorFlow), labelled CPU; its figures are not comparable with GPU runs")
            settings = ["--models", "B0", "--image-size", "64", "--limit-images", "240",
                        "--batch", "16"]
            compare = ["--model", "B0", "--allow-mixed"]
        agent = subprocess.run([tool("gpubench-agent"), "run", *settings,
                                "--spool", str(DEMO / "spool"), "--label", "make demo"], env=env)
        if agent.returncode not in (0, 1):
            return agent.returncode

        if "--allow-mixed" in compare:
            step("gpubench compare refuses to put unlike runs side by side, and says why")
            subprocess.run([tool("gpubench"), "compare", "--model", "B0"], env=env)
            step("asked to anyway (--allow-mixed): the CPU run is a 64 px smoke run, so its "
                 "speedup says nothing about the GPU")
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
            subprocess.run([tool("gpubench"), "compare", *compare], env=env, check=True)
        step("the B0 leaderboard: standard runs of the default run's settings and batch rule, "
             "ranked by the median epoch-2 time")
        subprocess.run([tool("gpubench"), "leaderboard", "--model", "B0"], env=env, check=True)
        return agent.returncode
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=30)
        print(f"\ncollector stopped; runs kept in {db}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
