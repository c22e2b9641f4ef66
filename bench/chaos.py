"""The collector's fault campaign: real collector processes on loopback, each part
bounded in count and time, and a table of what was tried, lost and duplicated.

    .venv/bin/python bench/chaos.py            # the full campaign (make chaos)
    .venv/bin/python bench/chaos.py --short    # a couple of minutes
    .venv/bin/python bench/chaos.py --parts auth,poison --short

Parts (--parts, comma-separated; all by default):
  kill-single    kill -9 of a single-process collector at random moments, restarted on
                 the same port, under 8 submitters (3,000 acknowledged; short 600)
  kill-owner     the same against `serve --frontends 2`, killing the owner
  kill-frontend  kill -9 of one front-end at a time (the owner restarts it)
  disk-full      the database on a 16 MiB tmpfs filled to the last byte, then freed
                 (skipped with a message where tmpfs cannot be mounted)
  fuzz-bytes     SubmitRun requests with random bytes changed, cut or inserted (2,000)
  fuzz-fields    valid runs with one field set to an extreme value (2,000)
  auth           every method with no, a wrong, a revoked and a non-admin token, a
                 token revoked while 8 threads submit with it, and the shut-out after
                 30 failed authentications
  poison         oversized records, unknown fields, config.train_images 3e9 and other
                 poisoned values, each followed by a valid run that must be stored
  agent-push     `gpubench-agent push` killed -9 mid-way, pushed again to the end

Every acknowledged run must be in the database (or its quarantine) afterwards, once;
"wrong" counts answers a part does not allow (a valid run refused for good, a bad
token let in, INTERNAL). Exit code 1 when any is lost, duplicated or wrong.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path

import grpc
from chaos_support import (
    GPUS,
    Collector,
    Submitters,
    Tally,
    check_database,
    make_run,
    stored,
    table,
)
from google.protobuf.descriptor import FieldDescriptor

from gpubench.v1 import collector_pb2 as pb
from gpubench.v1 import collector_pb2_grpc, run_pb2

PARTS = ("kill-single", "kill-owner", "kill-frontend", "disk-full", "fuzz-bytes",
         "fuzz-fields", "auth", "poison", "agent-push")


def _bearer(token: str) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {token}"),)


# -- kill -9 ---------------------------------------------------------------------------------

def kill_part(name: str, folder: Path, *, frontends: int, victim: str, target: int,
              kills: int, rng: random.Random) -> Tally:
    """Submitters until `target` acknowledgements while the collector's owner or a
    front-end (`victim`) is killed -9 `kills` times at random moments."""
    tally = Tally(name)
    collector = Collector(folder / f"{name}.duckdb", frontends=frontends)
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
            if victim == "frontend":
                pids = collector.children()
                if not pids:
                    continue
                submitters.fault()
                os.kill(rng.choice(pids), signal.SIGKILL)  # the owner starts another
            else:
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
        collector.stop()
        tally.tried = len(submitters.submitted)
        check_database(tally, collector.db, submitters.acknowledged, submitters.submitted)
        tally.note = f"{len(submitters.acknowledged)} acknowledged; recovery from the freeing"
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


# -- fuzzing ---------------------------------------------------------------------------------

# What a SubmitRun with garbage may be answered: stored, refused, or a run_id stored with
# other content; and while the failed-authentication limit lasts, never reached here.
FUZZ_ALLOWED = {"OK", "INVALID_ARGUMENT", "ALREADY_EXISTS"}


def _raw_submit(channel: grpc.Channel) -> Callable:
    return channel.unary_unary("/gpubench.v1.Collector/SubmitRun",
                               request_serializer=lambda b: b,
                               response_deserializer=pb.SubmitRunResponse.FromString)


def fuzz_part(name: str, folder: Path, cases: int, make_case: Callable[[random.Random], bytes],
              rng: random.Random) -> Tally:
    """`cases` SubmitRun requests made by `make_case`, each answered as FUZZ_ALLOWED;
    the collector still stores a valid run after them, and every run it acknowledged
    is in its database."""
    tally = Tally(name)
    collector = Collector(folder / f"{name}.duckdb")
    token = collector.token("lab")
    collector.start()
    acknowledged: dict[str, str] = {}
    submitted: set[str] = set()
    try:
        channel = grpc.insecure_channel(collector.address)
        submit = _raw_submit(channel)
        started = time.monotonic()
        for _ in range(cases):
            data = make_case(rng)
            with_id = _run_id_of(data)
            if with_id:
                submitted.add(with_id)
            tally.tried += 1
            try:
                ack = submit(data, metadata=_bearer(token), timeout=10)
                tally.code("OK")
                acknowledged[ack.run_id] = ack.content_sha256
                submitted.add(ack.run_id)
            except grpc.RpcError as exc:
                tally.code(exc.code().name)
                if exc.code().name not in FUZZ_ALLOWED:
                    tally.wrong += 1
            if time.monotonic() - started > 300:
                tally.note = "stopped at the 300 s bound"
                break
        # Not wedged: a valid run is stored at once.
        run = make_run()
        submitted.add(run.run_id)
        ack = submit(pb.SubmitRunRequest(run=run).SerializeToString(), metadata=_bearer(token),
                     timeout=10)
        acknowledged[ack.run_id] = ack.content_sha256
        channel.close()
    finally:
        collector.stop()
    check_database(tally, collector.db, acknowledged, submitted)
    return tally


def _run_id_of(data: bytes) -> str:
    try:
        return pb.SubmitRunRequest.FromString(data).run.run_id
    except Exception:  # not a message at all
        return ""


def mutated_bytes(rng: random.Random) -> bytes:
    """A valid SubmitRun request with bytes changed, inserted, deleted or cut."""
    data = bytearray(pb.SubmitRunRequest(run=make_run(gpu_name=rng.choice(GPUS)))
                     .SerializeToString())
    for _ in range(rng.randint(1, 8)):
        kind = rng.random()
        at = rng.randrange(len(data))
        if kind < 0.6:
            data[at] = rng.randrange(256)
        elif kind < 0.75:
            data.insert(at, rng.randrange(256))
        elif kind < 0.9:
            del data[at]
        else:
            del data[at:]
        if not data:
            data = bytearray(b"\x0a")
    return bytes(data)


_INTS = (0, 1, -1, 2**31 - 1, 2**31, 2**32 - 1, 2**32, 2**53 + 1, 2**63 - 1, -(2**63))
_FLOATS = (0.0, -0.0, float("nan"), float("inf"), float("-inf"), 1e308, -1e308, 5e-324,
           3e9, 1e-9)
_TEXTS = ("", "x" * 5000, "\u202eevil", "a\x00b", "Ｔｅｓｌａ　Ｔ４", "\ud7ff" * 10, "'; DROP",
          "\t\n", "é" * 300)


def _fields(descriptor, prefix: tuple = ()) -> list[tuple]:
    """Every (path of field descriptors) of a message type, nested ones included."""
    found = []
    for f in descriptor.fields:
        path = (*prefix, f)
        if f.type == FieldDescriptor.TYPE_MESSAGE:
            if f.message_type.full_name != "google.protobuf.Timestamp" and len(path) < 4:
                found += _fields(f.message_type, path)
            continue
        found.append(path)
    return found


_RUN_FIELDS = _fields(run_pb2.Run.DESCRIPTOR)


def _extreme(f: FieldDescriptor, rng: random.Random) -> object:
    if f.type == FieldDescriptor.TYPE_BOOL:
        return rng.random() < 0.5
    if f.type in (FieldDescriptor.TYPE_STRING,):
        return rng.choice(_TEXTS)
    if f.type == FieldDescriptor.TYPE_BYTES:
        return os.urandom(rng.randint(0, 64))
    if f.type in (FieldDescriptor.TYPE_DOUBLE, FieldDescriptor.TYPE_FLOAT):
        return rng.choice(_FLOATS) if rng.random() < 0.7 else rng.uniform(-1e12, 1e12)
    if f.type == FieldDescriptor.TYPE_ENUM:
        return rng.choice([0, 1, 2, 3, 99, -1, 2**31 - 1])
    value = rng.choice(_INTS) if rng.random() < 0.7 else rng.randint(-(2**40), 2**40)
    unsigned = f.type in (FieldDescriptor.TYPE_UINT32, FieldDescriptor.TYPE_UINT64,
                          FieldDescriptor.TYPE_FIXED32, FieldDescriptor.TYPE_FIXED64)
    bits = 32 if f.type in (FieldDescriptor.TYPE_UINT32, FieldDescriptor.TYPE_INT32,
                            FieldDescriptor.TYPE_SINT32, FieldDescriptor.TYPE_FIXED32,
                            FieldDescriptor.TYPE_SFIXED32) else 64
    if unsigned:
        return abs(value) % (1 << bits)
    low = -(1 << (bits - 1))
    return (value - low) % (1 << bits) + low


def mutated_field(rng: random.Random) -> bytes:
    """A valid run with one to three fields set to extreme values."""
    run = make_run(gpu_name=rng.choice(GPUS))
    for _ in range(rng.randint(1, 3)):
        path = rng.choice(_RUN_FIELDS)
        message = run
        for f in path[:-1]:
            if _repeated(f):
                items = getattr(message, f.name)
                message = items[0] if len(items) else items.add()
            else:
                message = getattr(message, f.name)
        last = path[-1]
        value = _extreme(last, rng)
        try:
            if _repeated(last):
                getattr(message, last.name).append(value)
            else:
                setattr(message, last.name, value)
        except (ValueError, TypeError):
            continue  # the field cannot hold it (protobuf's own checks)
    return pb.SubmitRunRequest(run=run).SerializeToString()


def _repeated(f: FieldDescriptor) -> bool:
    if hasattr(f, "is_repeated"):
        return bool(f.is_repeated)
    return f.label == FieldDescriptor.LABEL_REPEATED


# The collector's default limit of failed authentications a minute per address.
AUTH_FAILURES = 30


# -- authentication --------------------------------------------------------------------------

def auth_part(folder: Path, *, rounds: int, racers: int = 8) -> Tally:
    """Every Collector and Admin method with no, a wrong, a revoked and a non-admin
    token (`rounds` times), each answered as it should be (UNAUTHENTICATED,
    PERMISSION_DENIED for Admin calls of a non-admin token); then a token revoked while
    `racers` threads submit with it: no call begun after the revocation returned may be
    acknowledged; then the shut-out of an address that failed too often."""
    tally = Tally("auth")
    collector = Collector(folder / "auth.duckdb")
    admin = collector.token("root", admin=True)
    user = collector.token("user")
    revoked = collector.token("gone")
    racer = collector.token("racer")
    collector.start()
    channel = grpc.insecure_channel(collector.address)
    collector_pb2_grpc.AdminStub(channel).RevokeToken(
        pb.RevokeTokenRequest(name="gone"), metadata=_bearer(admin), timeout=10)
    methods = [(name, m) for name in ("Collector", "Admin")
               for m in pb.DESCRIPTOR.services_by_name[name].methods]
    kinds = {"non-admin": user, "no token": None, "wrong token": "gpb_not-a-token",
             "revoked": revoked}
    # Past AUTH_FAILURES failed authentications a minute the address is shut out
    # (RESOURCE_EXHAUSTED): the collector is started again (the count is in memory, the
    # tokens in the database) before the matrix would pass it, so that every bad token
    # gets its own answer.
    failures = 0
    try:
        for _ in range(rounds):
            for kind, secret in kinds.items():
                if kind != "non-admin" and failures + len(methods) > AUTH_FAILURES:
                    channel.close()
                    collector.stop()
                    collector.start()
                    channel = grpc.insecure_channel(collector.address)
                    failures = 0
                for service, method in methods:
                    call = channel.unary_unary(f"/gpubench.v1.{service}/{method.name}",
                                               request_serializer=lambda b: b,
                                               response_deserializer=lambda b: b)
                    tally.tried += 1
                    metadata = _bearer(secret) if secret else None
                    try:
                        call(b"", metadata=metadata, timeout=10)
                        code = "OK"
                    except grpc.RpcError as exc:
                        code = exc.code().name
                    failures += code == "UNAUTHENTICATED"
                    tally.code(code)
                    if not _auth_allowed(kind, service, code):
                        tally.wrong += 1
                        tally.note = f"{kind} {service}/{method.name}: {code}"
        matrix = tally.tried
        _race_revocation(tally, collector, channel, admin, racer, racers)
        # The race failed many authentications: the address is shut out now.
        tally.tried += 1
        try:
            channel.unary_unary("/gpubench.v1.Collector/ListRuns")(
                b"", metadata=_bearer("gpb_not-a-token"), timeout=10)
            code = "OK"
        except grpc.RpcError as exc:
            code = exc.code().name
        tally.code(code)
        if code != "RESOURCE_EXHAUSTED":
            tally.wrong += 1
            tally.note = f"no shut-out after the race's failed authentications: {code}"
        tally.note = tally.note or (
            f"{matrix} calls of {len(methods)} methods x {len(kinds)} kinds of token, "
            f"{tally.tried - matrix - 1} submissions racing a revocation, 1 shut out")
    finally:
        channel.close()
        collector.stop()
    return tally


def _auth_allowed(kind: str, service: str, code: str) -> bool:
    """Whether `code` is a right answer to a call of `service` with a token of `kind`."""
    if kind != "non-admin":
        return code == "UNAUTHENTICATED"
    if service == "Admin":
        return code == "PERMISSION_DENIED"
    # A valid token reaches the method: an empty request is answered, never INTERNAL.
    return code not in ("UNAUTHENTICATED", "PERMISSION_DENIED", "INTERNAL", "UNKNOWN")


def _race_revocation(tally: Tally, collector: Collector, channel: grpc.Channel, admin: str,
                     racer: str, threads: int) -> None:
    revoked_at: list[float] = []
    stop = threading.Event()
    late = []

    def submit() -> None:
        stub = collector_pb2_grpc.CollectorStub(grpc.insecure_channel(collector.address))
        while not stop.is_set():
            begun = time.monotonic()
            try:
                stub.SubmitRun(pb.SubmitRunRequest(run=make_run()), metadata=_bearer(racer),
                               timeout=10)
                tally.code("OK")
                if revoked_at and begun > revoked_at[0]:
                    late.append(begun)
            except grpc.RpcError as exc:
                tally.code(exc.code().name)
            with tally.lock:
                tally.tried += 1

    workers = [threading.Thread(target=submit, daemon=True) for _ in range(threads)]
    for worker in workers:
        worker.start()
    try:
        time.sleep(0.5)
        collector_pb2_grpc.AdminStub(channel).RevokeToken(
            pb.RevokeTokenRequest(name="racer"), metadata=_bearer(admin), timeout=10)
        revoked_at.append(time.monotonic())
        time.sleep(0.5)
    finally:
        stop.set()
        for worker in workers:
            worker.join(30)
    tally.wrong += len(late)


# -- poisoned and oversized records ----------------------------------------------------------

def _poisons() -> list[tuple[str, Callable[[], bytes], str]]:
    """(what, the request's bytes, the code it must get)."""
    def run_with(**paths: object) -> Callable[[], bytes]:
        return lambda: pb.SubmitRunRequest(run=make_run(**paths)).SerializeToString()

    def oversized() -> bytes:
        run = make_run()
        run.result.warnings.extend(["w" * 1000] * 64)
        for i in range(64):
            run.result.batch_trials.add(batch=i + 1, kind="probe", message="m" * 1000)
        last = run.result.epochs[-1]
        run.config.epochs = 1000
        for n in range(len(run.result.epochs) + 1, 1001):
            epoch = run.result.epochs.add()
            epoch.CopyFrom(last)
            epoch.number = n
        return pb.SubmitRunRequest(run=run).SerializeToString()

    def unknown_field() -> bytes:
        run = make_run()
        run.config.MergeFromString(b"\xfa\x3e\x05hello")  # field 999, 5 bytes
        return pb.SubmitRunRequest(run=run).SerializeToString()

    def huge_memory() -> bytes:
        run = make_run()
        run.gpus[0].memory_total_bytes = 2**63
        return pb.SubmitRunRequest(run=run).SerializeToString()

    def huge_request() -> bytes:
        run = make_run()
        run.MergeFromString(b"\xba\x3e" + _varint(1_200_000) + b"x" * 1_200_000)
        return pb.SubmitRunRequest(run=run).SerializeToString()

    return [
        ("train_images 3e9", run_with(config__train_images=3_000_000_000), "INVALID_ARGUMENT"),
        ("gpu_count 2^32-1", run_with(config__gpu_count=2**32 - 1), "INVALID_ARGUMENT"),
        ("image_size 2^31", run_with(config__image_size=2**31), "INVALID_ARGUMENT"),
        ("epoch2 NaN", run_with(result__epoch2_seconds=float("nan")), "INVALID_ARGUMENT"),
        ("GPU memory 2^63", huge_memory, "INVALID_ARGUMENT"),
        ("bidi GPU name", run_with(gpu_name="Tesla\u202e T4"), "INVALID_ARGUMENT"),
        ("oversized record", oversized, "INVALID_ARGUMENT"),
        ("unknown field", unknown_field, "INVALID_ARGUMENT"),
        ("request > 1 MiB", huge_request, "RESOURCE_EXHAUSTED"),
    ]


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def poison_part(folder: Path, *, rounds: int) -> Tally:
    """Each poisoned record `rounds` times, each followed by a valid run that must be
    acknowledged and read back at once (the collector is not wedged)."""
    tally = Tally("poison")
    collector = Collector(folder / "poison.duckdb")
    token = collector.token("lab")
    collector.start()
    acknowledged: dict[str, str] = {}
    submitted: set[str] = set()
    channel = grpc.insecure_channel(collector.address)
    submit = _raw_submit(channel)
    stub = collector_pb2_grpc.CollectorStub(channel)
    try:
        for _ in range(rounds):
            for what, make, expected in _poisons():
                tally.tried += 1
                try:
                    ack = submit(make(), metadata=_bearer(token), timeout=10)
                    code = "OK"
                    acknowledged[ack.run_id] = ack.content_sha256
                    submitted.add(ack.run_id)
                except grpc.RpcError as exc:
                    code = exc.code().name
                tally.code(code)
                if code != expected:
                    tally.wrong += 1
                    tally.note = f"{what}: {code}, expected {expected}"
                began = time.monotonic()
                run = make_run()
                submitted.add(run.run_id)
                try:
                    ack = stub.SubmitRun(pb.SubmitRunRequest(run=run), metadata=_bearer(token),
                                         timeout=10)
                    acknowledged[ack.run_id] = ack.content_sha256
                    stub.GetRun(pb.GetRunRequest(run_id=run.run_id), metadata=_bearer(token),
                                timeout=10)
                    tally.recovered(time.monotonic() - began)
                except grpc.RpcError as exc:  # wedged
                    tally.code(exc.code().name)
                    tally.wrong += 1
    finally:
        channel.close()
        collector.stop()
    check_database(tally, collector.db, acknowledged, submitted)
    return tally


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
             collector.address, "--token", token, "--spool", str(spool.root)]
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUBENCH_")}
    env["GPUBENCH_STATE"] = str(folder / "agent-state")
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
    counts, _, _ = stored(collector.db)
    sent = {entry.path.stem for entry in spool.entries("sent")}
    pending = {entry.path.stem for entry in spool.pending()}
    tally.lost = len(sent - set(counts)) + len(spooled - sent - pending)
    tally.duplicated = (sum(n - 1 for n in counts.values() if n > 1)
                        + len(set(counts) - spooled))
    return tally


# -- the campaign ----------------------------------------------------------------------------

def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="The collector's fault campaign against real collector processes on "
                    "loopback; prints a table and exits 1 if any acknowledged run was lost "
                    "or duplicated, or any answer was wrong.")
    parser.add_argument("--short", action="store_true",
                        help="Fewer submissions, kills and cases: a couple of minutes.")
    parser.add_argument("--parts", default=",".join(PARTS),
                        help=f"Comma-separated parts to run (default all: {', '.join(PARTS)}).")
    parser.add_argument("--seed", type=int, default=None,
                        help="Seed of the random moments and cases (default: from the clock; "
                             "printed, so a run can be repeated).")
    parser.add_argument("--json", type=Path, default=None,
                        help="Also write the tallies to this JSON file.")
    args = parser.parse_args(argv)
    parts = [p.strip() for p in args.parts.split(",") if p.strip()]
    unknown = [p for p in parts if p not in PARTS]
    if unknown:
        parser.error(f"--parts: unknown {', '.join(unknown)} (one of {', '.join(PARTS)})")
    seed = args.seed if args.seed is not None else int(time.time())
    rng = random.Random(seed)
    short = args.short
    target = 600 if short else 3000
    kills = 2 if short else 5
    cases = 200 if short else 2000
    tallies: list[Tally] = []
    started = time.monotonic()
    print(f"collector fault campaign: {'short' if short else 'full'}, seed {seed}, parts "
          f"{', '.join(parts)}", flush=True)
    with tempfile.TemporaryDirectory(prefix="gpubench-chaos-") as tmp:
        folder = Path(tmp)
        plan: dict[str, Callable[[], Tally]] = {
            "kill-single": lambda: kill_part("kill-9 single", folder, frontends=1,
                                             victim="owner", target=target, kills=kills, rng=rng),
            "kill-owner": lambda: kill_part("kill-9 owner", folder, frontends=2,
                                            victim="owner", target=target, kills=kills, rng=rng),
            "kill-frontend": lambda: kill_part("kill-9 front-end", folder, frontends=2,
                                               victim="frontend", target=target, kills=kills,
                                               rng=rng),
            "disk-full": lambda: disk_full_part(folder, target=target // 2),
            "fuzz-bytes": lambda: fuzz_part("fuzz bytes", folder, cases, mutated_bytes, rng),
            "fuzz-fields": lambda: fuzz_part("fuzz fields", folder, cases, mutated_field, rng),
            "auth": lambda: auth_part(folder, rounds=1 if short else 5),
            "poison": lambda: poison_part(folder, rounds=2 if short else 10),
            "agent-push": lambda: agent_push_part(folder, runs=60 if short else 300,
                                                  kills=2 if short else 5, rng=rng),
        }
        for part in parts:
            began = time.monotonic()
            try:
                tally = plan[part]()
            except Exception as exc:  # the campaign's own failure: the part counts as failed
                tally = Tally(part, wrong=1, note=f"the part failed: {exc!r}"[:300])
            print(f"  {part}: {time.monotonic() - began:.0f} s", flush=True)
            tallies.append(tally)
    print()
    print(table(tallies))
    failed = [t.part for t in tallies if t.failed]
    print(f"\n{len(tallies)} part(s) in {time.monotonic() - started:.0f} s; "
          + (f"FAILED: {', '.join(failed)}" if failed else "nothing lost, duplicated or wrong"))
    if args.json:
        args.json.write_text(json.dumps({
            "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "seed": seed, "short": short, "machine": platform.platform(),
            "tallies": [{"part": t.part, "tried": t.tried, "lost": t.lost,
                         "duplicated": t.duplicated, "wrong": t.wrong, "codes": dict(t.codes),
                         "recover_s": t.recover_s, "note": t.note} for t in tallies],
        }, indent=1))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
