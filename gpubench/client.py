"""The Python client of a gpubench collector: the one module that talks gRPC as a client.

    with Client("collector.lab:50051", token="...") as client:
        client.submit_run(run)
        table = client.compare("B7", baseline="Tesla T4")

Every call carries a deadline and the bearer token; every gRPC failure becomes a
`gpubench.errors.GpubenchError` subclass whose message names the collector and
the server's detail, with a `retryable` attribute so a caller (the agent's push)
can decide whether to try again. Retrying itself is the caller's business.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

# gRPC's C core writes its own INFO lines to stderr unless told otherwise (a connection the
# collector closed when idle: "chttp2_transport.cc:1403] ... Got goaway ... connection
# idle", 184 columns); it reads this when grpc is first imported. Its errors still show,
# and a GRPC_VERBOSITY the user set wins.
os.environ.setdefault("GRPC_VERBOSITY", "ERROR")

import grpc  # noqa: E402 - after its verbosity is set
import pandas as pd  # noqa: E402

from gpubench import comparison_key, frames, models, record, sizes
from gpubench.errors import (
    AccessDenied,
    CollectorUnavailable,
    ExitCode,
    GpubenchError,
    NotFound,
    RequestRefused,
)
from gpubench.v1 import collector_pb2, collector_pb2_grpc, run_pb2
from gpubench.versions import VERSION

DEFAULT_PORT = 50051  # the port `gpubench-collector serve` listens on unless told
DEFAULT_ADDRESS = f"127.0.0.1:{DEFAULT_PORT}"
ADDRESS_ENV = "GPUBENCH_COLLECTOR"
TOKEN_ENV = "GPUBENCH_TOKEN"
# gRPC's port for an address that names none.
GRPC_DEFAULT_PORT = 443

# The collector caps a page at 1000 runs and at 2 MiB of runs (it ends a page early
# and hands out a page token: iter_runs follows every token, so a listing or an export
# gets every run however large the runs are).
EXPORT_PAGE_SIZE = 500
# Collectors older than the page's byte bound could send a page of 1000 full runs, past
# gRPC's default 4 MiB receive limit.
MAX_MESSAGE_BYTES = 64 * 1024 * 1024

_CHANNEL_OPTIONS: list[tuple[str, Any]] = [
    # Keepalive pings only while a call is open, and no more often than a gRPC server
    # accepts by default (one per 5 minutes without data); more would earn a GOAWAY
    # ("too_many_pings") on long calls. Each call's deadline catches a hung collector.
    ("grpc.keepalive_time_ms", 300_000),
    ("grpc.keepalive_timeout_ms", 10_000),
    ("grpc.keepalive_permit_without_calls", 0),
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
    ("grpc.primary_user_agent", f"gpubench/{VERSION}"),
]


class RequestLimited(RequestRefused):
    """The collector refused the request for now (RESOURCE_EXHAUSTED): a limit or quota.

    Retryable: the same request may succeed after a pause.
    """

    retryable = True


@dataclass(frozen=True)
class TokenAccess:
    """What a collector says of the client's token (`Client.check_access`)."""

    token_name: str
    may_submit: bool  # SubmitRun would accept the token
    admin: bool
    collector_version: str  # the collector's gpubench version
    schema_version: int  # the newest run record revision the collector reads


FROM_DEFAULT = "the default"


@dataclass(frozen=True)
class Origins:
    """Where a client's address and token came from, and how a person sets them, so
    that its errors say what to change.

    `address`: "--collector", "$GPUBENCH_COLLECTOR", FROM_DEFAULT, or "" (not known).
    `token`: "--token", "$GPUBENCH_TOKEN", "the file site.token", or "" (not known,
    or none given). `set_address` and `set_token` name the flags and variables that set
    them ("--collector HOST:PORT or $GPUBENCH_COLLECTOR").
    """

    address: str = ""
    token: str = ""
    set_address: str = f"Client(address) or ${ADDRESS_ENV}"
    set_token: str = f"Client(token=...) or ${TOKEN_ENV}"

    def where(self) -> str:
        """'the default address', 'the address from --collector', or ''."""
        if self.address == FROM_DEFAULT:
            return "the default address"
        return f"the address from {self.address}" if self.address else ""


def has_port(address: str) -> bool:
    """Whether a gRPC target names its port ("host:50051", "[::1]:50051"); targets with a
    scheme ("unix:/path", "dns:///host:port") are taken as they are."""
    if "/" in address or address.startswith(("unix:", "unix-abstract:", "vsock:")):
        return True
    if address.startswith("["):
        return "]:" in address
    host, colon, port = address.rpartition(":")
    if not colon:
        return False
    return ":" in host or port.isdigit()  # an IPv6 literal without brackets: its own business


def _unreachable_hint(address: str, origins: Origins) -> str:
    """What to do about a collector that cannot be reached, naming where its address
    came from."""
    where = origins.where()
    if not has_port(address):
        return (f": {where or 'the address'} has no port, so gRPC tried {GRPC_DEFAULT_PORT}; "
                f"give one with {origins.set_address} (a collector listens on {DEFAULT_PORT} "
                "unless told otherwise)")
    if origins.address == FROM_DEFAULT:
        return (f", {where}: start a collector there (gpubench-collector serve), or give "
                f"another with {origins.set_address}")
    if where:
        return (f", {where}: check it and that a collector serves there, or give another "
                f"with {origins.set_address}")
    return ""


# A URL's scheme where a gRPC target is wanted (gRPC's own schemes, dns: or unix:, pass).
_URL_SCHEME = re.compile(r"^(https?|grpcs?)://", re.IGNORECASE)


def _url_refused(address: str, origins: Origins) -> GpubenchError:
    """A collector address written as a URL ("http://host:50051"), with the address to
    give instead."""
    scheme = _URL_SCHEME.match(address)
    assert scheme is not None
    bare = address[scheme.end():].rstrip("/")
    where = origins.where() or "the collector's address"
    tls = " (with --tls for TLS)" if scheme.group(1).lower() in ("https", "grpcs") else ""
    return GpubenchError(
        f"{where} is {address}, a URL: a collector's address is HOST:PORT without a "
        f"scheme, {bare}{tls}; give it with {origins.set_address}", exit_code=ExitCode.USAGE)


# gRPC's wording for a plain HTTP server where it expected gRPC (a results site's port).
_HTTP_SERVER = re.compile(r"http1\.x server|Failed parsing HTTP/2", re.IGNORECASE)


def answers_http(detail: str) -> bool:
    """Whether an UNAVAILABLE error's detail (the error's `detail`) says the address
    answered HTTP: a web server, not a collector (a wrong address, not a collector down)."""
    return bool(_HTTP_SERVER.search(detail))


def _refused_token(address: str, what: str, suffix: str, origins: Origins, token_sent: bool,
                   reading: bool) -> AccessDenied:
    """A token the collector refused, or the token it needs and did not get, with where
    it came from and what to do; a read may go without one where the collector serves
    --public-read."""
    if not token_sent:
        return AccessDenied(
            f"the collector at {address} needs a token for {what} and none was given"
            + (" (it does not serve --public-read)" if reading else "")
            + f": give one with {origins.set_token} (a collector's operator makes them: "
            "gpubench-collector token create NAME)")
    source = f"The token came from {origins.token}: a" if origins.token else "A"
    message = (f"the collector at {address} did not accept the token ({what}){suffix}. "
               f"{source} token works only at the collector whose database made it; give "
               f"the right one with {origins.set_token}")
    if reading:
        message += (", or none at all where the collector serves --public-read (it needs "
                    "none to read)")
    return AccessDenied(message)


# gRPC's RESOURCE_EXHAUSTED for a message over the receiver's size limit.
_TOO_LARGE = re.compile(r"larger than max", re.IGNORECASE)

_RETRYABLE_CODES = {
    grpc.StatusCode.UNAVAILABLE,
    grpc.StatusCode.DEADLINE_EXCEEDED,
    grpc.StatusCode.RESOURCE_EXHAUSTED,
    grpc.StatusCode.ABORTED,
    # A server stopping cancels the calls it has not handled yet (this client never
    # cancels its own: an interrupt raises KeyboardInterrupt); a run sent again is
    # stored once (its run_id). INTERNAL and UNKNOWN (a bug) are not retried.
    grpc.StatusCode.CANCELLED,
}


def _one_line(text: str) -> str:
    return " ".join(text.split())


# gRPC's wording for a failed connection, up to the reason ("Connection refused").
_CONNECT_PREFIX = re.compile(
    r"^failed to connect to all addresses; last error: \w+: (?:ipv[46]:\S+: )?"
    r"(?:Failed to connect to remote host: )?"
)
# gRPC's wording for a name that does not resolve: the host and the resolver's reason.
_LOOKUP_FAILED = re.compile(r"address lookup failed for (\S+?):\d*: ([^\]]+)\]?")


def translate_error(
    error: grpc.RpcError, address: str, what: str, subject: str | None = None, *,
    origins: Origins = Origins(), token_sent: bool = True, reading: bool = False,
) -> GpubenchError:
    """The user-facing error for a failed call to `address`.

    `what` says what was asked ("deleting run 1234"); `subject` names the thing a
    NOT_FOUND is about ("run 1234"). An unreachable collector and a refused token are
    said with where the address or token came from (`origins`) and what to change;
    `token_sent` says whether the call carried one, `reading` whether it was a read
    (which a --public-read collector answers without a token).

    The returned error carries `retryable`, `status_code` (the gRPC code's name) and
    `detail` (the server's message) as attributes.
    """
    code = error.code() if hasattr(error, "code") else grpc.StatusCode.UNKNOWN
    detail = _one_line((error.details() if hasattr(error, "details") else "") or "")
    suffix = f": {detail}" if detail else ""
    retryable = code in _RETRYABLE_CODES
    exc: GpubenchError
    if code == grpc.StatusCode.UNAVAILABLE:
        # A name that does not resolve ends its detail with a colon and nothing after it.
        reason = _CONNECT_PREFIX.sub("", detail).rstrip(": ") or code.name
        lookup = _LOOKUP_FAILED.search(reason)
        if lookup:
            reason = f"cannot resolve {lookup.group(1)}: {lookup.group(2)}"
        if _HTTP_SERVER.search(detail):
            exc = CollectorUnavailable(
                f"{address} ({origins.where() or 'the address'}) answers HTTP, not gRPC: "
                "that is a web server, such as the results site (gpubench-collector web), "
                "not the collector; give the address the collector serves on (`gpubench-"
                f"collector serve` prints it) with {origins.set_address}")
        else:
            exc = CollectorUnavailable(f"cannot reach the collector at {address} ({reason})"
                                       + _unreachable_hint(address, origins))
    elif code == grpc.StatusCode.DEADLINE_EXCEEDED:
        exc = CollectorUnavailable(
            f"the collector at {address} did not answer in time ({what}){suffix}"
        )
    elif code == grpc.StatusCode.UNAUTHENTICATED:
        exc = _refused_token(address, what, suffix, origins, token_sent, reading)
    elif code == grpc.StatusCode.PERMISSION_DENIED:
        exc = AccessDenied(f"the collector at {address} does not allow {what}{suffix}")
    elif code == grpc.StatusCode.NOT_FOUND:
        # The server's detail names what is missing ("run_id 1234: no such run").
        exc = NotFound(
            f"{detail} (collector at {address})"
            if detail
            else f"the collector at {address} has no {subject or 'such thing'}"
        )
    elif code == grpc.StatusCode.UNIMPLEMENTED:
        exc = RequestRefused(
            f"the collector at {address} does not offer {what} (a collector older than "
            f"this gpubench {VERSION}?){suffix}"
        )
    elif code == grpc.StatusCode.RESOURCE_EXHAUSTED and _TOO_LARGE.search(detail):
        # Sending the same message again cannot help.
        exc = RequestRefused(
            f"the collector at {address} refused {what}: the message is too large{suffix}"
        )
        retryable = False
    elif code == grpc.StatusCode.RESOURCE_EXHAUSTED:
        exc = RequestLimited(f"the collector at {address} is over a limit ({what}){suffix}")
    elif code in (
        grpc.StatusCode.INVALID_ARGUMENT,
        grpc.StatusCode.ALREADY_EXISTS,
        grpc.StatusCode.FAILED_PRECONDITION,
        grpc.StatusCode.OUT_OF_RANGE,
    ):
        exc = RequestRefused(f"the collector at {address} refused {what}{suffix}")
    else:
        exc = GpubenchError(
            f"the collector at {address} failed on {what} ({code.name}){suffix}",
            exit_code=ExitCode.FAILURE,
        )
    exc.retryable = retryable  # type: ignore[attr-defined]
    exc.status_code = code.name  # type: ignore[attr-defined]
    exc.detail = detail  # type: ignore[attr-defined]
    return exc


def _timestamp(value: datetime | str | None, field: str) -> Any:
    """A protobuf Timestamp from a datetime or an ISO 8601 string (naive means UTC)."""
    from google.protobuf.timestamp_pb2 import Timestamp

    if value is None:
        return None
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value.strip())
        except ValueError:
            raise GpubenchError(
                f"{field}: {value!r} is not an ISO 8601 date or time (e.g. 2025-06-30 or "
                "2025-06-30T14:00)",
                exit_code=ExitCode.USAGE,
            ) from None
    if value.tzinfo is None:
        value = value.replace(tzinfo=timezone.utc)
    stamp = Timestamp()
    stamp.FromDatetime(value.astimezone(timezone.utc))
    return stamp


class CompareFilters:
    """What to compare: one model, a pin per dimension of the comparison key
    (gpubench.comparison_key, by name: `precision="float32"`, `epochs=5`; None or empty:
    any) and the options `Client.compare` describes. An unknown argument is a TypeError
    naming it."""

    def __init__(self, model: str, *, baseline: str | None = None, baseline_count: int = 1,
                 gpus: Sequence[str] = (), allow_mixed: bool = False,
                 include_outliers: bool = False, include_flagged: bool = False,
                 **pins: str | int | None) -> None:
        for name in pins:
            if name not in comparison_key.BY_NAME:
                raise TypeError(f"compare() got an unexpected keyword argument {name!r}")
        self.model = model
        self.baseline = baseline
        self.baseline_count = baseline_count
        self.gpus = tuple(gpus)
        self.allow_mixed = allow_mixed
        self.include_outliers = include_outliers
        self.include_flagged = include_flagged
        # Each value of its dimension's type (CompareRequest's field).
        self.pins: dict[str, Any] = {d.name: pins.get(d.name) or d.empty
                                     for d in comparison_key.DIMENSIONS}

    def request(self) -> collector_pb2.CompareRequest:
        """The Compare call's request (an unset filter is the message's empty value)."""
        return collector_pb2.CompareRequest(
            model=self.model, **self.pins, gpu_names=list(self.gpus),
            baseline_gpu=self.baseline or "", baseline_gpu_count=self.baseline_count or 0,
            allow_mixed=self.allow_mixed, include_outliers=self.include_outliers,
            include_flagged=self.include_flagged)


class Client:
    """A connection to one collector.

    `address` and `token` default to $GPUBENCH_COLLECTOR ("127.0.0.1:50051") and
    $GPUBENCH_TOKEN. With `ca` (a PEM file) the channel uses TLS trusting that
    certificate; with `tls=True` and no `ca` it uses TLS with the system's roots.
    `timeout` is the deadline of every call, in seconds. `origins` says where the
    address and token came from, for the errors (default: the arguments, else the
    variables, else the default address).
    """

    def __init__(
        self,
        address: str | None = None,
        token: str | None = None,
        *,
        ca: str | Path | None = None,
        tls: bool = False,
        timeout: float = 10.0,
        origins: Origins | None = None,
    ) -> None:
        self.address = (address or os.environ.get(ADDRESS_ENV) or DEFAULT_ADDRESS).strip()
        self._token = token if token is not None else os.environ.get(TOKEN_ENV) or None
        self.origins = origins or Origins(
            address="" if address else f"${ADDRESS_ENV}" if os.environ.get(ADDRESS_ENV)
            else FROM_DEFAULT,
            token="" if token is not None else f"${TOKEN_ENV}" if self._token else "")
        if _URL_SCHEME.match(self.address):
            raise _url_refused(self.address, self.origins)
        if timeout <= 0:
            raise GpubenchError(
                f"timeout: must be positive, got {timeout}", exit_code=ExitCode.USAGE
            )
        self.timeout = float(timeout)
        self.tls = bool(tls or ca)
        if ca is not None:
            try:
                root = Path(ca).read_bytes()
            except OSError as exc:
                raise GpubenchError(
                    f"CA certificate {ca}: cannot read it ({exc.strerror})",
                    exit_code=ExitCode.BAD_DATA,
                ) from None
            credentials = grpc.ssl_channel_credentials(root_certificates=root)
            self._channel = grpc.secure_channel(self.address, credentials, _CHANNEL_OPTIONS)
        elif tls:
            credentials = grpc.ssl_channel_credentials()
            self._channel = grpc.secure_channel(self.address, credentials, _CHANNEL_OPTIONS)
        else:
            self._channel = grpc.insecure_channel(self.address, _CHANNEL_OPTIONS)
        self._collector = collector_pb2_grpc.CollectorStub(self._channel)
        self._admin = collector_pb2_grpc.AdminStub(self._channel)

    # -- plumbing -------------------------------------------------------------------

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Client({self.address!r}, tls={self.tls})"

    def close(self) -> None:
        """Close the channel; the client cannot be used afterwards."""
        self._channel.close()

    def _call(self, method: Any, request: Any, what: str, subject: str | None = None, *,
              reading: bool = False, timeout: float | None = None) -> Any:
        metadata = [("authorization", f"Bearer {self._token}")] if self._token else None
        try:
            return method(request, timeout=timeout or self.timeout, metadata=metadata)
        except grpc.RpcError as exc:
            raise translate_error(exc, self.address, what, subject, origins=self.origins,
                                  token_sent=bool(self._token), reading=reading) from None
        except ValueError as exc:
            # grpc raises ValueError on a closed channel and on malformed metadata.
            raise GpubenchError(f"collector at {self.address}: {exc}") from None

    # -- access -----------------------------------------------------------------------

    def check_access(self) -> TokenAccess:
        """Whether the collector answers and accepts this client's token for writing: a
        cheap call for a preflight before any training.

        Raises AccessDenied for a missing, wrong or revoked token (even where the
        collector lets anyone read), CollectorUnavailable (retryable) when the collector
        cannot be reached or does not answer in time.
        """
        response = self._call(self._collector.CheckAccess, collector_pb2.CheckAccessRequest(),
                              "checking access")
        return TokenAccess(
            token_name=response.token_name, may_submit=response.may_submit,
            admin=response.admin, collector_version=response.collector_version,
            schema_version=response.schema_version,
        )

    def stats(self) -> collector_pb2.StatsResponse:
        """What the collector's operators watch: submissions acknowledged and refused
        by reason since it started, runs stored, flagged, and held unstored from an
        earlier version (a read: needs a token unless --public-read)."""
        return self._call(self._collector.Stats, collector_pb2.StatsRequest(),
                          "reading the collector's stats", reading=True)

    # -- runs -----------------------------------------------------------------------

    def submit_run(self, run: run_pb2.Run) -> collector_pb2.SubmitRunResponse:
        """Send one run record; the collector stores it durably before answering.

        Resubmitting the same run is safe (the collector is idempotent on run_id).
        Raises CollectorUnavailable (retryable), AccessDenied, RequestRefused or
        RequestLimited (retryable).
        """
        request = collector_pb2.SubmitRunRequest(run=run)
        return self._call(self._collector.SubmitRun, request, f"submitting run {run.run_id}")

    def get_run(self, run_id: str) -> collector_pb2.StoredRun:
        """One stored run by its id, or a prefix of it (4 characters at least, as
        `StoredRun.short_id` shows it); NotFound if no stored run id starts with it,
        RequestRefused if several do."""
        request = collector_pb2.GetRunRequest(run_id=run_id)
        return self._call(self._collector.GetRun, request, f"reading run {run_id}",
                          f"run {run_id}", reading=True)

    def delete_run(self, run_id: str) -> str:
        """Delete a run (only its submitter or an admin may); returns its id."""
        request = collector_pb2.DeleteRunRequest(run_id=run_id)
        response = self._call(
            self._collector.DeleteRun, request, f"deleting run {run_id}", f"run {run_id}"
        )
        return response.run_id

    def _list_request(
        self, *, gpu: str | None = None, model: str | None = None, backend: str | None = None,
        precision: str | None = None, gpu_count: int | None = None,
        submitter: str | None = None, since: datetime | str | None = None,
        until: datetime | str | None = None, page_size: int = 200,
    ) -> collector_pb2.ListRunsRequest:
        request = collector_pb2.ListRunsRequest(
            gpu_name=gpu or "", model=model or "", backend=backend or "",
            precision=precision or "", gpu_count=gpu_count or 0, submitter=submitter or "",
            page_size=page_size,
        )
        for field, value in (("since", since), ("until", until)):
            stamp = _timestamp(value, field)
            if stamp is not None:
                getattr(request, field).CopyFrom(stamp)
        return request

    def runs_page(self, page_token: str = "", **filters: Any
                  ) -> tuple[list[collector_pb2.StoredRun], str]:
        """One page of stored runs matching the filters of `iter_runs` (`page_size` runs at
        most), newest first, and the token of the next page ("" after the last)."""
        request = self._list_request(**filters)
        request.page_token = page_token
        page = self._call(self._collector.ListRuns, request, "listing runs", reading=True)
        return list(page.runs), page.next_page_token

    def iter_runs(
        self,
        *,
        gpu: str | None = None,
        model: str | None = None,
        backend: str | None = None,
        precision: str | None = None,
        gpu_count: int | None = None,
        submitter: str | None = None,
        since: datetime | str | None = None,
        until: datetime | str | None = None,
        limit: int | None = None,
        page_size: int = 200,
    ) -> Iterator[collector_pb2.StoredRun]:
        """Stored runs matching the filters, newest first as the collector orders them.

        Pages are fetched as the iterator advances, following the collector's page
        tokens to the last page (a page may hold fewer than `page_size` runs: the
        collector also bounds a page in bytes). `gpu` matches a part of the GPU
        name, case-insensitively; `since`/`until` take datetimes or ISO 8601 strings.
        """
        if limit is not None and limit <= 0:
            return
        filters: dict[str, Any]  # each value of its argument's type
        filters = {"gpu": gpu, "model": model, "backend": backend, "precision": precision,
                   "gpu_count": gpu_count, "submitter": submitter, "since": since,
                   "until": until, "page_size": min(page_size, limit) if limit else page_size}
        self._list_request(**filters)  # a bad time fails here, before any call
        seen_tokens: set[str] = set()
        token = ""
        yielded = 0
        while True:
            runs, token = self.runs_page(token, **filters)
            for stored in runs:
                yield stored
                yielded += 1
                if limit is not None and yielded >= limit:
                    return
            # An empty token ends the listing; a repeated one would loop forever.
            if not token or token in seen_tokens:
                return
            seen_tokens.add(token)

    def list_runs(self, **filters: Any) -> pd.DataFrame:
        """Stored runs as a table, one row per run with flattened, unit-named columns.

        Takes the filters of `iter_runs`. Columns are those of `gpubench.frames.flat_run`.
        """
        return frames.runs_frame(self.iter_runs(**filters))

    def export(self, path: str | Path, format: str = "parquet", **filters: Any) -> int:
        """Write every stored run (or those matching the filters of `iter_runs`) to a
        Parquet or CSV file with flattened columns (`gpubench.frames.FLAT_RUN_COLUMNS`, each
        described in docs/data-dictionary.md); returns the number of runs written. In CSV,
        text a spreadsheet would run as a formula is written with a "'" before it.
        """
        fmt = format.lower()
        if fmt not in ("parquet", "csv"):
            raise GpubenchError(
                f"format: {format!r} is not one of parquet, csv", exit_code=ExitCode.USAGE
            )
        filters.setdefault("page_size", EXPORT_PAGE_SIZE)
        frame = frames.runs_frame(self.iter_runs(**filters))
        target = Path(path)
        try:
            if fmt == "csv":
                target.write_text(frames.csv_text(frame), encoding="utf-8")
            else:
                try:
                    frame.to_parquet(target, index=False)
                except ImportError:
                    raise GpubenchError(
                        "parquet export needs pyarrow (pip install pyarrow), or use csv",
                        exit_code=ExitCode.USAGE,
                    ) from None
        except OSError as exc:
            raise GpubenchError(
                f"{target}: cannot write it ({exc.strerror or exc})", exit_code=ExitCode.BAD_DATA
            ) from None
        return len(frame)

    # -- comparisons ----------------------------------------------------------------

    def model_of(self, text: str) -> tuple[str, str]:
        """The model `text` names and the fingerprint it pins: (text, "") for a model's
        name; for a model fingerprint (8 or more hex digits, gpubench.models), the model
        of the stored runs whose fingerprint starts so and their whole fingerprint, or
        NotFound."""
        if models.is_standard(text) or not models.is_fingerprint(text):
            return text, ""
        for stored in self.iter_runs():
            config = stored.run.config
            if config.model_fingerprint.startswith(text):
                return config.model, config.model_fingerprint
        raise NotFound(f"model fingerprint {text}: no stored run is of a model of that "
                       "fingerprint")

    def compare_response(self, model: str, **filters: Any) -> collector_pb2.CompareResponse:
        """The collector's raw comparison; `filters` are those of `compare`. `model` may
        be a model fingerprint (model_of)."""
        model, fingerprint = self.model_of(model)
        if fingerprint:
            filters["model_fingerprint"] = fingerprint
        asked = CompareFilters(model, **filters)
        try:
            return self._call(self._collector.Compare, asked.request(), f"comparing {model}",
                              reading=True)
        except RequestRefused as exc:
            if getattr(exc, "status_code", "") != "FAILED_PRECONDITION" or asked.allow_mixed:
                raise
            # Refused as unlike: the differences as data (CompareResponse.mixed), which
            # the same comparison answers when allowed to mix them.
            exc.mixed = self._mixed(asked)  # type: ignore[attr-defined]
            raise

    def _mixed(self, asked: CompareFilters) -> tuple[collector_pb2.MixedDimension, ...]:
        """The dimensions in which the runs `asked` covers differ (none when that cannot
        be read: the refusal's words still name them)."""
        asked.allow_mixed = True
        try:
            response = self._call(self._collector.Compare, asked.request(),
                                  f"comparing {asked.model}", reading=True)
        except GpubenchError:
            return ()
        finally:
            asked.allow_mixed = False
        return tuple(response.mixed)

    def compare(
        self,
        model: str,
        *,
        baseline: str | None = None,
        baseline_count: int = 1,
        gpus: Sequence[str] = (),
        allow_mixed: bool = False,
        include_outliers: bool = False,
        include_flagged: bool = False,
        backend: str | None = None,
        precision: str | None = None,
        math_mode: str | None = None,
        image_size: int | None = None,
        train_images: int | None = None,
        settings: str | None = None,
        batch_rule: str | None = None,
        pipeline: str | None = None,
        weights: str | None = None,
        data: str | None = None,
        epochs: int | None = None,
        benchmark_version: str | None = None,
        unit: str | None = None,
        model_fingerprint: str | None = None,
    ) -> pd.DataFrame:
        """Compare GPU configurations on one model: one row per GPU configuration,
        fastest first. `model` is a model's name ("B0") or the first 8 or more hex
        digits of a model fingerprint.

        `baseline` names the GPU whose `baseline_count`-GPU configuration is the 1.0x
        reference (default: the slowest). `gpus` keeps only those GPU names. Runs that
        differ in precision, backend, image size, training images per epoch
        (`train_images`: a smoke run's subset against the full data set), settings (how
        the network was computed and fed: "keras" for Keras's own code path, "kernels"
        for the torch backend's own kernels, "kernels+data-on-device", ...), batch rule
        (`batch_rule`: how the batch was chosen, "steps", "largest", "given" or "quick"),
        pipeline as it ran ("cached", "cached-on-device", "streaming", "seed"), weights,
        data ("synthetic-rps", or "sha256:..." of a folder's files), epochs or
        benchmark version are refused unless `allow_mixed`; each of those arguments pins
        one value. Outlier runs are left out unless `include_outliers`, runs flagged as
        implausible unless `include_flagged`. A refusal to compare unlike runs is a
        RequestRefused whose `mixed` holds the differences as data (each a
        MixedDimension: its dimension, values and flag).

        Columns: see `gpubench.frames.compare_frame` (and docs/data-dictionary.md);
        `df.attrs` holds only JSON-ready values, so `to_parquet` keeps them: "model",
        "baseline", "warnings", what the runs share, the published runs of the model
        ("published": one dict each, as `gpubench.frames.published_frame` has them) and
        the groups of cards not yet in the collector's GPU catalogue, shown apart
        ("uncatalogued": one dict each, `gpubench.frames.uncatalogued_of` makes them a
        frame). `compare_response` returns the collector's message itself.

        Example: ``client.compare("B0", baseline="Tesla T4", precision="float32")``.
        """
        # Every argument but the model is a filter of CompareFilters, the one place
        # that checks the pins against gpubench.comparison_key (a test keeps the two lists
        # of names equal).
        filters = {name: value for name, value in locals().items()
                   if name not in ("self", "model")}
        return frames.compare_frame(self.compare_response(model, **filters))

    def leaderboard_response(
        self,
        model: str,
        precision: str | None = None,
        limit: int = 20,
        *,
        backend: str | None = None,
        settings: str | None = None,
        batch_rule: str | None = None,
        benchmark_version: str | None = None,
        include_flagged: bool = False,
        corroborated_only: bool = False,
    ) -> collector_pb2.LeaderboardResponse:
        """The collector's raw leaderboard; see `leaderboard`."""
        request = collector_pb2.LeaderboardRequest(
            model=model, precision=precision or "", limit=max(limit, 0), backend=backend or "",
            settings=settings or "", batch_rule=batch_rule or "",
            benchmark_version=benchmark_version or "", include_flagged=include_flagged,
            corroborated_only=corroborated_only,
        )
        return self._call(self._collector.Leaderboard, request, f"the {model} leaderboard",
                          reading=True)

    def leaderboard(
        self,
        model: str,
        precision: str | None = None,
        limit: int = 20,
        **filters: Any,
    ) -> pd.DataFrame:
        """The GPU configurations of `model` ranked by the median epoch-2 time of their
        runs, fastest first (the best single run beside it). One settings label and one
        batch rule at a time: `settings` (default: the default run's,
        "kernels+cuda-graphs") and `batch_rule` (default "steps"); `backend`,
        `benchmark_version` (default: the newest, in numeric order) and `include_flagged`
        as in `compare`. One submitter, one voice: each entry's medians are the median of
        its submitters' medians; `submitters` says how many stand behind it ("one
        source": 1), `corroborated` whether a reference run or several submitters agree
        with it, and `corroborated_only=True` keeps only those. The entries of cards not
        yet in the collector's GPU catalogue follow the ranked ones, `in_catalogue`
        false and rank 0."""
        return frames.leaderboard_frame(
            self.leaderboard_response(model, precision, limit, **filters))

    # -- answers: estimate and fit --------------------------------------------------

    def usable_runs(self, model: str, gpu: str | None = None,
                    include_outliers: bool = False) -> Any:
        """The usable runs of `model` on the GPU `gpu` names in full, any case
        (gpubench.answers.read_runs); a `gpu` that names no GPU with runs of the model is
        NotFound, naming the closest and the GPUs that have runs."""
        from gpubench import answers  # it imports this module

        runs = answers.read_runs(self, model, gpu, include_outliers=include_outliers)
        if gpu and not (runs.measured or runs.published or runs.outliers):
            raise answers.no_such_gpu(self, model, gpu)
        return runs

    def estimate_document(self, model: str, *, epochs: int,
                          images: int = record.STANDARD_TRAIN_IMAGES, gpu: str | None = None,
                          include_outliers: bool = False) -> dict[str, Any]:
        """`estimate`'s answer as one JSON-ready document, its sentences included (what
        `gpubench estimate --format json` prints and the results site serves)."""
        from gpubench import answers

        if epochs < 1 or images < 1:
            raise GpubenchError(f"epochs and images: each at least 1, got {epochs} and "
                                f"{images}", exit_code=ExitCode.USAGE)
        runs = self.usable_runs(model, gpu, include_outliers)
        return answers.estimate_document(runs, model, epochs, images, gpu)

    def estimate(self, model: str, *, epochs: int, images: int = record.STANDARD_TRAIN_IMAGES,
                 gpu: str | None = None, include_outliers: bool = False) -> pd.DataFrame:
        """How long training `epochs` epochs of `images` training images takes on each GPU
        configuration, scaled from the stored runs' epoch times (gpubench.estimate says
        how): one row per group of like runs, with the range over its runs.

        `gpu` keeps the GPU of that name ("Tesla T4", any case); `images` defaults to the
        benchmark's training set. Outlier runs are left out unless `include_outliers`.
        Columns: `published` (False: measured by gpubench; True: transcribed from the
        article), `gpu_config`, the comparison key's values, `runs`, `seconds_min`,
        `seconds_median`, `seconds_max` and the sentences `answer`, `basis`, `settings`.
        `df.attrs` holds the "question", what it "assumes" and the sentence for "none".

        Example: ``client.estimate("B0", epochs=400, gpu="NVIDIA H200")``.
        """
        document = self.estimate_document(model, epochs=epochs, images=images, gpu=gpu,
                                          include_outliers=include_outliers)
        rows = [{"published": published, **group["setup"],
                 **{name: group[name] for name in _ESTIMATE_COLUMNS}}
                for published in (False, True)
                for group in document["published" if published else "measured"]]
        frame = pd.DataFrame(rows, columns=_columns(rows, ("published", "gpu_config"),
                                                    _ESTIMATE_COLUMNS))
        frame.attrs.update({name: document[name] for name in
                            ("model", "gpu", "epochs", "images", "question", "none",
                             "assumes")})
        return frame

    def fit_document(self, model: str, *, memory: str | int | None = None,
                     card: str | None = None, gpu: str | None = None,
                     include_outliers: bool = False) -> dict[str, Any]:
        """`fit`'s answer as one JSON-ready document, its sentences included (what
        `gpubench fit --format json` prints and the results site serves)."""
        from gpubench import answers

        if (memory is None) == (card is None):
            raise GpubenchError("give the card's memory (memory=\"16GiB\") or its name "
                                '(card="Tesla T4"), one of them', exit_code=ExitCode.USAGE)
        if card is not None:
            memory_bytes = answers.card_memory(self, card)
        elif isinstance(memory, int):
            memory_bytes = memory
        else:
            try:
                memory_bytes = sizes.card_memory(str(memory))
            except ValueError as exc:
                raise GpubenchError(f"memory: {exc}", exit_code=ExitCode.USAGE) from None
        runs = self.usable_runs(model, gpu, include_outliers)
        return answers.fit_document(runs, model, memory_bytes, card or "")

    def fit(self, model: str, *, memory: str | int | None = None, card: str | None = None,
            gpu: str | None = None, include_outliers: bool = False) -> pd.DataFrame:
        """Whether a card of `memory` ("16GiB", "24GB" or bytes), or the card named
        `card` ("Tesla T4": its memory as the stored runs recorded it), trains `model`,
        and at about what batch (gpubench.fit says how). Give one of the two.

        One row per way of computing the network (`label`), measured runs first, then
        published figures (`published` True): the `verdict`, the `batch` (0: none
        fits), the `basis` (searched, line or bound), the `confidence` (high, fair,
        rough or floor), how sure in a sentence (`how_sure`), how many runs it rests on
        (`runs`) and `left_aside`. `gpu` keeps runs on the GPU of that name.
        `df.attrs` holds the "question", "memory_bytes" and the sentence for "none".

        Example: ``client.fit("B7", memory="16GiB")``.
        """
        document = self.fit_document(model, memory=memory, card=card, gpu=gpu,
                                     include_outliers=include_outliers)
        rows = [{"published": published, "label": label,
                 **{name: answer[name] for name in _FIT_COLUMNS}, "runs": len(answer["runs"])}
                for published in (False, True)
                for label, answer in document["published" if published else "measured"].items()]
        frame = pd.DataFrame(rows, columns=["published", "label", *_FIT_COLUMNS, "runs"])
        frame.attrs.update({name: document[name] for name in
                            ("model", "memory_bytes", "memory", "card", "question", "none")})
        return frame

    # -- tokens (admin) -------------------------------------------------------------

    def create_token(self, name: str, admin: bool = False) -> collector_pb2.CreateTokenResponse:
        """Create an access token; the response's `secret` is shown this once only."""
        request = collector_pb2.CreateTokenRequest(name=name, admin=admin)
        return self._call(self._admin.CreateToken, request, f"creating token {name!r}")

    def list_tokens(self) -> list[collector_pb2.Token]:
        """Every token the collector knows (names and state, never secrets)."""
        response = self._call(
            self._admin.ListTokens, collector_pb2.ListTokensRequest(), "listing tokens"
        )
        return list(response.tokens)

    def backup(self, folder: str, timeout: float) -> collector_pb2.BackupResponse:
        """Have the collector back its database up into `folder` (absolute, on its
        machine: only its local credential may ask), within `timeout` seconds."""
        return self._call(self._admin.Backup, collector_pb2.BackupRequest(folder=folder),
                          f"backing up into {folder}", timeout=timeout)

    def revoke_token(self, name: str) -> collector_pb2.Token:
        """Revoke a token by name; it is refused from then on."""
        request = collector_pb2.RevokeTokenRequest(name=name)
        response = self._call(
            self._admin.RevokeToken, request, f"revoking token {name!r}", f"token {name!r}"
        )
        return response.token


# The columns of Client.estimate's and Client.fit's frames, after the key's values.
_ESTIMATE_COLUMNS = ("runs", "seconds_min", "seconds_median", "seconds_max", "answer",
                     "basis", "settings")
_FIT_COLUMNS = ("verdict", "batch", "basis", "confidence", "how_sure", "left_aside")


def _columns(rows: list[dict[str, Any]], first: tuple[str, ...],
             last: tuple[str, ...]) -> list[str]:
    """`first`, the comparison key's names, then `last`: an empty frame has them too."""
    middle = [name for name in comparison_key.NAMES if not rows or name in rows[0]]
    return [*first, *middle, *last]
