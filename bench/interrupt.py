"""How long `gpubench-agent run` takes to end after a Ctrl-C, and after a run whose
collector the pre-flight check found unreachable: the target is under 2 s for the
first, and no push retries (seconds of them) for the second.

Each case starts the real agent in a process of its own (SIGINT at its default, as in
a terminal), waits for a line of its output, sends SIGINT and times the exit:

- workload: the real workload (Keras on the CPU, tiny settings) in its first epoch,
  where the framework builds its graphs and reads SIGINT late;
- deaf: the stand-in workload (tests/agent/fake_workload.py) ignoring SIGINT, so the
  agent's SIGTERM after its grace period ends it;
- unreachable: no signal; the time from the run's end to the agent's exit with the
  collector down (before: 12-16 s of push retries).

    python bench/interrupt.py [--reps 3] [--cases workload,deaf,unreachable]

Prints each time, then the median of each case against the target.
"""

from __future__ import annotations

import argparse
import os
import queue
import shlex
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
AGENT = [sys.executable, "-m", "gpubench.agent.cli"]
FAKE = ROOT / "tests" / "agent" / "fake_workload.py"
TARGET_S = 2.0
TINY = ["--models", "B0", "--batch", "4", "--image-size", "32", "--limit-images", "40"]


def closed_port() -> int:
    """A loopback port nothing listens on."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def timed(case: str, spool: Path) -> float:
    """Seconds from the signal (or the run's end) to the agent's exit."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUBENCH_")}
    env.update(GPUBENCH_SPOOL=str(spool), COLUMNS="200", GPUBENCH_TOKEN="t",
               PYTHONPATH=os.pathsep.join(str(ROOT / part) for part in ("", "agent", "collector")))
    args = ["run", *TINY, "--collector", f"127.0.0.1:{closed_port()}"]
    wait_for = "epoch 1/" if case == "workload" else "B0: tensorflow"
    if case != "workload":
        env["GPUBENCH_WORKLOAD_COMMAND"] = shlex.join([sys.executable, str(FAKE)])
        env["FAKE_WORKLOAD_MODE"] = "ignore-sigint" if case == "deaf" else "ok"
    if case == "unreachable":
        wait_for = "B0: ok"
    process = subprocess.Popen([*AGENT, *args], env=env, stderr=subprocess.PIPE, text=True,
                               preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    lines: queue.Queue[str | None] = queue.Queue()

    def read() -> None:
        assert process.stderr is not None
        for line in process.stderr:
            lines.put(line)
        lines.put(None)

    threading.Thread(target=read, daemon=True).start()
    while (line := lines.get(timeout=600)) is not None and wait_for not in line:
        pass
    if line is None:
        raise SystemExit(f"{case}: the agent ended before {wait_for!r}")
    if case != "unreachable":
        time.sleep(0.5)
        process.send_signal(signal.SIGINT)
    began = time.monotonic()
    process.wait(timeout=120)
    return time.monotonic() - began


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--cases", default="workload,deaf,unreachable")
    options = parser.parse_args()
    results: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory(prefix="gpubench-interrupt-") as folder:
        for rep in range(options.reps):
            for case in options.cases.split(","):
                seconds = timed(case, Path(folder) / f"{case}-{rep}")
                results.setdefault(case, []).append(seconds)
                print(f"{case:12} rep {rep + 1}: {seconds:5.2f} s", flush=True)
    print()
    for case, times in results.items():
        median = statistics.median(times)
        print(f"{case:12} median {median:5.2f} s (max {max(times):.2f} s), target "
              f"{TARGET_S:.0f} s: {'met' if median < TARGET_S else 'MISSED'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
