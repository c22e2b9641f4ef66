"""Administering a running collector from the same machine.

DuckDB lets one process hold the database file, so while `serve` runs, token,
quarantine and import commands cannot open it. `serve` therefore writes a
credential next to the database (`<db>.admin.json`, mode 0600, a fresh secret each
start, removed on stop) with a loopback address; those commands, finding the
database locked, read it and call the Admin service over loopback. Whoever can read the
database file's folder can administer the collector either way.
"""

from __future__ import annotations

import builtins
import contextlib
import json
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import grpc

from gpubench.client import Client, translate_error
from gpubench.collector.quarantine import QuarantinedRun
from gpubench.collector.tokens import TokenRow
from gpubench.errors import (
    AccessDenied,
    CollectorUnavailable,
    GpubenchError,
)
from gpubench.v1 import collector_pb2, collector_pb2_grpc, run_pb2

CALL_TIMEOUT_S = 30.0
# A backup writes the whole database: minutes for a large one.
BACKUP_TIMEOUT_S = 3600.0


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


def _token_row(token: collector_pb2.Token) -> TokenRow:
    last_used = token.last_used_at.ToDatetime() if token.HasField("last_used_at") else None
    return TokenRow(
        token.name, token.admin, token.created_at.ToDatetime(), token.revoked, last_used
    )


def _quarantined(run: collector_pb2.QuarantinedRun) -> QuarantinedRun:
    return QuarantinedRun(
        run.run_id, run.submitter, run.received_at.ToDatetime(), run.quarantined_at.ToDatetime(),
        run.reason, run.content_sha256,
    )


class LiveCollector:
    """Token and quarantine administration and run import through a running collector,
    over loopback (the same methods as the Store's, for the commands that use either)."""

    def __init__(self, credential: Credential) -> None:
        self._credential = credential
        self._client = Client(credential.address, token=credential.secret, timeout=CALL_TIMEOUT_S)

    @classmethod
    @contextlib.contextmanager
    def for_database(cls, db_path: Path) -> Iterator[LiveCollector]:
        """The collector serving `db_path`, through its local credential."""
        live = cls(read(credential_path(db_path)))
        try:
            yield live
        finally:
            live._client.close()

    def create(self, name: str, *, admin: bool) -> tuple[TokenRow, str]:
        """A new token and its secret (shown once)."""
        reply = self._client.create_token(name, admin=admin)
        return _token_row(reply.token), reply.secret

    def list(self) -> list[TokenRow]:
        """Every token."""
        return [_token_row(t) for t in self._client.list_tokens()]

    def revoke(self, name: str) -> TokenRow:
        """Revoke a token by name."""
        return _token_row(self._client.revoke_token(name))

    def quarantined(self) -> builtins.list[QuarantinedRun]:
        """The runs held in quarantine, oldest first."""
        return [_quarantined(r) for r in self._client.list_quarantine()]

    def retry_quarantined(
        self, run_ids: Sequence[str] = ()
    ) -> tuple[builtins.list[str], builtins.list[QuarantinedRun]]:
        """Store quarantined runs again: the run_ids stored, the runs still refused."""
        reply = self._client.retry_quarantine(run_ids)
        return list(reply.stored), [_quarantined(r) for r in reply.refused]

    def drop_quarantined(self, run_ids: Sequence[str]) -> builtins.list[QuarantinedRun]:
        """Delete quarantined runs for good; what was dropped."""
        return [_quarantined(r) for r in self._client.drop_quarantine(run_ids)]

    def backup(self, folder: Path) -> collector_pb2.BackupResponse:
        """Have the collector back its database up into `folder` (absolute, on this
        machine), with a deadline of BACKUP_TIMEOUT_S: a large database takes a while."""
        request = collector_pb2.BackupRequest(folder=str(folder))
        address, secret = self._credential.address, self._credential.secret
        with grpc.insecure_channel(address) as channel:
            try:
                return collector_pb2_grpc.AdminStub(channel).Backup(
                    request, timeout=BACKUP_TIMEOUT_S,
                    metadata=[("authorization", f"Bearer {secret}")],
                )
            except grpc.RpcError as exc:
                raise translate_error(exc, address, f"backing up into {folder}") from None

    def submit(self, run: run_pb2.Run) -> collector_pb2.SubmitRunResponse:
        """Submit one run (validated and stored by the live collector)."""
        return self._client.submit_run(run)
