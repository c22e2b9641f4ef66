#!/usr/bin/env python3
"""Where a training step of gpubench's transformer goes on the GPU: the kernels that run.

Builds the model as the run does (gpubench.agent.workload.network.prepare_network: the
math mode, the precision, the compiled model, torch_async), trains a few steps eagerly
(no CUDA graphs, so that the profiler sees each kernel), then profiles `--steps` steps
with torch.profiler and prints the kernels that took the most GPU time, the attention
kernel among them (a name with "flash" is the flash-attention kernel), and the host's
and the GPU's time a step.

    python3 bench/transformer_kernels.py --model GPT2-small --precision mixed_bfloat16 \\
        --batch 16 [--out trace.json]

Needs torch on a CUDA GPU; run from the checkout (agent/ and the root on PYTHONPATH).
"""

from __future__ import annotations

import argparse
import sys
import time


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="GPT2-small")
    parser.add_argument("--precision", default="mixed_bfloat16")
    parser.add_argument("--math-mode", default="tf32")
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--top", type=int, default=15)
    parser.add_argument("--out", help="write the Chrome trace here")
    args = parser.parse_args(argv)

    from gpubench.agent.workload import backend

    backend.select("torch", 1)
    backend.import_keras()
    import numpy as np
    import torch

    from gpubench.agent.workload import custom
    from gpubench.agent.workload.network import prepare_network
    from gpubench.settings import RunSettings

    settings = RunSettings(model=args.model, precision=args.precision, backend="torch",
                           batch=args.batch, math_mode=args.math_mode, cuda_graphs=False)
    network, _ = prepare_network(settings)
    feed = network.gpubench_feeding
    inputs, targets = custom.samples(feed, args.batch, seed=12)
    inputs = torch.from_numpy(np.ascontiguousarray(inputs)).cuda()
    targets = torch.from_numpy(np.ascontiguousarray(targets)).cuda()
    for _ in range(3):
        network.train_on_batch(inputs, targets, return_dict=False)
    torch.cuda.synchronize()
    from torch.profiler import ProfilerActivity, profile

    began = time.perf_counter()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as trace:
        for _ in range(args.steps):
            network.train_on_batch(inputs, targets, return_dict=False)
        torch.cuda.synchronize()
    wall = (time.perf_counter() - began) / args.steps
    kernels = [e for e in trace.key_averages() if e.device_type.name == "CUDA"]
    gpu_total = sum(e.self_device_time_total for e in kernels) / 1e6 / args.steps
    print(f"{args.model} {args.precision} math {args.math_mode} batch {args.batch}: "
          f"a step {wall * 1e3:.1f} ms of wall time under the profiler, "
          f"{gpu_total * 1e3:.1f} ms of GPU kernels")
    print(f"{'GPU ms/step':>11} {'share':>6} {'calls':>6}  kernel")
    for event in sorted(kernels, key=lambda e: -e.self_device_time_total)[:args.top]:
        ms = event.self_device_time_total / 1e3 / args.steps
        print(f"{ms:>11.2f} {ms / 1e3 / gpu_total:>6.1%} {event.count // args.steps:>6}  "
              f"{event.key[:100]}")
    attention = sorted({e.key[:80] for e in kernels
                        if any(w in e.key.lower() for w in ("flash", "fmha", "attention",
                                                            "efficient"))})
    print("attention kernels: " + ("; ".join(attention) or "none found"))
    if args.out:
        trace.export_chrome_trace(args.out)


if __name__ == "__main__":
    main(sys.argv[1:])
