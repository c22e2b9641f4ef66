#!/usr/bin/env python3
"""GPU evidence for the benchmark workload: suites of runs, each in its own process.

Runs on the GPU machine from the repository root, with only what that machine has
(torch with CUDA, numpy, pillow) plus Keras carried as wheels; it never imports
TensorFlow or DuckDB and needs no installation of gpubench:

    python bench/gpu_workload_suite.py OUT [--suite protocol,auto,fast,b0-128]
        [--only NAME,...] [--budget-seconds 1500] [--wheels DIR] [--gpus N]

Each run is `python -m gpubench.agent.workload run ...` on the torch backend. Its
events go to OUT/NAME.events.jsonl, its stderr to OUT/NAME.log, and a summary
(the exact command, the figures, the warnings) to OUT/NAME.json. Runs that would
start after the time budget is spent are skipped, and a run still going when it
runs out is stopped. A table comes last, with each B0 run's speed as a ratio to
the protocol-faithful B0 float32 batch-128 run of the same call and the targets.

Suites (the batch sizes of `protocol` are the article's for the RTX 6000 Ada):
  b0-128    B0 float32 batch 128: the protocol-faithful reference
  protocol  B0 / B3 / B7 float32 at batch 512 / 128 / 10
  auto      B0 float32 --batch steps (the largest batch that fits)
  fast      the fastest settings the workload offers: images kept on the GPU, rotation
            and zoom computed per batch (--batched-augmentation), mixed_bfloat16, larger
            batches; B0 with and without --jit-compile, B0 float32 batch 128 (what the
            fast settings alone change), and B7

The synthetic dataset and the Python paths go to $GPUBENCH_CACHE (else OUT/.scratch).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WHEEL_PACKAGES = ("keras", "namex", "optree", "h5py", "absl-py", "rich", "markdown-it-py",
                  "mdurl", "pygments", "click", "packaging")

# Targets on one H200 (docs/protocol.md): seconds, images/s.
TARGET_B0_REFERENCE_EPOCH2 = 5.0
TARGET_FASTEST_B0 = 3500.0
TARGET_FASTEST_B7 = 100.0


@dataclass(frozen=True)
class Config:
    """One run of a suite."""

    name: str
    model: str
    batch: str
    precision: str = "float32"
    extra: tuple[str, ...] = ()
    suite: str = ""

    def arguments(self, gpus: int) -> list[str]:
        """The workload's arguments for this run."""
        return ["run", "--backend", "torch", "--model", self.model, "--batch", self.batch,
                "--precision", self.precision, "--gpus", str(gpus), *self.extra]


# The fast settings: images kept on the GPU, rotation and zoom computed per batch.
FAST = ("--data-on-device", "--batched-augmentation")

SUITES: dict[str, list[Config]] = {
    "b0-128": [Config("b0-128", "B0", "128")],
    "protocol": [
        Config("protocol-b0", "B0", "512"),
        Config("protocol-b3", "B3", "128"),
        Config("protocol-b7", "B7", "10"),
    ],
    "auto": [Config("auto-b0", "B0", "steps")],
    "fast": [
        Config("fast-b0", "B0", "512", "mixed_bfloat16", FAST),
        Config("fast-b0-jit", "B0", "512", "mixed_bfloat16", (*FAST, "--jit-compile")),
        Config("fast-b0-f32", "B0", "128", "float32", FAST),
        Config("fast-b7", "B7", "16", "mixed_bfloat16", FAST),
    ],
}


@dataclass
class Outcome:
    """What one run produced."""

    config: Config
    command: list[str]
    returncode: int | None = None
    seconds: float = 0.0
    events: list[dict] = field(default_factory=list)
    skipped: str = ""

    def first(self, kind: str) -> dict:
        found = [e for e in self.events if e.get("event") == kind]
        return found[-1] if found else {}

    def summary(self) -> dict:
        """The run's figures, for OUT/NAME.json and the table."""
        started, result, error = self.first("started"), self.first("result"), self.first("error")
        epochs = {e["epoch"]: e for e in self.events if e.get("event") == "epoch_finished"}
        peaks = [m.get("allocator_peak_bytes", 0) for m in result.get("memory", [])]
        return {
            "name": self.config.name,
            "suite": self.config.suite,
            "command": " ".join(self.command),
            "status": ("skipped" if self.skipped else "ok" if result
                       else error.get("status", "error") if error else "no result"),
            "skipped": self.skipped,
            "returncode": self.returncode,
            "process_seconds": round(self.seconds, 1),
            "model": self.config.model,
            "precision": self.config.precision,
            "batch_per_gpu": started.get("batch_per_gpu"),
            "global_batch": started.get("global_batch"),
            "epoch_seconds": {n: e.get("wall_seconds") for n, e in sorted(epochs.items())},
            "epoch2_seconds": result.get("epoch2_seconds"),
            "startup_seconds": result.get("startup_seconds"),
            "train_images_per_second": result.get("train_images_per_second"),
            "step_time_median_seconds": result.get("step_time_median_seconds"),
            "step_time_cv": result.get("step_time_cv"),
            "allocator_peak_gib": round(max(peaks) / 2**30, 2) if peaks else None,
            "memory_total_gib": round(result["memory"][0]["memory_total_bytes"] / 2**30, 1)
            if result.get("memory") else None,
            "batch_trials": [e for e in self.events if e.get("event") == "batch_trial"],
            "warnings": result.get("warnings", []),
            "error": error.get("message", ""),
            "versions": {k: started.get(k) for k in ("backend_version", "keras_version",
                                                     "cuda_runtime_version", "cudnn_version",
                                                     "python_version")},
            "dataset": started.get("dataset", {}),
        }


def prepare(scratch: Path, wheels: Path | None) -> dict[str, str]:
    """The children's environment: gpubench importable without installing, Keras on torch.

    `scratch` holds the synthetic dataset and the Python paths ($GPUBENCH_CACHE if set,
    else OUT/.scratch), so that OUT keeps only the evidence.
    """
    # the checkout's three source roots
    paths = [str(ROOT / part) for part in ("", "agent", "collector")]
    if wheels is not None:
        site = scratch / "python" / "site"
        if not site.exists():
            subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps",
                            "--find-links", str(wheels), "--target", str(site),
                            *WHEEL_PACKAGES], check=True)
        paths.append(str(site))
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(paths + [env["PYTHONPATH"]] if env.get("PYTHONPATH")
                                        else paths)
    env["KERAS_BACKEND"] = "torch"
    env["GPUBENCH_CACHE"] = str(scratch)
    env["PYTHONUNBUFFERED"] = "1"
    probe = subprocess.run(
        [sys.executable, "-c",
         "import sys, keras, click, gpubench.agent.workload.cli\n"
         "bad = [m for m in ('tensorflow', 'duckdb') if m in sys.modules]\n"
         "print(keras.__version__, keras.backend.backend(), bad)"],
        env=env, capture_output=True, text=True, check=False, cwd=scratch)
    if probe.returncode != 0:
        raise SystemExit(f"keras/click/gpubench not importable (pass --wheels DIR):\n"
                         f"{probe.stderr[-2000:]}")
    print(f"environment: keras {probe.stdout.strip()}", flush=True)
    return env


def run_one(config: Config, out: Path, env: dict[str, str], gpus: int, deadline: float) -> Outcome:
    """One workload process, its events streamed to OUT/NAME.events.jsonl."""
    command = [sys.executable, "-m", "gpubench.agent.workload", *config.arguments(gpus)]
    outcome = Outcome(config, command)
    started = time.monotonic()
    print(f"[{time.strftime('%H:%M:%S')}] {config.name}: {' '.join(command[1:])}", flush=True)
    with open(out / f"{config.name}.events.jsonl", "w") as events, \
            open(out / f"{config.name}.log", "w") as log:
        child = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=log, text=True, env=env,
                                 start_new_session=True, cwd=env["GPUBENCH_CACHE"])
        stopper = _Stopper(child, deadline)
        for line in child.stdout:  # type: ignore[union-attr]
            events.write(line)
            events.flush()
            try:
                event = json.loads(line)
            except ValueError:
                continue
            outcome.events.append(event)
            _show(config.name, event)
            stopper.check()
        outcome.returncode = child.wait()
        stopper.cancel()
    outcome.seconds = time.monotonic() - started
    (out / f"{config.name}.json").write_text(json.dumps(outcome.summary(), indent=1))
    return outcome


class _Stopper:
    """Stops the child (its whole process group) once the budget's deadline has passed."""

    def __init__(self, child: subprocess.Popen, deadline: float) -> None:
        import threading

        self._child = child
        self._deadline = deadline
        self._timer = threading.Timer(max(1.0, deadline - time.monotonic()), self._stop)
        self._timer.daemon = True
        self._timer.start()

    def _stop(self) -> None:
        if self._child.poll() is None:
            print("  budget spent: stopping the run", flush=True)
            os.killpg(self._child.pid, signal.SIGTERM)
            time.sleep(10)
            if self._child.poll() is None:
                os.killpg(self._child.pid, signal.SIGKILL)

    def check(self) -> None:
        if time.monotonic() > self._deadline:
            self._stop()

    def cancel(self) -> None:
        self._timer.cancel()


def _show(name: str, event: dict) -> None:
    kind = event.get("event")
    if kind == "epoch_finished":
        print(f"  {name}: epoch {event['epoch']} {event['wall_seconds']:.2f} s "
              f"({event.get('train_images_per_second', 0):.0f} img/s)", flush=True)
    elif kind == "batch_trial":
        print(f"  {name}: trial batch {event['batch']} fits={event['fits']} "
              f"peak {event.get('peak_memory_bytes', 0) / 2**30:.1f} GiB "
              f"{event.get('seconds', 0):.0f} s", flush=True)
    elif kind in ("warning", "error"):
        print(f"  {name}: {kind}: {event.get('message', '')[:300]}", flush=True)


def table(summaries: list[dict]) -> str:
    """The runs as a plain-text table, with ratios to the reference run and the targets."""
    reference = next((s for s in summaries if s["name"] == "b0-128" and s["status"] == "ok"), None)
    ref_rate = reference["train_images_per_second"] if reference else None
    head = ("run", "model", "precision", "batch", "epoch 1 s", "epoch 2 s", "img/s", "x b0-128",
            "peak GiB", "status")
    rows = []
    for s in summaries:
        epochs = s["epoch_seconds"]
        rate = s["train_images_per_second"]
        ratio = (f"{rate / ref_rate:.2f}" if rate and ref_rate and s["model"] == "B0" else "")
        rows.append((
            s["name"], s["model"], s["precision"], str(s["batch_per_gpu"] or ""),
            _num(epochs.get(1)), _num(epochs.get(2)), _num(rate, 0), ratio,
            _num(s["allocator_peak_gib"]),
            s["status"] + (f" ({s['skipped']})" if s["skipped"] else ""),
        ))
    widths = [max(len(str(r[i])) for r in [head, *rows]) for i in range(len(head))]
    lines = ["  ".join(str(c).rjust(w) for c, w in zip(r, widths, strict=True))
             for r in [head, *rows]]
    lines.insert(1, "  ".join("-" * w for w in widths))
    lines += ["", *targets(summaries)]
    return "\n".join(lines)


def targets(summaries: list[dict]) -> list[str]:
    """The stretch goals and where this call stands against them."""
    ok = [s for s in summaries if s["status"] == "ok"]
    out = []
    reference = next((s for s in ok if s["name"] == "b0-128"), None)
    if reference:
        e2 = reference["epoch2_seconds"]
        verdict = "met" if e2 <= TARGET_B0_REFERENCE_EPOCH2 else "not met"
        out.append(f"B0 float32 batch 128 epoch 2: {e2:.2f} s "
                   f"(target <= {TARGET_B0_REFERENCE_EPOCH2} s: {verdict})")
    for model, goal in (("B0", TARGET_FASTEST_B0), ("B7", TARGET_FASTEST_B7)):
        rates = [(s["train_images_per_second"] or 0, s["name"]) for s in ok if s["model"] == model]
        if rates:
            best, name = max(rates)
            ratio = (f", {best / reference['train_images_per_second']:.2f}x b0-128"
                     if reference and model == "B0" else "")
            out.append(f"fastest {model}: {best:.0f} img/s ({name}{ratio}; target >= {goal:.0f}: "
                       f"{'met' if best >= goal else 'not met'})")
    return out


def _num(value: float | None, digits: int = 2) -> str:
    return "" if value is None else f"{value:.{digits}f}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path, help="folder for events, logs and summaries")
    parser.add_argument("--suite", default="b0-128,fast,protocol,auto",
                        help=f"comma-separated suites: {', '.join(SUITES)}")
    parser.add_argument("--only", default="", help="comma-separated run names to keep")
    parser.add_argument("--budget-seconds", type=float, default=1500.0,
                        help="no run starts after this many seconds; a running one is stopped")
    parser.add_argument("--wheels", type=Path, default=None,
                        help="folder of wheels for Keras and its dependencies (installed into "
                             "the scratch folder, never into the system)")
    parser.add_argument("--gpus", type=int, default=1, help="GPUs per run")
    parser.add_argument("--extra", default="",
                        help="extra workload arguments for every run, e.g. '--epochs 3'")
    args = parser.parse_args()

    started = time.monotonic()
    deadline = started + args.budget_seconds
    args.out.mkdir(parents=True, exist_ok=True)
    scratch = Path(os.environ.get("GPUBENCH_CACHE") or args.out / ".scratch").resolve()
    env = prepare(scratch, args.wheels.resolve() if args.wheels else None)
    data_started = time.monotonic()
    subprocess.run([sys.executable, "-m", "gpubench.agent.workload", "make-data"], env=env,
                   check=True, cwd=scratch)
    print(f"synthetic data ready in {time.monotonic() - data_started:.1f} s", flush=True)

    only = {n for n in args.only.split(",") if n}
    configs = [Config(c.name, c.model, c.batch, c.precision, c.extra + tuple(args.extra.split()),
                      suite)
               for suite in args.suite.split(",") for c in SUITES[suite]
               if not only or c.name in only]
    summaries = []
    for config in configs:
        if time.monotonic() >= deadline:
            outcome = Outcome(config, [], skipped="budget spent")
            summaries.append(outcome.summary())
            continue
        summaries.append(run_one(config, args.out, env, args.gpus, deadline).summary())
    report = table(summaries)
    (args.out / "table.txt").write_text(report + "\n")
    print("\n" + report, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
