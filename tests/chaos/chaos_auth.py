"""The fault campaign's token matrix: every method with every kind of bad token, a
token revoked mid-submission, and valid calls answered after the failed authentications."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import grpc
from chaos_support import (
    Collector,
    Tally,
    answer_code,
    bearer,
    make_run,
)

from gpubench.v1 import collector_pb2 as pb
from gpubench.v1 import collector_pb2_grpc

# The collector's default limit of failed authentications a minute per address.
AUTH_FAILURES = 30


# -- authentication --------------------------------------------------------------------------

def auth_part(folder: Path, *, rounds: int, racers: int = 8) -> Tally:
    """Every Collector and Admin method with no, a wrong, a revoked and a non-admin
    token (`rounds` times), each answered as it should be (UNAUTHENTICATED,
    PERMISSION_DENIED for Admin calls of a non-admin token); then a token revoked while
    `racers` threads submit with it: no call begun after the revocation returned may be
    acknowledged; then, from the address that failed so often, a valid call must be
    answered and a wrong token still refused (RESOURCE_EXHAUSTED once the address's
    budget of failures is spent)."""
    tally = Tally("auth")
    collector = Collector(folder / "auth.duckdb")
    admin = collector.token("root", admin=True)
    user = collector.token("user")
    revoked = collector.token("gone")
    racer = collector.token("racer")
    collector.start()
    channel = grpc.insecure_channel(collector.address)
    collector_pb2_grpc.AdminStub(channel).RevokeToken(
        pb.RevokeTokenRequest(name="gone"), metadata=bearer(admin), timeout=10)
    methods = [(name, m) for name in ("Collector", "Admin")
               for m in pb.DESCRIPTOR.services_by_name[name].methods]
    kinds = {"non-admin": user, "no token": None, "wrong token": "gpb_not-a-token",
             "revoked": revoked}
    # Past AUTH_FAILURES failed authentications a minute an address's calls with unseen
    # tokens are refused (RESOURCE_EXHAUSTED): the collector is started again (the
    # count is in memory, the tokens in the database) before the matrix could pass it,
    # so that it runs fast. Every refusal is counted, as the collector may count it.
    failures = 0
    try:
        for _ in range(rounds):
            for kind, secret in kinds.items():
                if failures + len(methods) > AUTH_FAILURES:
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
                    metadata = bearer(secret) if secret else None
                    try:
                        call(b"", metadata=metadata, timeout=10)
                        code = "OK"
                    except grpc.RpcError as exc:
                        code = exc.code().name
                    # A refused token counts, and so does a token at Admin/Backup,
                    # which only the collector's local credential may call.
                    failures += code in ("UNAUTHENTICATED", "PERMISSION_DENIED")
                    tally.code(code)
                    if not _auth_allowed(kind, service, code):
                        tally.wrong += 1
                        tally.note = f"{kind} {service}/{method.name}: {code}"
        matrix = tally.tried
        # A fresh count of failed authentications for the race, whose admin call must
        # get through.
        channel.close()
        collector.stop()
        collector.start()
        channel = grpc.insecure_channel(collector.address)
        _race_revocation(tally, collector, channel, admin, racer, racers)
        # The race failed many authentications: the address's valid calls still go
        # through, and a wrong token is still refused, its budget spent.
        for secret, expected in ((admin, ("OK",)),
                                 ("gpb_not-a-token", ("RESOURCE_EXHAUSTED", "UNAUTHENTICATED"))):
            tally.tried += 1
            code = answer_code(channel.unary_unary("/gpubench.v1.Collector/ListRuns"), b"",
                               metadata=bearer(secret), timeout=30)
            tally.code(code)
            if code not in expected:
                tally.wrong += 1
                tally.note = f"after the race's failed authentications: {code}"
        tally.note = tally.note or (
            f"{matrix} calls of {len(methods)} methods x {len(kinds)} kinds of token, "
            f"{tally.tried - matrix - 2} submissions racing a revocation, then a valid "
            "call answered and a wrong token refused")
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
                stub.SubmitRun(pb.SubmitRunRequest(run=make_run()), metadata=bearer(racer),
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
            pb.RevokeTokenRequest(name="racer"), metadata=bearer(admin), timeout=10)
        revoked_at.append(time.monotonic())
        time.sleep(0.5)
    finally:
        stop.set()
        for worker in workers:
            worker.join(30)
    tally.wrong += len(late)
