"""Administering a running collector from the same machine.

DuckDB lets one process hold the database file, so while `serve` runs, token
commands cannot open it. `serve` therefore writes a credential next to the
database (`<db>.admin.json`, mode 0600, a fresh secret each start, removed on
stop) with a loopback address; token commands that find the database locked
read it and call the Admin service over loopback. Whoever can read the
database file's folder can administer the collector either way.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import grpc
from gpubench.collector.errors import RunConflict, TokenExists
from gpubench.collector.store import TokenRow

from gpubench.errors import (
    AccessDenied,
    CollectorUnavailable,
    ExitCode,
    GpubenchError,
    NotFound,
    RequestRefused,
)
from gpubench.v1 import collector_pb2, collector_pb2_grpc, run_pb2

CALL_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class Credential:
    """Where the live collector listens for local administration, and its secret."""

    address: str
    secret: str
    pid: int


def credential_path(db_path: Path) -> Path:
    """The credential file of the collector serving `db_path`."""
    db_path = Path(db_path)
    return db_path.with_name(db_path.name + ".admin.json")


def write(path: Path, *, address: str, secret: str) -> None:
    """Write a fresh credential readable only by its owner (replacing a stale one)."""
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as out:
        json.dump({"address": address, "secret": secret, "pid": os.getpid()}, out)


def read(path: Path) -> Credential:
    """The credential, or a GpubenchError saying why there is none."""
    try:
        data = json.loads(path.read_text())
        return Credential(str(data["address"]), str(data["secret"]), int(data.get("pid", 0)))
    except FileNotFoundError as exc:
        raise CollectorUnavailable(
            f"{path}: missing; the database is locked by another process, but no collector "
            "serving it left its local admin credential"
        ) from exc
    except PermissionError as exc:
        raise AccessDenied(f"{path}: not readable by this user") from exc
    except (ValueError, KeyError, TypeError) as exc:
        raise GpubenchError(f"{path}: not a collector credential file") from exc


def remove(path: Path) -> None:
    """Remove the credential (on stop)."""
    with contextlib.suppress(FileNotFoundError):
        path.unlink()


def _error(exc: grpc.RpcError, address: str) -> GpubenchError:
    code, detail = exc.code(), exc.details() or ""
    if code == grpc.StatusCode.UNAVAILABLE:
        return CollectorUnavailable(f"collector at {address}: unreachable ({detail})")
    if code in (grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED):
        return AccessDenied(f"collector at {address}: {detail}")
    if code == grpc.StatusCode.NOT_FOUND:
        return NotFound(detail)
    if code == grpc.StatusCode.ALREADY_EXISTS:
        return TokenExists(detail) if detail.startswith("token") else RunConflict(detail)
    if code == grpc.StatusCode.INVALID_ARGUMENT:
        return RequestRefused(detail, exit_code=ExitCode.BAD_DATA)
    return RequestRefused(f"collector at {address}: {code.name}: {detail}")


def _time(message: object, field: str) -> datetime | None:
    return getattr(message, field).ToDatetime() if message.HasField(field) else None  # type: ignore[attr-defined]


def _token_row(token: collector_pb2.Token) -> TokenRow:
    return TokenRow(
        token.name, token.admin, token.created_at.ToDatetime(), token.revoked,
        _time(token, "last_used_at"),
    )


class LiveCollector:
    """Token administration and run import through a running collector's Admin service."""

    def __init__(self, credential: Credential) -> None:
        self._credential = credential
        self._channel = grpc.insecure_channel(credential.address)
        self._metadata = (("authorization", f"Bearer {credential.secret}"),)
        self._admin = collector_pb2_grpc.AdminStub(self._channel)
        self._collector = collector_pb2_grpc.CollectorStub(self._channel)

    @classmethod
    @contextlib.contextmanager
    def for_database(cls, db_path: Path) -> Iterator[LiveCollector]:
        """The collector serving `db_path`, through its local credential."""
        live = cls(read(credential_path(db_path)))
        try:
            yield live
        finally:
            live._channel.close()

    @contextlib.contextmanager
    def _calling(self) -> Iterator[None]:
        try:
            yield
        except grpc.RpcError as exc:
            raise _error(exc, self._credential.address) from exc

    def create(self, name: str, *, admin: bool) -> tuple[TokenRow, str]:
        """A new token and its secret (shown once)."""
        with self._calling():
            reply = self._admin.CreateToken(
                collector_pb2.CreateTokenRequest(name=name, admin=admin),
                metadata=self._metadata, timeout=CALL_TIMEOUT_S,
            )
        return _token_row(reply.token), reply.secret

    def list(self) -> list[TokenRow]:
        """Every token."""
        with self._calling():
            reply = self._admin.ListTokens(
                collector_pb2.ListTokensRequest(), metadata=self._metadata, timeout=CALL_TIMEOUT_S
            )
        return [_token_row(t) for t in reply.tokens]

    def revoke(self, name: str) -> TokenRow:
        """Revoke a token by name."""
        with self._calling():
            reply = self._admin.RevokeToken(
                collector_pb2.RevokeTokenRequest(name=name),
                metadata=self._metadata, timeout=CALL_TIMEOUT_S,
            )
        return _token_row(reply.token)

    def submit(self, run: run_pb2.Run) -> collector_pb2.SubmitRunResponse:
        """Submit one run (validated and stored by the live collector)."""
        with self._calling():
            return self._collector.SubmitRun(
                collector_pb2.SubmitRunRequest(run=run),
                metadata=self._metadata, timeout=CALL_TIMEOUT_S,
            )
