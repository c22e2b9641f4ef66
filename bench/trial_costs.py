"""Where a warm batch trial's seconds go (torch on one GPU): the allocator's release,
each training step, the peak reading.

The batch search's trials (agent/gpubench/agent/workload/trials.py, `WarmTrials`) train one step at
each batch in one process on one network. This runs the same network and the same
steps at a list of batches, `--steps` steps each, and times each phase, so that a
trial's fixed cost (the first step at a new shape, the allocator giving memory back
and taking it again) stands apart from the step itself. `--keep-cache` leaves the
allocator's cache between trials; `--profile-batch N` records torch's profiler over
the first step at batch N and lists the host calls that took longest.

    python bench/trial_costs.py --model B0 --batches 16,128,1221,128,16 --steps 2 \\
        --out trial-costs.json

`--cudnn-benchmark` and `--no-cudnn-tf32` change how cuDNN picks its kernels, and
the environment (TORCH_CUDNN_V8_API_DISABLED, TORCH_CUDNN_USE_HEURISTIC_MODE_B,
CUDA_MODULE_LOADING) is written into the output, so that variants of the first step's
set-up can be told apart.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from typing import Any


def _seconds(began: float) -> float:
    return round(time.monotonic() - began, 4)


def profile_step(step: Any) -> list[dict[str, Any]]:
    """The host calls one step spent longest in, by self time."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        step()
    rows = sorted(prof.key_averages(), key=lambda e: e.self_cpu_time_total, reverse=True)
    return [{"name": e.key, "calls": e.count, "self_cpu_s": round(e.self_cpu_time_total / 1e6, 4)}
            for e in rows[:25]]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="B0", help="B0, B3 or B7")
    parser.add_argument("--batches", default="16,128,1221,128,16",
                        help="comma list of batches, in order")
    parser.add_argument("--steps", type=int, default=2, help="training steps a trial")
    parser.add_argument("--keep-cache", action="store_true",
                        help="do not give the allocator's cache back between trials")
    parser.add_argument("--profile-batch", type=int, default=0,
                        help="profile the first step at this batch")
    parser.add_argument("--cudnn-benchmark", action="store_true",
                        help="let cuDNN time its algorithms for each new shape")
    parser.add_argument("--no-cudnn-tf32", action="store_true",
                        help="keep cuDNN's float32 convolutions off TF32")
    parser.add_argument("--out", help="write the figures here as JSON")
    args = parser.parse_args()
    os.environ.setdefault("KERAS_BACKEND", "torch")

    from gpubench.agent.workload import backend, memory, trials
    from gpubench.agent.workload.runner import load_framework
    from gpubench.settings import RunSettings

    began = time.monotonic()
    settings = RunSettings(model=args.model, backend="torch", gpus=1)
    load_framework(settings)
    framework_s = _seconds(began)
    import torch

    if args.cudnn_benchmark:
        torch.backends.cudnn.benchmark = True
    if args.no_cudnn_tf32:
        torch.backends.cudnn.allow_tf32 = False
    cudnn_settings = {
        "cudnn_version": torch.backends.cudnn.version(),
        "benchmark": torch.backends.cudnn.benchmark,
        "allow_tf32": torch.backends.cudnn.allow_tf32,
        "environment": {name: value for name, value in os.environ.items()
                        if name.startswith(("TORCH_CUDNN", "CUDNN", "CUDA_MODULE"))},
    }
    warm = trials.WarmTrials(settings)
    began = time.monotonic()
    network = warm._prepare()
    build_s = _seconds(began)
    rows = []
    for batch in (int(b) for b in args.batches.split(",")):
        row: dict[str, Any] = {"batch": batch}
        began = time.monotonic()
        if args.keep_cache:
            memory.reset_peaks("torch", 1)
        else:
            memory.start_trial("torch", 1)
        row["release_s"] = _seconds(began)
        began = time.monotonic()
        x, y = warm._batch(batch)
        row["data_s"] = _seconds(began)

        def step(x: Any = x, y: Any = y) -> None:
            network.train_on_batch(x, y)
            backend.synchronize("torch")

        steps = []
        for number in range(args.steps):
            if number == 0 and batch == args.profile_batch:
                row["profile"] = profile_step(step)
                args.profile_batch = 0
                steps.append(None)
                continue
            began = time.monotonic()
            step()
            steps.append(_seconds(began))
        row["step_s"] = steps
        began = time.monotonic()
        found = memory.read_trial("torch", 1)
        row["read_s"] = _seconds(began)
        row["peak_gib"] = round(found.peak_bytes / 2**30, 2)
        row["reserved_gib"] = round(found.reserved_bytes / 2**30, 2)
        rows.append(row)
        print(json.dumps({k: v for k, v in row.items() if k != "profile"}), flush=True)
    result = {"model": args.model, "keep_cache": args.keep_cache, "framework_s": framework_s,
              "build_s": build_s, "cudnn": cudnn_settings, "trials": rows}
    for row in rows:
        for line in row.get("profile", [])[:12]:
            print(f"  {line['self_cpu_s']:8.3f} s {line['calls']:6d}x {line['name'][:60]}")
    if args.out:
        with open(args.out, "w", encoding="utf-8") as file:
            json.dump(result, file, indent=1)


if __name__ == "__main__":
    main()
