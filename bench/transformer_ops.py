#!/usr/bin/env python3
"""The arithmetic and the operations of one training step of gpubench's language model
beside plain PyTorch's (bench/transformer_reference.py), on the CPU: no GPU needed.

Counts the floating-point operations of each step (torch.utils.flop_counter) and the aten
operations torch's profiler sees (each one a kernel on a GPU), with the kinds gpubench's
step runs most, at a short sequence so that the CPU finishes in minutes.

    python3 bench/transformer_ops.py [--tokens 256] [--batch 2]

Run from the checkout with the project installed (`make install`).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from pathlib import Path


def counted(step: Callable[[], None]) -> tuple[float, dict[str, int]]:
    """GFLOP of a step and the count of each aten operation it runs."""
    from torch.profiler import ProfilerActivity, profile
    from torch.utils.flop_counter import FlopCounterMode

    step()  # the optimizer's state and every lazy initialisation, outside the counts
    with FlopCounterMode(display=False) as flops:
        step()
    with profile(activities=[ProfilerActivity.CPU]) as trace:
        step()
    return flops.get_total_flops() / 1e9, {e.key.removeprefix("aten::"): e.count
                                            for e in trace.key_averages()
                                            if e.key.startswith("aten::")}


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tokens", type=int, default=256)
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--top", type=int, default=12, help="operations to list")
    args = parser.parse_args(argv)
    os.environ["KERAS_BACKEND"] = "torch"
    import keras
    import numpy as np
    import torch

    from gpubench.agent.workload import transformers

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import transformer_reference as reference

    rng = np.random.default_rng(12)
    shape = (args.batch, args.tokens)
    tokens = rng.integers(0, reference.VOCABULARY, shape).astype("int32")
    targets = rng.integers(0, reference.VOCABULARY, shape).astype("int32")

    model = transformers.gpt2_small(sequence=args.tokens)
    model.compile(optimizer=keras.optimizers.Adam(1e-3),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    found = {"gpubench": counted(lambda: model.train_on_batch(tokens, targets))}

    torch.nn.Module.cuda = lambda self: self  # the reference's model, on the CPU
    net = reference.build(reference.LM)
    net.positions = torch.nn.Parameter(net.positions[:args.tokens].detach().clone())
    optimizer = torch.optim.Adam(net.parameters(), lr=1e-3, eps=1e-7)
    inputs, labels = torch.from_numpy(tokens).long(), torch.from_numpy(targets).long()

    def step() -> None:
        logits = net(inputs).float().flatten(0, -2)
        torch.nn.functional.cross_entropy(logits, labels.flatten()).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    found["plain PyTorch"] = counted(step)
    print(f"one training step, {args.batch} sequences of {args.tokens} tokens, on the CPU:")
    for name, (gflop, operations) in found.items():
        print(f"{name:<14} {gflop:9.2f} GFLOP {sum(operations.values()):7,} aten operations")
    ours, theirs = found["gpubench"][1], found["plain PyTorch"][1]
    excess = sorted(((ours.get(k, 0) - theirs.get(k, 0), k) for k in {*ours, *theirs}),
                    reverse=True)
    print("gpubench's step runs more of: " + ", ".join(
        f"{key} +{more} ({theirs.get(key, 0)} -> {ours.get(key, 0)})"
        for more, key in excess[:args.top]))


if __name__ == "__main__":
    main(sys.argv[1:])
