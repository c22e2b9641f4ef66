"""Record an NVML trace on a real GPU, for the agent's replaying fake (FakeNvml).

Runs on the GPU machine with python3, torch (CUDA) and nvidia-ml-py; torchvision
is used when present. It needs nothing else of gpubench: it loads agent/gpubench/agent/nvml.py
by its path. It samples every GPU at --sample-hz on a background thread while it

  1. idles (--idle-before seconds),
  2. trains torchvision's efficientnet_b0 on random data on GPU 0 (--train seconds),
  3. idles again while the GPU cools down (--idle-after seconds),

and writes the trace JSON (inventory, samples, phase times, what ran) to --out.
The GPU's UUID is written hashed. Typical use, from the repository root:

    python3 bench/record_nvml_trace.py --out tests/data/nvml-h200-trace.json
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import os
import platform
import statistics
import sys
import threading
import time
from datetime import datetime, timezone
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parent.parent


def load_nvml_module() -> ModuleType:
    """agent/gpubench/agent/nvml.py, loaded by path (the gpubench package need not be installed)."""
    path = ROOT / "agent" / "gpubench" / "agent" / "nvml.py"
    spec = importlib.util.spec_from_file_location("gpubench_agent_nvml", path)
    if spec is None or spec.loader is None:
        raise SystemExit(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look the module up by name
    spec.loader.exec_module(module)
    return module


class Sampler(threading.Thread):
    """Samples every GPU on a monotonic schedule; keeps the samples and call costs."""

    def __init__(self, nvml: object, gpu_count: int, hz: float) -> None:
        super().__init__(daemon=True)
        self.nvml = nvml
        self.gpu_count = gpu_count
        self.period = 1.0 / hz
        self.samples: list[object] = []
        self.call_seconds: list[float] = []
        self.stop_event = threading.Event()

    def run(self) -> None:
        next_t = time.monotonic()
        while not self.stop_event.is_set():
            for index in range(self.gpu_count):
                began = time.perf_counter()
                self.samples.append(self.nvml.sample(index))
                self.call_seconds.append(time.perf_counter() - began)
            next_t += self.period
            delay = next_t - time.monotonic()
            if delay < 0:  # fell behind: skip the missed slots rather than burst
                next_t = time.monotonic()
                delay = 0
            self.stop_event.wait(delay)

    def stop(self) -> None:
        self.stop_event.set()
        self.join()


def build_model(torch: ModuleType) -> tuple[object, str]:
    """torchvision's efficientnet_b0 (3 classes), or a small MBConv stack without it."""
    try:
        import torchvision

        return torchvision.models.efficientnet_b0(weights=None, num_classes=3), (
            f"torchvision {torchvision.__version__} efficientnet_b0"
        )
    except ImportError:
        pass
    nn = torch.nn

    def mbconv(cin: int, cout: int, stride: int, expand: int = 6) -> nn.Module:
        mid = cin * expand
        return nn.Sequential(
            nn.Conv2d(cin, mid, 1, bias=False), nn.BatchNorm2d(mid), nn.SiLU(),
            nn.Conv2d(mid, mid, 3, stride, 1, groups=mid, bias=False), nn.BatchNorm2d(mid),
            nn.SiLU(), nn.Conv2d(mid, cout, 1, bias=False), nn.BatchNorm2d(cout),
        )

    layers = [nn.Conv2d(3, 32, 3, 2, 1, bias=False), nn.BatchNorm2d(32), nn.SiLU()]
    channels = [(32, 16, 1), (16, 24, 2), (24, 24, 1), (24, 40, 2), (40, 40, 1), (40, 80, 2),
                (80, 80, 1), (80, 112, 1), (112, 192, 2), (192, 320, 1)]
    layers += [mbconv(cin, cout, stride) for cin, cout, stride in channels]
    layers += [nn.Conv2d(320, 1280, 1), nn.SiLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
               nn.Linear(1280, 3)]
    return nn.Sequential(*layers), "MBConv stack shaped like EfficientNet-B0 (no torchvision)"


def train_for(seconds: float, batch: int, image_size: int, precision: str) -> dict[str, object]:
    """Train on random data on cuda:0 for about `seconds`; what ran and how fast."""
    import torch

    # cudnn.benchmark would spend most of the phase autotuning EfficientNet's
    # many depthwise convolutions (seen: 40 s for the first step on an H200),
    # which is not the steady training load the trace should show.
    torch.backends.cudnn.benchmark = False
    device = torch.device("cuda:0")
    model, model_name = build_model(torch)
    model = model.to(device).to(memory_format=torch.channels_last)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    loss_fn = torch.nn.CrossEntropyLoss()
    images = torch.randn(batch, 3, image_size, image_size, device=device).to(
        memory_format=torch.channels_last
    )
    labels = torch.randint(0, 3, (batch,), device=device)
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision)
    torch.cuda.reset_peak_memory_stats(device)
    steps = 0
    began = time.monotonic()
    while time.monotonic() - began < seconds:
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=dtype or torch.float32, enabled=dtype is not None):
            loss = loss_fn(model(images), labels)
        loss.backward()
        optimizer.step()
        steps += 1
        if steps % 10 == 0:
            torch.cuda.synchronize(device)
    torch.cuda.synchronize(device)
    elapsed = time.monotonic() - began
    result = {
        "model": model_name,
        "batch": batch,
        "image_size": image_size,
        "precision": precision,
        "steps": steps,
        "train_seconds": round(elapsed, 3),
        "images_per_second": round(steps * batch / elapsed, 1),
        "allocator_peak_bytes": int(torch.cuda.max_memory_allocated(device)),
        "torch_version": torch.__version__,
        "torch_cuda_version": torch.version.cuda,
    }
    del model, optimizer, images, labels
    torch.cuda.empty_cache()
    return result


def time_fields(nvml_module: ModuleType, nvml: object, repeats: int = 50) -> dict[str, float]:
    """Median seconds of each SAMPLE_FIELDS reader on GPU 0 (what a sample costs)."""
    nv = nvml._nv
    handle = nvml._handle(0)
    medians = {}
    for key, reader in nvml_module.SAMPLE_FIELDS.items():
        name = key if isinstance(key, str) else "+".join(key)
        costs = []
        for _ in range(repeats):
            began = time.perf_counter()
            try:
                reader(nv, handle)
            except nv.NVMLError:
                pass
            costs.append(time.perf_counter() - began)
        medians[name] = round(statistics.median(costs), 6)
    return medians


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, help="where to write the trace JSON")
    parser.add_argument("--sample-hz", type=float, default=10.0, help="samples per second")
    parser.add_argument("--idle-before", type=float, default=6.0, help="idle seconds first")
    parser.add_argument("--train", type=float, default=42.0, help="seconds of training")
    parser.add_argument("--idle-after", type=float, default=12.0, help="idle seconds last")
    parser.add_argument("--batch", type=int, default=128, help="training batch size")
    parser.add_argument("--image-size", type=int, default=224, help="pixels per side")
    parser.add_argument("--precision", choices=("fp32", "bf16", "fp16"), default="fp32",
                        help="fp32, or autocast to bf16/fp16")
    args = parser.parse_args()

    nvml_module = load_nvml_module()
    nvml = nvml_module.open_nvml()
    system = nvml.system()
    gpus = nvml.gpus()
    for gpu in gpus:  # never publish a device's identity
        if gpu.get("uuid"):
            gpu["uuid"] = "GPU-sha256-" + hashlib.sha256(gpu["uuid"].encode()).hexdigest()[:32]
    print(f"driver {system.get('driver_version')} CUDA {system.get('cuda_version')}; "
          + "; ".join(f"{g['index']}: {g.get('name')}" for g in gpus), flush=True)

    # Import torch and touch the GPU before the trace starts, so the idle phase
    # is an idle GPU and not the CUDA context being built.
    import torch

    torch.zeros(1, device="cuda:0")
    torch.cuda.synchronize()

    sampler = Sampler(nvml, len(gpus), args.sample_hz)
    t0 = time.monotonic()
    sampler.start()
    phases = []

    def phase(name: str, action) -> object:
        start = time.monotonic() - t0
        print(f"{start:6.1f} s  {name}", flush=True)
        outcome = action()
        phases.append({"name": name, "t_start": round(start, 4),
                       "t_end": round(time.monotonic() - t0, 4)})
        return outcome

    phase("idle", lambda: time.sleep(args.idle_before))
    training = phase("train", lambda: train_for(args.train, args.batch, args.image_size,
                                                args.precision))
    phase("cooldown", lambda: time.sleep(args.idle_after))
    sampler.stop()
    field_seconds = time_fields(nvml_module, nvml)
    errors = nvml.field_errors()
    nvml.close()

    calls = sorted(sampler.call_seconds)
    meta = {
        "recorded_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "recorder": "bench/record_nvml_trace.py",
        "sample_hz": args.sample_hz,
        "workload_pid": os.getpid(),
        "python": platform.python_version(),
        "field_errors": errors,
        "sample_call_seconds": {
            "median": statistics.median(calls),
            "p99": calls[int(0.99 * (len(calls) - 1))],
            "max": calls[-1],
        },
        "field_call_seconds_median": field_seconds,
        "training": training,
    }
    nvml_module.write_trace(args.out, system=system, gpus=gpus, samples=sampler.samples,
                            t0=t0, phases=phases, meta=meta)
    print(f"{len(sampler.samples)} samples over {time.monotonic() - t0:.1f} s -> {args.out}")
    print(f"training: {training}")
    print(f"per field (median s): {field_seconds}")
    print(f"one sample call: median {meta['sample_call_seconds']['median'] * 1e3:.2f} ms, "
          f"p99 {meta['sample_call_seconds']['p99'] * 1e3:.2f} ms; "
          f"missing fields: {errors or 'none'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
