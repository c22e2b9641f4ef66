#!/usr/bin/env python3
"""Plain PyTorch training of gpubench's two transformers, the reference for their speed.

The same shapes as gpubench's built-in workloads (agent/gpubench/agent/workload/
transformers.py), written as people write them in PyTorch: a decoder language model of
GPT-2 small's shape (12 blocks of width 768, 12 heads, 1,024 tokens, a 50,257-token
vocabulary, learned positions, a head untied from the embedding: 163M parameters) and a
ViT-B/16 (224 px, 3 classes), each block with one fused query-key-value projection and
`scaled_dot_product_attention`; Adam (lr 1e-3, torch's fused step); the loss in float32.
Synthetic tokens or images already on the GPU; every step's time is the GPU's (the host
waits only at the end). `mixed_bfloat16` is bf16 autocast over float32 weights, as Keras's
policy; the math mode sets TF32 for float32 convolutions and matrix products or not.

    python3 bench/transformer_reference.py run --out ref.jsonl \\
        --case GPT2-small:mixed_bfloat16:32 --case ViT-B16:float32:128:float32 ...
    python3 bench/transformer_reference.py ratios ref.jsonl SPOOL_DIR

A case is MODEL:PRECISION:BATCH[:MATH_MODE[:compiled]] (math mode tf32 unless said;
"compiled" runs the step under torch.compile, its compile time printed apart). `ratios`
prints, for each gpubench record in a spool, its speed over the reference's at the same
model, precision, math mode and batch.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

LM, VIT = "GPT2-small", "ViT-B16"
LAYERS, WIDTH, HEADS, TOKENS, VOCABULARY = 12, 768, 12, 1024, 50_257
IMAGE, PATCH, CLASSES = 224, 16, 3


def build(model: str) -> Any:
    """The model as a torch.nn.Module on the GPU, float32 weights."""
    import torch
    from torch import nn
    from torch.nn import functional

    class Block(nn.Module):
        def __init__(self, causal: bool) -> None:
            super().__init__()
            self.causal = causal
            self.norm1, self.norm2 = nn.LayerNorm(WIDTH), nn.LayerNorm(WIDTH)
            self.qkv, self.out = nn.Linear(WIDTH, 3 * WIDTH), nn.Linear(WIDTH, WIDTH)
            self.mlp1, self.mlp2 = nn.Linear(WIDTH, 4 * WIDTH), nn.Linear(4 * WIDTH, WIDTH)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            batch, length, _ = x.shape
            q, k, v = self.qkv(self.norm1(x)).view(batch, length, 3, HEADS, -1).unbind(2)
            y = functional.scaled_dot_product_attention(
                q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=self.causal)
            x = x + self.out(y.transpose(1, 2).reshape(batch, length, WIDTH))
            return x + self.mlp2(functional.gelu(self.mlp1(self.norm2(x))))

    class LanguageModel(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embedding = nn.Embedding(VOCABULARY, WIDTH)
            self.positions = nn.Parameter(torch.randn(TOKENS, WIDTH) * 0.02)
            self.blocks = nn.ModuleList(Block(causal=True) for _ in range(LAYERS))
            self.norm = nn.LayerNorm(WIDTH)
            self.head = nn.Linear(WIDTH, VOCABULARY)

        def forward(self, tokens: torch.Tensor) -> torch.Tensor:
            x = self.embedding(tokens) + self.positions
            for block in self.blocks:
                x = block(x)
            return self.head(self.norm(x))

    class VisionTransformer(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.patches = nn.Conv2d(3, WIDTH, PATCH, stride=PATCH)
            self.token = nn.Parameter(torch.zeros(1, 1, WIDTH))
            self.positions = nn.Parameter(torch.randn((IMAGE // PATCH) ** 2 + 1, WIDTH) * 0.02)
            self.blocks = nn.ModuleList(Block(causal=False) for _ in range(LAYERS))
            self.norm = nn.LayerNorm(WIDTH)
            self.head = nn.Linear(WIDTH, CLASSES)

        def forward(self, images: torch.Tensor) -> torch.Tensor:
            x = self.patches(images.float() / 127.5 - 1).flatten(2).transpose(1, 2)
            x = torch.cat([self.token.expand(x.shape[0], -1, -1), x], dim=1) + self.positions
            for block in self.blocks:
                x = block(x)
            return self.head(self.norm(x)[:, 0])

    return (LanguageModel() if model == LM else VisionTransformer()).cuda()


def training(model_name: str, precision: str, batch: int, math_mode: str
             ) -> tuple[Any, Any, Any, Any]:
    """The model, its training step (inputs, targets) -> loss, and a batch of synthetic
    inputs and targets on the GPU, under the math mode."""
    import torch
    from torch.nn import functional

    tf32 = math_mode == "tf32"
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32
    torch.manual_seed(12)
    model = build(model_name)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3, eps=1e-7, fused=True)
    if model_name == LM:
        inputs = torch.randint(0, VOCABULARY, (batch, TOKENS), device="cuda")
        targets = torch.randint(0, VOCABULARY, (batch, TOKENS), device="cuda")
    else:
        inputs = torch.randint(0, 256, (batch, 3, IMAGE, IMAGE), device="cuda",
                               dtype=torch.uint8)
        targets = torch.randint(0, CLASSES, (batch,), device="cuda")
    autocast = torch.autocast("cuda", dtype=torch.bfloat16,
                              enabled=precision == "mixed_bfloat16")

    def step(inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        with autocast:
            logits = model(inputs)
        loss = functional.cross_entropy(logits.float().flatten(0, -2), targets.flatten())
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss.detach()

    return model, step, inputs, targets


def measure(model_name: str, precision: str, batch: int, math_mode: str, compiled: bool,
            steps: int, warmup: int) -> dict[str, Any]:
    """Train `steps` timed steps after `warmup`; the figures as a dict."""
    import torch

    model, step, inputs, targets = training(model_name, precision, batch, math_mode)
    parameters = sum(p.numel() for p in model.parameters())
    if compiled:  # the model's forward and backward, in place (the step calls it);
        model.compile()  # Adam's fused step stays as it is
    run = step
    torch.cuda.reset_peak_memory_stats()
    began = time.perf_counter()
    run(inputs, targets)
    torch.cuda.synchronize()
    first = time.perf_counter() - began
    for _ in range(warmup - 1):
        run(inputs, targets)
    torch.cuda.synchronize()
    began = time.perf_counter()
    for _ in range(steps):
        loss = run(inputs, targets)
    torch.cuda.synchronize()
    seconds = time.perf_counter() - began
    per_sample = TOKENS if model_name == LM else 1
    figures = {
        "model": model_name, "precision": precision, "batch": batch, "math_mode": math_mode,
        "compiled": compiled, "parameters": parameters, "steps": steps,
        "first_step_seconds": round(first, 3), "step_seconds": round(seconds / steps, 5),
        "per_second": round(batch * per_sample * steps / seconds, 1),
        "unit": "tokens" if model_name == LM else "images",
        "peak_gib": round(torch.cuda.max_memory_allocated() / 2**30, 2),
        "loss": round(float(loss), 4), "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
    }
    return figures


def parse_case(text: str) -> tuple[str, str, int, str, bool]:
    """MODEL:PRECISION:BATCH[:MATH_MODE[:compiled]]."""
    parts = text.split(":")
    if len(parts) < 3 or parts[0] not in (LM, VIT) or \
            parts[1] not in ("float32", "mixed_bfloat16"):
        raise SystemExit(f"--case {text!r}: MODEL:PRECISION:BATCH[:MATH_MODE[:compiled]], "
                         f"MODEL {LM} or {VIT}, PRECISION float32 or mixed_bfloat16")
    math_mode = parts[3] if len(parts) > 3 else "tf32"
    return parts[0], parts[1], int(parts[2]), math_mode, parts[4:5] == ["compiled"]


def run(args: argparse.Namespace) -> None:
    print(f"{'model':<11} {'precision':<15} {'math':<8} {'batch':>5} {'compiled':>8} "
          f"{'first (s)':>9} {'step (s)':>9} {'rate':>10} {'unit':<7} {'peak GiB':>8}")
    with open(args.out, "a") as out:
        for case in args.case:
            model, precision, batch, math_mode, compiled = parse_case(case)
            figures = measure(model, precision, batch, math_mode, compiled,
                              args.steps, args.warmup)
            out.write(json.dumps(figures) + "\n")
            import torch  # the case's model is gone: give its memory back for the next

            torch.cuda.empty_cache()
            print(f"{model:<11} {precision:<15} {math_mode:<8} {batch:>5} "
                  f"{'yes' if compiled else 'no':>8} {figures['first_step_seconds']:>9.2f} "
                  f"{figures['step_seconds']:>9.4f} {figures['per_second']:>10,.0f} "
                  f"{figures['unit']:<7} {figures['peak_gib']:>8.1f}", flush=True)


def ratios(args: argparse.Namespace) -> None:
    """Each gpubench record of the spool against the eager reference of its setup."""
    reference = {}
    for line in Path(args.reference).read_text().splitlines():
        figures = json.loads(line)
        key = (figures["model"], figures["precision"], figures["math_mode"], figures["batch"])
        reference.setdefault(key, {})[figures["compiled"]] = figures["per_second"]
    records = [json.loads(p.read_text()) for sub in ("pending", "sent")
               for p in sorted((Path(args.spool) / sub).glob("*.json"))]
    print(f"{'model':<11} {'precision':<15} {'math':<8} {'batch':>5} {'gpubench':>10} "
          f"{'eager':>10} {'ratio':>6} {'compiled':>10} {'ratio':>6}")
    for record in sorted(records, key=lambda r: r.get("created_at", "")):
        config, result = record.get("config", {}), record.get("result", {})
        key = (config.get("model"), config.get("precision"), config.get("math_mode", ""),
               int(config.get("batch_per_gpu", 0)))
        rate = float(result.get("train_images_per_second", 0))
        eager, compiled = (reference.get(key, {}).get(flag, 0.0) for flag in (False, True))
        print(f"{key[0]:<11} {key[1]:<15} {key[2]:<8} {key[3]:>5} {rate:>10,.0f} "
              f"{eager:>10,.0f} {rate / eager if eager else 0:>6.2f} "
              f"{compiled:>10,.0f} {rate / compiled if compiled else 0:>6.2f}")


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    measuring = commands.add_parser("run", help="measure plain PyTorch's steps")
    measuring.add_argument("--case", action="append", required=True,
                           help="MODEL:PRECISION:BATCH[:MATH_MODE[:compiled]]")
    measuring.add_argument("--out", required=True, help="JSON lines, appended")
    measuring.add_argument("--steps", type=int, default=20)
    measuring.add_argument("--warmup", type=int, default=5)
    comparing = commands.add_parser("ratios", help="gpubench's records over the reference")
    comparing.add_argument("reference", help="the JSON lines `run` wrote")
    comparing.add_argument("spool", help="gpubench-agent's spool folder")
    args = parser.parse_args(argv)
    run(args) if args.command == "run" else ratios(args)


if __name__ == "__main__":
    main(sys.argv[1:])
