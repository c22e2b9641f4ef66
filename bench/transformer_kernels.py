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

With `--reference`, the same for plain PyTorch's step of the same model
(bench/transformer_reference.py), so that the two lists of kernels can be set side by
side. Each list ends with the GPU time a step by kind of kernel (matrix products,
attention, normalization, element-wise, copies, the optimizer, the loss).

Needs torch on a CUDA GPU; run from the checkout (agent/ and the root on PYTHONPATH).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

# Kinds of kernels by words in their names, the first that matches.
KINDS = (
    ("attention", ("flash", "fmha", "attention", "efficient_attention")),
    ("matrix products", ("gemm", "sm90_xmma", "cutlass", "cublas", "nvjet", "matmul",
                         "splitk", "_gemv")),
    ("optimizer", ("adam", "multi_tensor", "foreach", "fused_adam")),
    ("loss", ("softmax", "nll_loss", "cross_entropy", "logsoftmax")),
    ("normalization", ("layer_norm", "layernorm", "batch_norm", "welford")),
    ("reductions", ("reduce", "sum_kernel", "mean")),
    ("copies", ("copy", "memcpy", "memset", "cat", "transpose", "permute", "fill")),
    ("element-wise", ("elementwise", "vectorized", "unrolled", "gelu", "pointwise",
                      "index")),
)


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="GPT2-small")
    parser.add_argument("--precision", default="mixed_bfloat16")
    parser.add_argument("--math-mode", default="tf32")
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--top", type=int, default=15)
    parser.add_argument("--out", help="write the Chrome trace here")
    parser.add_argument("--reference", action="store_true",
                        help="profile plain PyTorch's step of the model instead")
    args = parser.parse_args(argv)

    if args.reference:
        sys.path.insert(0, str(Path(__file__).parent))
        import torch
        import transformer_reference

        _, step, inputs, targets = transformer_reference.training(
            args.model, args.precision, args.batch, args.math_mode)
        label = "plain PyTorch"
    else:
        step, inputs, targets = _gpubench_step(args)
        label = "gpubench"
        import torch
    for _ in range(3):
        step(inputs, targets)
    torch.cuda.synchronize()
    began = time.perf_counter()
    for _ in range(args.steps):
        step(inputs, targets)
    torch.cuda.synchronize()
    unprofiled = (time.perf_counter() - began) / args.steps
    from torch.profiler import ProfilerActivity, profile

    began = time.perf_counter()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as trace:
        for _ in range(args.steps):
            step(inputs, targets)
        torch.cuda.synchronize()
    wall = (time.perf_counter() - began) / args.steps
    kernels = [e for e in trace.key_averages() if e.device_type.name == "CUDA"]
    gpu_total = sum(e.self_device_time_total for e in kernels) / 1e6 / args.steps
    print(f"{label}: {args.model} {args.precision} math {args.math_mode} batch "
          f"{args.batch}: a step {unprofiled * 1e3:.1f} ms ({wall * 1e3:.1f} ms under "
          f"the profiler), {gpu_total * 1e3:.1f} ms of GPU kernels")
    print(f"{'GPU ms/step':>11} {'share':>6} {'calls':>6}  kernel")
    for event in sorted(kernels, key=lambda e: -e.self_device_time_total)[:args.top]:
        ms = event.self_device_time_total / 1e3 / args.steps
        print(f"{ms:>11.2f} {ms / 1e3 / gpu_total:>6.1%} {event.count // args.steps:>6}  "
              f"{event.key[:100]}")
    attention = sorted({e.key[:80] for e in kernels
                        if any(w in e.key.lower() for w in ("flash", "fmha", "attention",
                                                            "efficient"))})
    print("attention kernels: " + ("; ".join(attention) or "none found"))
    by_kind: dict[str, list[float]] = defaultdict(lambda: [0.0, 0])
    for event in kernels:
        name = event.key.lower()
        kind = next((k for k, words in KINDS if any(w in name for w in words)), "other")
        by_kind[kind][0] += event.self_device_time_total / 1e3 / args.steps
        by_kind[kind][1] += event.count // args.steps
    print("by kind: " + ", ".join(f"{kind} {ms:.1f} ms ({calls})" for kind, (ms, calls)
                                  in sorted(by_kind.items(), key=lambda kv: -kv[1][0])))
    if args.out:
        trace.export_chrome_trace(args.out)


def _gpubench_step(args: argparse.Namespace) -> tuple[Any, Any, Any]:
    """gpubench's model built as the run builds it, its step, and one synthetic batch on
    the GPU."""
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
    inputs, targets = custom.samples(network.gpubench_feeding, args.batch, seed=12)
    inputs = torch.from_numpy(np.ascontiguousarray(inputs)).cuda()
    targets = torch.from_numpy(np.ascontiguousarray(targets)).cuda()

    def step(inputs: Any, targets: Any) -> Any:
        return network.train_on_batch(inputs, targets, return_dict=False)

    return step, inputs, targets


if __name__ == "__main__":
    main(sys.argv[1:])
