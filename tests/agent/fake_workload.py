"""A stand-in for `python -m gpubench.agent.workload`: a real child process that writes
the documented event stream (gpubench/events.py) quickly, without a framework.

    python fake_workload.py run --model B0 --batch 8 ...   (the agent's arguments)

FAKE_WORKLOAD_MODE picks the behaviour: ok (default), crash, oom-event, oom-exit,
sigkill, hang, ignore-sigint, ignore-all, noisy. FAKE_WORKLOAD_PIDFILE, when set, gets
this process's pid (and its helper child's, for `hang`) one per line.
FAKE_WORKLOAD_EPOCH_SECONDS sets each epoch's length (default 0.3), and
FAKE_WORKLOAD_FIRST_EPOCH_SECONDS the first's (default twice that: start-up);
FAKE_WORKLOAD_PIPELINE_MODE the pipeline the result says ran (default cached). `probe` prints the
probe answer recorded on the GPU machine (tests/data/probe-h200.json), or the file
FAKE_WORKLOAD_PROBE names.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import subprocess
import sys
import time

from gpubench import events

STEPS = 4
RECORDED_PROBE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data",
                              "probe-h200.json")


def emit(event: events.Event) -> None:
    events.EventWriter(sys.stdout).emit(event)


def write_pids(*pids: int) -> None:
    path = os.environ.get("FAKE_WORKLOAD_PIDFILE")
    if path:
        with open(path, "w") as handle:
            handle.write("".join(f"{pid}\n" for pid in pids))


def epoch(number: int, seconds: float, steps: int = STEPS) -> None:
    emit(events.EpochStarted(epoch=number, steps=steps))
    t_start = time.monotonic()
    for step in range(1, steps + 1):
        time.sleep(seconds / steps)
        emit(events.Step(epoch=number, step=step, steps=steps))
    t_end = time.monotonic()
    wall = t_end - t_start
    emit(events.EpochFinished(
        epoch=number, wall_seconds=wall, train_seconds=wall * 0.8, validation_seconds=wall * 0.2,
        loss=1.1 - 0.1 * number, accuracy=0.3 + 0.1 * number, val_loss=1.0, val_accuracy=0.4,
        t_start=t_start, t_end=t_end, steps=steps))


def search_summary(largest: int) -> events.SearchSummary:
    return events.SearchSummary(largest=largest, capped=False, search_seconds=0.2,
                                capacity_bytes=16 << 30, fixed_bytes=1 << 30,
                                per_image_bytes=1 << 27)


def trials() -> None:
    emit(events.BatchTrial(batch=32, fits=False, peak_memory_bytes=0, seconds=0.1,
                           message="out of memory"))
    emit(events.BatchTrial(batch=16, fits=True, peak_memory_bytes=3 << 30, seconds=0.1,
                           trial_kind="confirm"))


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("command")
    parser.add_argument("--model", default="B0")
    parser.add_argument("--batch", default="auto")
    parser.add_argument("--gpus", type=int, default=1)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--image-size", type=int, default=0)
    parser.add_argument("--precision", default="float32")
    parser.add_argument("--limit", type=int, action="append")
    args, _ = parser.parse_known_args()
    mode = os.environ.get("FAKE_WORKLOAD_MODE", "ok")
    seconds = float(os.environ.get("FAKE_WORKLOAD_EPOCH_SECONDS", "0.3"))
    if args.command == "probe":
        with open(os.environ.get("FAKE_WORKLOAD_PROBE") or RECORDED_PROBE) as handle:
            print(json.dumps(json.load(handle)))
        return 0
    if args.command == "models":
        # As TensorFlow starts: a log line of its own on stderr, whatever is asked.
        sys.stderr.write("I0000 00:00:1764600000.000000 1 cpu_feature_guard.cc:210] This "
                         "TensorFlow binary is optimized to use available CPU instructions\n")
        if mode == "crash":
            sys.stderr.write("Traceback (most recent call last):\nModuleNotFoundError: No "
                             "module named 'keras'\n")
            return 1
        print(json.dumps({"B0": 4053414, "B3": 10788146, "B7": 64105370}))
        return 0
    if mode == "ignore-sigint":
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    if mode == "ignore-all":
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    helper = None
    if mode in ("hang", "ignore-sigint", "ignore-all"):
        # A grandchild, as the batch search's trial processes are.
        helper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    write_pids(os.getpid(), *([helper.pid] if helper else []))

    if mode == "old-stream":  # a workload (or image) of an older gpubench
        print(json.dumps({"event": "started", "v": 1, "t": time.monotonic(), "model": "B0"}),
              flush=True)
        return 0
    if args.command == "search" and mode != "oom-event":
        for limit in args.limit or [0]:
            trials()
            emit(events.SearchDone(model=args.model, batch=16, rule="steps",
                                   memory_limit_bytes=limit, search=search_summary(16)))
        return 0
    searched = args.batch in ("auto", "largest")
    batch = 16 if searched else int(args.batch)
    if searched:
        trials()
        emit(events.BatchChosen(batch=16, rule="steps" if args.batch == "auto" else "largest",
                                fallbacks=(8, 4, 2, 1), search=search_summary(16)))
    emit(events.Started(
        backend="tensorflow", backend_version="2.21.0", keras_version="3.15.1",
        python_version=platform.python_version(), cuda_runtime_version="", cudnn_version="",
        model=args.model, image_size=args.image_size or 224, batch_per_gpu=batch,
        global_batch=batch * max(args.gpus, 1), batch_choice="searched" if searched else "given",
        batch_rule="", memory_limit_bytes=0, precision=args.precision, gpu_count=args.gpus,
        epochs=args.epochs, pipeline="cached", weights="none", jit_compile=False,
        cuda_graphs=False, data_on_device=False, batched_augmentation=False,
        fused_batchnorm=False, channels_first=False,
        dataset=events.Dataset(name="synthetic-rps", image_count=48, fingerprint="sha256:00",
                               train_images=39, validation_images=9, validation_split=0.2,
                               seed=12, skipped_files=0)))
    print("a stray line from a framework", flush=True)  # not an event: goes to the log
    sys.stderr.write("framework banner on stderr\n")
    sys.stderr.flush()

    if mode == "crash":
        epoch(1, seconds * 2)
        raise RuntimeError("simulated crash in epoch 2")
    if mode == "oom-event":
        emit(events.ErrorEvent(
            status="out_of_memory", message="OOM when allocating tensor of shape "
            "[16,32,112,112] on /job:localhost/replica:0/task:0/device:GPU:0"))
        return 3
    if mode == "error-escapes":  # a framework's coloured error text
        sys.stderr.write("\x1b[31mTraceback in red\x1b[0m\n")
        # Raw, as an older writer might have let it through: the reader cleans it too.
        print(json.dumps({"event": "error", "v": events.STREAM_VERSION, "status": "error",
                          "message": "\x1b[1mValueError\x1b[0m: Exception encountered when "
                          "calling \x1b[1mPad.call()\x1b[0m.\x1b]0;title\x07"}), flush=True)
        return 1
    if mode == "oom-exit":
        sys.stderr.write("ResourceExhaustedError: out of memory\n")
        return 3
    if mode == "sigkill":
        epoch(1, seconds * 2)
        os.kill(os.getpid(), signal.SIGKILL)
    if mode in ("hang", "ignore-sigint", "ignore-all"):
        emit(events.EpochStarted(epoch=1, steps=1000))
        for step in range(1, 100_000):
            emit(events.Step(epoch=1, step=step, steps=1000))
            time.sleep(0.05)
    if mode == "noisy":
        emit(events.WarningEvent(message="the data folder has 2 unreadable files"))
        emit(events.LogEvent(message="building the model"))
    first = float(os.environ.get("FAKE_WORKLOAD_FIRST_EPOCH_SECONDS", seconds * 2))
    for number in range(1, args.epochs + 1):
        epoch(number, first if number == 1 else seconds)  # epoch 1 carries start-up
    emit(events.Result(
        measured_epoch=2, train_images_per_second=39 / seconds,
        pipeline_mode=os.environ.get("FAKE_WORKLOAD_PIPELINE_MODE", "cached"),
        step_time_median_seconds=seconds / STEPS, step_time_cv=0.05,
        memory=tuple(events.GpuPeak(gpu_index=i, allocator_peak_bytes=11_491_803_648,
                                    memory_total_bytes=150_754_820_096)
                     for i in range(args.gpus)),
        memory_notes=("CUDA graphs: the allocator peak covers the whole run",)
        if mode == "noisy" else (),
        warnings=("epoch 2 step times vary by 12%",) if mode == "noisy" else ()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
