"""Fault campaign parts that send the collector what it must refuse: mutated bytes,
fields at extreme values, oversized and poisoned records."""

from __future__ import annotations

import os
import random
import time
from collections.abc import Callable
from pathlib import Path

import grpc
from chaos_support import (
    GPUS,
    Collector,
    Tally,
    bearer,
    check_database,
    make_run,
    raw_submit,
)
from google.protobuf.descriptor import FieldDescriptor

from gpubench.v1 import collector_pb2 as pb
from gpubench.v1 import collector_pb2_grpc, run_pb2

# -- fuzzing ---------------------------------------------------------------------------------

# What a SubmitRun with garbage (and a valid token) may be answered: stored, refused, or
# a run_id already stored with other content.
FUZZ_ALLOWED = {"OK", "INVALID_ARGUMENT", "ALREADY_EXISTS"}


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
        submit = raw_submit(channel)
        started = time.monotonic()
        for _ in range(cases):
            data = make_case(rng)
            with_id = _run_id_of(data)
            if with_id:
                submitted.add(with_id)
            tally.tried += 1
            try:
                ack = submit(data, metadata=bearer(token), timeout=10)
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
        ack = submit(pb.SubmitRunRequest(run=run).SerializeToString(), metadata=bearer(token),
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
    submit = raw_submit(channel)
    stub = collector_pb2_grpc.CollectorStub(channel)
    try:
        for _ in range(rounds):
            for what, make, expected in _poisons():
                tally.tried += 1
                try:
                    ack = submit(make(), metadata=bearer(token), timeout=10)
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
                    ack = stub.SubmitRun(pb.SubmitRunRequest(run=run), metadata=bearer(token),
                                         timeout=10)
                    acknowledged[ack.run_id] = ack.content_sha256
                    stub.GetRun(pb.GetRunRequest(run_id=run.run_id), metadata=bearer(token),
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
