"""What the agent's GPU sampler costs the workload: an interleaved A/B benchmark.

A fixed amount of work (an "epoch") runs in a child process, as the workload
does under the agent, once with the agent's sampler thread running at --sample-hz
and once without, alternating (ABBA) for --reps pairs. The child times its own
work, so process start-up is not counted. The figure is the median of the
per-pair ratios (with / without) minus one; the target is under 1%.

A second, harsher figure puts the work in the sampler's own process (the
sampler and a pure-Python loop share one interpreter lock).

    python bench/sampler_overhead.py                       # dev machine: replayed NVML
    python bench/sampler_overhead.py --nvml real --work torch   # a GPU machine

--nvml trace replays tests/data/nvml-h200-trace.json through the fake (no GPU
needed); --nvml real reads the driver. --work cpu is a pure-Python loop;
--work torch trains a small convolutional network on cuda:0.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parent.parent
TRACE = ROOT / "tests" / "data" / "nvml-h200-trace.json"
TARGET = 0.01

CPU_WORK = """
import sys, time
n = int(sys.argv[1])
began = time.perf_counter()
total = 0
for i in range(n):
    total += (i * i) % 7
print(time.perf_counter() - began)
"""

TORCH_WORK = """
import sys, time, torch
steps = int(sys.argv[1])
torch.backends.cudnn.benchmark = False
net = torch.nn.Sequential(
    torch.nn.Conv2d(3, 64, 3, padding=1), torch.nn.ReLU(), torch.nn.Conv2d(64, 64, 3, padding=1),
    torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(64, 3),
).cuda()
opt = torch.optim.SGD(net.parameters(), lr=0.01)
x = torch.randn(64, 3, 128, 128, device="cuda")
y = torch.randint(0, 3, (64,), device="cuda")
for _ in range(5):  # warm-up, not timed
    opt.zero_grad(); torch.nn.functional.cross_entropy(net(x), y).backward(); opt.step()
torch.cuda.synchronize()
began = time.perf_counter()
for _ in range(steps):
    opt.zero_grad(); torch.nn.functional.cross_entropy(net(x), y).backward(); opt.step()
torch.cuda.synchronize()
print(time.perf_counter() - began)
"""


def import_agent() -> tuple[ModuleType, ModuleType]:
    """gpubench.agent's nvml and telemetry, installed or straight from this checkout."""
    # a GPU machine with the checkout but no install: its three source roots
    sys.path[:0] = [str(ROOT / part) for part in ("", "agent", "collector")]
    from gpubench.agent import nvml, telemetry

    return nvml, telemetry


def run_child(code: str, amount: int) -> tuple[float, int]:
    """Start the work in a child process; (seconds it reports, its pid)."""
    child = subprocess.Popen([sys.executable, "-c", code, str(amount)], stdout=subprocess.PIPE,
                             text=True)
    out, _ = child.communicate()
    if child.returncode != 0:
        raise SystemExit(f"the work failed (exit {child.returncode})")
    return float(out.strip().splitlines()[-1]), child.pid


def calibrate(code: str, seconds: float, start: int) -> int:
    """The amount of work that takes about `seconds`."""
    amount = start
    while True:
        took, _ = run_child(code, amount)
        if took >= seconds * 0.5:
            return max(1, int(amount * seconds / took))
        amount *= 4


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nvml", choices=("trace", "real"), default="trace",
                        help="replay the recorded trace (no GPU) or read the driver")
    parser.add_argument("--work", choices=("cpu", "torch"), default="cpu",
                        help="what an epoch is: a Python loop, or torch training on cuda:0")
    parser.add_argument("--reps", type=int, default=6, help="A/B pairs (each run twice, ABBA)")
    parser.add_argument("--epoch-seconds", type=float, default=2.0, help="length of one epoch")
    parser.add_argument("--sample-hz", type=float, default=10.0, help="the sampler's rate")
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    parser.add_argument("--check", action="store_true",
                        help="exit 1 when the overhead is over the target (a quiet machine only)")
    args = parser.parse_args()

    nvml_module, telemetry = import_agent()
    if args.nvml == "real":
        nvml = nvml_module.open_nvml()
    else:
        from gpubench.agent.nvml_replay import FakeNvml

        nvml = FakeNvml.from_trace(TRACE)
    indices = list(range(nvml.gpu_count()))
    code = CPU_WORK if args.work == "cpu" else TORCH_WORK
    amount = calibrate(code, args.epoch_seconds, 100_000 if args.work == "cpu" else 20)
    print(f"{args.work} epoch: {amount} units, about {args.epoch_seconds} s; "
          f"sampling {len(indices)} GPU(s) at {args.sample_hz} Hz ({args.nvml} NVML)")

    sampler_cpu: list[float] = []  # the agent's CPU seconds per wall second while sampling

    def epoch(sampled: bool) -> tuple[float, int]:
        if not sampled:
            return run_child(code, amount)[0], 0
        sampler = telemetry.Sampler(nvml, indices, hz=args.sample_hz,
                                    workload_pids=lambda: frozenset())
        cpu, wall = time.process_time(), time.perf_counter()
        with sampler:
            took, _ = run_child(code, amount)
        sampler_cpu.append((time.process_time() - cpu) / (time.perf_counter() - wall))
        return took, len(sampler.ticks)

    without: list[float] = []
    with_sampler: list[float] = []
    ticks: list[int] = []
    for rep in range(args.reps):
        order = (False, True, True, False) if rep % 2 == 0 else (True, False, False, True)
        pair = {False: [], True: []}
        for sampled in order:
            took, count = epoch(sampled)
            pair[sampled].append(took)
            if sampled:
                ticks.append(count)
        without.append(statistics.mean(pair[False]))
        with_sampler.append(statistics.mean(pair[True]))
        print(f"  pair {rep + 1}: without {without[-1]:.4f} s, with {with_sampler[-1]:.4f} s "
              f"({with_sampler[-1] / without[-1] - 1:+.2%})")
    ratios = [b / a for a, b in zip(without, with_sampler, strict=True)]
    overhead = statistics.median(ratios) - 1

    # The harsh case: the sampler thread inside the process doing pure-Python work.
    body = CPU_WORK.replace("int(sys.argv[1])", "N").replace(
        "print(time.perf_counter() - began)", "")
    loop = compile(body, "work", "exec")
    cpu_units = calibrate(CPU_WORK, args.epoch_seconds, 100_000)

    def in_process(sampled: bool) -> float:
        scope = {"N": cpu_units}
        sampler = telemetry.Sampler(nvml, indices, hz=args.sample_hz)
        if sampled:
            sampler.start()
        began = time.perf_counter()
        exec(loop, scope)  # noqa: S102 - the fixed loop above
        took = time.perf_counter() - began
        sampler.stop()
        return took

    same = []
    for _ in range(max(2, args.reps // 2)):
        a, b = in_process(False), in_process(True)
        same.append(b / a)
    same_overhead = statistics.median(same) - 1
    ok = overhead < TARGET
    print(f"sampler overhead (workload in a child process, as the agent runs it): "
          f"{overhead:+.2%} (median of {len(ratios)} pairs; target < {TARGET:.0%}) "
          f"{'OK' if ok else 'OVER TARGET'}")
    print(f"sampler overhead (same process as a pure-Python loop, worst case): "
          f"{same_overhead:+.2%}")
    print(f"the sampler's own CPU use: {statistics.median(sampler_cpu):.2%} of one core")
    print(f"ticks per sampled child process: median {statistics.median(ticks):.0f} "
          f"(its start-up included; the timed part alone is about "
          f"{args.sample_hz * args.epoch_seconds:.0f})")
    if args.json:
        args.json.write_text(json.dumps({
            "nvml": args.nvml, "work": args.work, "sample_hz": args.sample_hz,
            "epoch_seconds_without": without, "epoch_seconds_with": with_sampler,
            "overhead": overhead, "same_process_overhead": same_overhead,
            "sampler_cpu_share": statistics.median(sampler_cpu),
            "ticks_per_epoch": ticks,
        }, indent=1))
    nvml.close()
    return 1 if args.check and not ok else 0


if __name__ == "__main__":
    sys.exit(main())
