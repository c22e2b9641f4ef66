"""Where a Keras-on-torch training step of the protocol's model spends its time.

Each variant runs in a fresh process: the protocol's model (gpubench's own
builder) with the chosen settings, random uint8 images already on the device,
a few warm-up steps, then timed `train_on_batch` / `test_on_batch` steps
(synchronised, as Keras's fit is when a callback reads each step's logs), and
torch's profiler over two more steps: the GPU kernel time per step, kernels
launched per step and the heaviest kernels. The GPU's busy share (kernel time
over wall time) says whether a setting is bound by the GPU or by the host.
Then `fit` over the same batch, twice: with no per-step callback (Keras queues
step n+1 while the device runs step n) and with one that reads each step's
metrics (the host waits every step), and the synchronising CUDA calls one
unsynchronised step makes (torch's sync debug mode), by the line that made them.

    python bench/keras_torch_profile.py --out prof \\
        --variant protocol:model=B0,batch=128 \\
        --variant fast:model=B0,batch=512,precision=mixed_bfloat16,aug=batched,bn=fused

Variant keys: model (B0/B3/B7), batch, precision (float32, mixed_float16,
mixed_bfloat16), aug (keras: Keras's own; batched; none: no augmentation
layers), bn (keras or fused), format (last or first), size (pixels), steps,
warmup, jit (1: compile the step), graphs (1: replay the steps as CUDA graphs,
as --cuda-graphs).
Writes one JSON file per variant under --out and prints a table.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

DEFAULTS = {"model": "B0", "batch": "128", "precision": "float32", "aug": "keras",
            "bn": "keras", "format": "last", "size": "", "steps": "8", "warmup": "3",
            "jit": "0", "graphs": "0"}


def parse_variant(text: str) -> tuple[str, dict[str, str]]:
    """'name:key=value,...' -> (name, settings with defaults filled in)."""
    name, _, rest = text.partition(":")
    settings = dict(DEFAULTS)
    for item in filter(None, rest.split(",")):
        key, _, value = item.partition("=")
        if key not in DEFAULTS:
            raise SystemExit(
                f"--variant {text}: unknown key {key!r} (known: {', '.join(DEFAULTS)})")
        settings[key] = value
    return name, settings


def profile_one(settings: dict[str, str]) -> dict:
    """Build, warm up, time and profile one variant in this process."""
    os.environ["KERAS_BACKEND"] = "torch"
    import keras
    import numpy as np
    import torch

    from gpubench.agent.workload import augment, batchnorm, cuda_graphs, torch_async
    from gpubench.agent.workload import model as net
    from gpubench.settings import NATIVE_IMAGE_SIZE

    net.set_data_format(settings["format"] == "first")
    size = int(settings["size"] or NATIVE_IMAGE_SIZE[settings["model"]])
    batch = int(settings["batch"])
    net.set_precision(settings["precision"])
    keras.utils.set_random_seed(12)
    network = net.build(settings["model"], size)
    if settings["aug"] == "none":  # the network without its augmentation block
        inputs = keras.Input(shape=net.input_shape(size))
        x = network.get_layer(f"efficientnet{settings['model'].lower()}")(inputs)
        x = network.get_layer("pooling")(x)
        network = keras.Model(inputs, network.get_layer("classes")(x))
    net.compile_for_training(network, jit_compile=settings["jit"] == "1")
    if settings["aug"] == "batched":
        augment.batch_affine_transforms(network)
    if settings["bn"] == "fused":
        batchnorm.fuse_batch_normalization(network)
    if torch.cuda.is_available():  # as the workload runs on a GPU
        torch_async.keep_host_ahead(network)
    graphs = None
    if settings["graphs"] == "1":
        graphs = cuda_graphs.use_cuda_graphs(network)

    device = torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")
    generator = np.random.default_rng(12)
    images = torch.from_numpy(
        generator.integers(0, 256, size=(batch, *net.input_shape(size)), dtype=np.uint8)
    ).to(device)
    labels = torch.from_numpy(
        np.eye(3, dtype=np.float32)[generator.integers(0, 3, batch)]).to(device)

    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize()

    for _ in range(int(settings["warmup"])):
        network.train_on_batch(images, labels)
    sync()
    if device.type == "cuda" and graphs is None:  # replays bypass the allocator
        torch.cuda.reset_peak_memory_stats()
    train_times, test_times = [], []
    for _ in range(int(settings["steps"])):
        started = time.perf_counter()
        network.train_on_batch(images, labels)
        sync()
        train_times.append(time.perf_counter() - started)
    for _ in range(3):
        started = time.perf_counter()
        network.test_on_batch(images, labels)
        sync()
        test_times.append(time.perf_counter() - started)
    peak = torch.cuda.max_memory_allocated() if device.type == "cuda" else 0

    activities = [torch.profiler.ProfilerActivity.CPU]
    if device.type == "cuda":
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    profiled_steps = 2
    with torch.profiler.profile(activities=activities) as profiler:
        for _ in range(profiled_steps):
            network.train_on_batch(images, labels)
        sync()
    kernels = [event for event in profiler.key_averages()
               if event.device_type == torch.autograd.DeviceType.CUDA]
    kernel_us = sum(event.self_device_time_total for event in kernels) / profiled_steps
    launches = sum(event.count for event in kernels) / profiled_steps
    top = sorted(kernels, key=lambda event: -event.self_device_time_total)[:12]
    step = statistics.median(train_times)
    fit_async, fit_sync, syncs = fit_figures(keras, torch, network, images, labels,
                                             int(settings["steps"]))
    return {
        "fit_step_s": fit_async,
        "fit_step_s_synced_each_step": fit_sync,
        "fit_images_per_s": batch / fit_async,
        "syncs_per_step": syncs,
        "settings": settings,
        "image_size": size,
        "train_step_s": step,
        "train_step_spread": (max(train_times) - min(train_times)) / step,
        "test_step_s": statistics.median(test_times),
        "images_per_s": batch / step,
        "gpu_kernel_ms_per_step": kernel_us / 1000,
        "gpu_busy_share": kernel_us / 1e6 / step,
        "kernels_per_step": launches,
        "peak_gib": peak / 2**30,
        "top_kernels": [
            {"name": event.key[:120],
             "ms_per_step": event.self_device_time_total / 1000 / profiled_steps,
             "calls_per_step": event.count / profiled_steps}
            for event in top
        ],
        "cuda_graphs": graphs.describe() if graphs is not None else "",
        "device": torch.cuda.get_device_name() if device.type == "cuda" else "cpu",
        "versions": {"torch": torch.__version__, "keras": keras.__version__},
    }


def fit_figures(keras, torch, network, images, labels, steps: int) -> tuple[float, float, dict]:
    """Seconds per step of `fit` without and with a per-step callback, and where one
    unsynchronised step synchronises with the device."""
    import collections
    import warnings

    class Same(keras.utils.PyDataset):
        def __init__(self, count: int) -> None:
            super().__init__()
            self.count = count

        def __len__(self) -> int:
            return self.count

        def __getitem__(self, index: int):
            return images, labels

    class Epochs(keras.callbacks.Callback):
        def __init__(self) -> None:
            super().__init__()
            self.seconds: list[float] = []

        def on_epoch_begin(self, epoch, logs=None) -> None:
            sync()
            self.started = time.perf_counter()

        def on_epoch_end(self, epoch, logs=None) -> None:
            sync()
            self.seconds.append(time.perf_counter() - self.started)

    class EveryStep(Epochs):
        def on_train_batch_end(self, batch, logs=None) -> None:
            pass  # Keras reads the step's metrics back before calling this

    def sync() -> None:
        if torch.cuda.is_available():
            torch.cuda.synchronize()

    figures = []
    for callback in (Epochs(), EveryStep()):
        network.fit(Same(steps), epochs=2, verbose=0, callbacks=[callback])
        figures.append(callback.seconds[-1] / steps)
    sources: collections.Counter = collections.Counter()
    if not torch.cuda.is_available():
        return figures[0], figures[1], {}
    torch.cuda.set_sync_debug_mode("warn")
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            network.fit(Same(1), epochs=1, verbose=0, callbacks=[Epochs()])
    finally:
        torch.cuda.set_sync_debug_mode(0)
    for warning in caught:
        if "synchroniz" in str(warning.message):
            sources[f"{Path(warning.filename).name}:{warning.lineno}"] += 1
    return figures[0], figures[1], dict(sources.most_common(12))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, help="folder for one JSON file per variant")
    parser.add_argument("--variant", action="append", default=[],
                        help="NAME:key=value,... (keys: " + ", ".join(DEFAULTS) + ")")
    parser.add_argument("--one", help=argparse.SUPPRESS)  # a child process: one variant
    parser.add_argument("--timeout", type=float, default=300, help="seconds per variant")
    args = parser.parse_args()
    if args.one:
        _, settings = parse_variant(args.one)
        print(json.dumps(profile_one(settings)))
        return 0
    if not args.out or not args.variant:
        parser.error("--out and at least one --variant are needed")
    args.out.mkdir(parents=True, exist_ok=True)
    rows = []
    for text in args.variant:
        name, _ = parse_variant(text)
        print(f"{name}: running", flush=True)
        try:
            done = subprocess.run([sys.executable, __file__, "--one", text], capture_output=True,
                                  text=True, timeout=args.timeout)
        except subprocess.TimeoutExpired:
            print(f"{name}: over {args.timeout:.0f} s, stopped", flush=True)
            continue
        if done.returncode != 0:
            tail = done.stderr.strip().splitlines()[-3:]
            print(f"{name}: failed ({done.returncode}): {' | '.join(tail)}", flush=True)
            (args.out / f"{name}.err").write_text(done.stderr)
            continue
        result = json.loads(done.stdout.strip().splitlines()[-1])
        result["name"] = name
        (args.out / f"{name}.json").write_text(json.dumps(result, indent=2) + "\n")
        rows.append(result)
        print(f"{name}: {result['images_per_s']:.0f} img/s, step"
              f" {result['train_step_s'] * 1000:.0f} ms, GPU busy {result['gpu_busy_share']:.0%};"
              f" fit {result['fit_images_per_s']:.0f} img/s; syncs {result['syncs_per_step']}",
              flush=True)
    print(f"\n{'variant':<24}{'img/s':>8}{'step ms':>9}{'test ms':>9}{'GPU ms':>8}"
          f"{'busy':>6}{'kernels':>9}{'GiB':>7}{'fit img/s':>10}{'synced':>8}")
    for r in rows:
        print(f"{r['name']:<24}{r['images_per_s']:>8.0f}{r['train_step_s'] * 1000:>9.1f}"
              f"{r['test_step_s'] * 1000:>9.1f}{r['gpu_kernel_ms_per_step']:>8.1f}"
              f"{r['gpu_busy_share']:>6.0%}{r['kernels_per_step']:>9.0f}{r['peak_gib']:>7.1f}"
              f"{r['fit_images_per_s']:>10.0f}"
              f"{int(r['settings']['batch']) / r['fit_step_s_synced_each_step']:>8.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
