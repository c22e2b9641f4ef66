"""Fault campaign parts that crash or starve the collector and the agent: kill -9 of
the collector's processes under load, a full disk, the agent's push killed mid-way."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

from chaos_support import (
    GPUS,
    Collector,
    Submitters,
    Tally,
    check_database,
    make_run,
    stored,
)

# -- kill -9 ---------------------------------------------------------------------------------

def kill_part(name: str, folder: Path, *, target: int, kills: int,
              rng: random.Random) -> Tally:
    """Submitters until `target` acknowledgements while the collector is killed -9
    `kills` times at random moments and started again on the same port."""
    tally = Tally(name)
    collector = Collector(folder / f"{name}.duckdb")
    token = collector.token("lab")
    collector.start()
    submitters = Submitters(collector.address, token, tally, target=target)
    submitters.start()
    try:
        for n in range(kills):
            # Spread the kills over the acknowledgements: each after a random share.
            goal = target * (n + rng.uniform(0.3, 0.9)) / (kills + 1)
            while len(submitters.acknowledged) < goal and not submitters.done():
                time.sleep(0.01)
            if submitters.done():
                break
            time.sleep(rng.uniform(0, 0.2))
            submitters.fault()
            collector.kill()
            collector.start()
            tally.code("kill-9")
        submitters.wait()
    finally:
        submitters.stop()
        collector.stop()
    tally.tried = len(submitters.submitted)
    check_database(tally, collector.db, submitters.acknowledged, submitters.submitted)
    tally.note = tally.note or (f"{len(submitters.acknowledged)} acknowledged, "
                                f"{tally.codes['kill-9']} kills")
    return tally


# -- a full disk -----------------------------------------------------------------------------

def disk_full_part(folder: Path, *, target: int) -> Tally:
    """The database on a small tmpfs: filled to the last byte while 8 submitters go on,
    then freed; every acknowledged run kept, recovery timed from the freeing."""
    tally = Tally("disk-full")
    disk = folder / "disk"
    disk.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m,mode=0700", "tmpfs",
                              str(disk)], capture_output=True, text=True)
    if mounted.returncode != 0:
        tally.note = ("skipped: `mount -t tmpfs` failed (needs root): "
                      f"{mounted.stderr.strip() or mounted.returncode}")
        return tally
    collector = Collector(disk / "c.duckdb")
    try:
        token = collector.token("lab")
        collector.start()
        submitters = Submitters(collector.address, token, tally, target=target)
        submitters.start()
        while len(submitters.acknowledged) < target // 3 and not submitters.done():
            time.sleep(0.01)
        filler = _fill(disk)
        before = tally.codes["RESOURCE_EXHAUSTED"]
        deadline = time.monotonic() + 30
        while tally.codes["RESOURCE_EXHAUSTED"] < before + 20 and time.monotonic() < deadline:
            time.sleep(0.05)  # submissions refused for a while
        filler.unlink()
        submitters.fault()
        submitters.wait()
        # The end is said once writes have held a while (collector.durability.HOLD_S),
        # which may be after the last submission: wait for it before stopping.
        deadline = time.monotonic() + 30
        while ("writes are durable again" not in collector.log.read_text()
               and time.monotonic() < deadline):
            time.sleep(0.1)
        collector.stop()
        tally.tried = len(submitters.submitted)
        check_database(tally, collector.db, submitters.acknowledged, submitters.submitted)
        # The whole episode is one line when it began and one when it ended.
        log = collector.log.read_text()
        began, ended = log.count("cannot store runs now"), log.count("writes are durable again")
        if (began, ended) != (1, 1) or "Traceback" in log:
            tally.wrong += 1
            tally.note = f"log: {began} line(s) at the start, {ended} at the end"
        else:
            tally.note = (f"{len(submitters.acknowledged)} acknowledged; one log line at the "
                          "start, one at the end; recovery from the freeing")
    finally:
        collector.stop()
        subprocess.run(["umount", "-l", str(disk)], check=False)
    return tally


def _fill(disk: Path) -> Path:
    """Fill `disk` to the last byte with one file; the file (unlink it to free it)."""
    filler = disk / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        for size in (1 << 16, 1 << 12, 1):
            while True:
                try:
                    os.write(fd, b"\0" * size)
                except OSError:
                    break
    finally:
        os.close(fd)
    return filler


# -- the agent's push ------------------------------------------------------------------------

def agent_push_part(folder: Path, *, runs: int, kills: int, rng: random.Random) -> Tally:
    """`runs` runs spooled, `gpubench-agent push` killed -9 mid-way `kills` times, then
    pushed to the end: every spooled run stored once, the spool's pending/ empty."""
    from gpubench.agent.spool import Spool

    tally = Tally("agent-push")
    collector = Collector(folder / "push.duckdb")
    token = collector.token("agent")
    collector.start()
    spool = Spool(folder / "spool")
    spooled = set()
    for i in range(runs):
        run = make_run(gpu_name=GPUS[i % len(GPUS)])
        spool.write(run)
        spooled.add(run.run_id)
    tally.tried = runs
    agent = [str(Path(sys.executable).with_name("gpubench-agent")), "push", "--collector",
             collector.address, "--spool", str(spool.root)]
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUBENCH_")}
    env["GPUBENCH_STATE"] = str(folder / "agent-state")
    env["GPUBENCH_TOKEN"] = token  # the agent takes no token in argv
    def pending() -> int:
        # Counted by name: the push moves files while this looks (no stat of each).
        return sum(1 for p in (spool.root / "pending").iterdir() if p.suffix == ".json")

    try:
        for _ in range(kills):
            before = pending()
            if not before:
                break
            process = subprocess.Popen(agent, stdout=subprocess.DEVNULL,
                                       stderr=subprocess.DEVNULL, env=env)
            # Kill once it has sent some: pending/ shrinks.
            deadline = time.monotonic() + 60
            goal = before - rng.randint(1, max(1, before // 3))
            while (pending() > goal and process.poll() is None
                   and time.monotonic() < deadline):
                time.sleep(0.01)
            process.send_signal(signal.SIGKILL)
            process.wait(10)
            tally.code("kill-9")
        began = time.monotonic()
        final = subprocess.run(agent, capture_output=True, text=True, env=env, timeout=300)
        tally.code(f"exit {final.returncode}")
        tally.recovered(time.monotonic() - began)
        if final.returncode != 0 or spool.pending():
            tally.wrong += 1
            tally.note = f"last push: exit {final.returncode}, {len(spool.pending())} pending"
    finally:
        collector.stop()
    counts, _ = stored(collector.db)
    sent = {entry.path.stem for entry in spool.entries("sent")}
    pending = {entry.path.stem for entry in spool.pending()}
    tally.lost = len(sent - set(counts)) + len(spooled - sent - pending)
    tally.duplicated = (sum(n - 1 for n in counts.values() if n > 1)
                        + len(set(counts) - spooled))
    return tally
