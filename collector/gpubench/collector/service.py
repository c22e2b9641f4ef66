"""The gRPC servicers: thin translations between the wire messages and the store.

Authentication happened before these run (collector.auth); a servicer reads the
caller from `auth.current_caller`. User-facing errors raised below become gRPC
status codes with their message, in one place (`_translating_errors`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

import grpc

from gpubench import comparison_key, models, record
from gpubench.collector import backup, compare, validation, wire
from gpubench.collector.aggregates import CompareQuery, LeaderboardQuery
from gpubench.collector.auth import LOCAL_ADMIN, Caller, TokenBook, current_caller
from gpubench.collector.queries import RunFilter
from gpubench.collector.rows import ack_message
from gpubench.collector.stats import stats_message
from gpubench.collector.statuses import answer_of
from gpubench.collector.store import Store
from gpubench.collector.tokens import TokenRow
from gpubench.errors import AccessDenied, InvalidRecord
from gpubench.v1 import collector_pb2, collector_pb2_grpc
from gpubench.versions import SCHEMA_VERSION, VERSION

DEFAULT_PAGE_SIZE = 50
MAX_PAGE_SIZE = 1000
DEFAULT_LEADERBOARD = 20
# The most bytes of runs a ListRuns page carries: half of gRPC's default 4 MiB receive
# limit, so a client of any language reads full pages with its defaults, and eight runs
# of the largest size a run may have (collector.wire.MAX_RUN_BYTES). A page ends early
# (with a next_page_token) when the next run would pass it.
PAGE_BYTES = 8 * wire.MAX_RUN_BYTES

Handler = TypeVar("Handler", bound=Callable[..., Any])


def _translating_errors(method: Handler) -> Handler:
    """Answer the collector's user-facing errors with their gRPC status codes, and
    anything else (a bug) with INTERNAL, logged with its traceback (collector.statuses).

    The servicer methods raise rather than call `context.abort`: an abort inside
    this wrapper would be caught here and answered again.
    """

    @functools.wraps(method)
    def wrapper(self: Any, request: Any, context: grpc.ServicerContext) -> Any:
        try:
            return method(self, request, context)
        except Exception as exc:
            status = answer_of(exc, method.__name__)
        context.abort(*status)

    return wrapper  # type: ignore[return-value]


def _caller() -> Caller:
    caller = current_caller.get()
    if caller is None:  # the interceptor guarantees one for writes; this is a wiring bug
        raise AccessDenied("no caller identified")
    return caller


def _optional_time(message: Any, field: str) -> datetime | None:
    """The time in `field` of `message` (None when unset); InvalidRecord naming the field
    when it is no time (seconds outside years 1-9999, nanos outside 0-999,999,999)."""
    if not message.HasField(field):
        return None
    try:
        return getattr(message, field).ToDatetime()
    except (ValueError, OverflowError) as exc:
        raise InvalidRecord(field, f"not a valid time ({exc})") from None


def _check_model(model: str) -> None:
    """A model a run may be of: a standard workload, or another model's recorded name
    (gpubench.models)."""
    if not model:
        raise InvalidRecord("model", f"missing (one of {', '.join(models.STANDARD_MODELS)}, "
                                     "or a model's name)")
    if not (models.is_standard(model) or models.is_record_name(model)):
        raise InvalidRecord("model", f"unknown {model[:64]!r} (one of "
                                     f"{', '.join(models.STANDARD_MODELS)}, or a model's name)")


def _check_pins(message: Any, names: tuple[str, ...]) -> None:
    """Refuse a pin of `message` (a field per dimension of the comparison key, of
    `names`) that no run can have, naming the field and the values it takes."""
    for name in names:
        dimension = comparison_key.BY_NAME[name]
        value = getattr(message, name)
        if dimension.choices and value and value not in dimension.choices:
            words = dimension.choices_words or f"one of {', '.join(dimension.choices)}"
            raise InvalidRecord(name, f"unknown {value[:64]!r} ({words})")


def _check_limit(field: str, value: int, default: int, most: int) -> int:
    if value > most:
        raise InvalidRecord(field, f"must be <= {most}, got {value}")
    return value or default


class CollectorService(collector_pb2_grpc.CollectorServicer):
    """Runs: submit, read, list, delete, compare, leaderboard; and an agent's preflight."""

    def __init__(self, store: Store) -> None:
        self._store = store

    @_translating_errors
    def SubmitRun(self, request, context):  # noqa: N802 - gRPC's method names
        caller = _caller()
        # Published runs (transcribed, not measured) only from the collector's operators.
        try:
            validation.validate(request.run, may_publish=caller.admin)
        except Exception as exc:  # the store counts the outcomes of what it is given
            self._store.submissions.refuse(exc)
            raise
        return ack_message(self._store.submit(request.run, caller.name))

    @_translating_errors
    def CheckAccess(self, request, context):  # noqa: N802
        # The gate let the call through only with a valid token (collector.auth), and
        # every valid token may submit runs.
        caller = _caller()
        return collector_pb2.CheckAccessResponse(
            token_name=caller.name, may_submit=True, admin=caller.admin,
            collector_version=VERSION, schema_version=SCHEMA_VERSION,
        )

    @_translating_errors
    def Stats(self, request, context):  # noqa: N802
        return stats_message(self._store)

    @_translating_errors
    def GetRun(self, request, context):  # noqa: N802
        return self._store.runs.get(request.run_id)

    @_translating_errors
    def ListRuns(self, request, context):  # noqa: N802
        page_size = _check_limit("page_size", request.page_size, DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE)
        where = RunFilter(
            gpu_name=request.gpu_name,
            model=request.model,
            backend=request.backend,
            precision=request.precision,
            gpu_count=request.gpu_count,
            submitter=request.submitter,
            since=_optional_time(request, "since"),
            until=_optional_time(request, "until"),
        )
        runs, token = self._store.runs.list(where, page_size=page_size,
                                            page_token=request.page_token, page_bytes=PAGE_BYTES)
        return collector_pb2.ListRunsResponse(runs=runs, next_page_token=token)

    @_translating_errors
    def DeleteRun(self, request, context):  # noqa: N802
        caller = _caller()
        submitter = self._store.runs.submitter_of(request.run_id)
        if submitter != caller.name and not caller.admin:
            raise AccessDenied(
                f"run_id {request.run_id}: submitted by {submitter!r}; only its submitter "
                f"or an admin may delete it (token {caller.name!r})"
            )
        self._store.delete(request.run_id)
        return collector_pb2.DeleteRunResponse(run_id=request.run_id)

    @_translating_errors
    def Compare(self, request, context):  # noqa: N802
        _check_model(request.model)
        _check_pins(request, comparison_key.NAMES)
        query = CompareQuery(
            request.model,
            **comparison_key.pins_of(request),
            gpu_names=tuple(request.gpu_names),
            include_outliers=request.include_outliers,
            include_flagged=request.include_flagged,
            allow_mixed=request.allow_mixed,
        )
        result = compare.compare(
            request.model,
            self._store.aggregates.compare_groups(query),
            baseline_gpu=request.baseline_gpu,
            baseline_gpu_count=request.baseline_gpu_count,
            allow_mixed=request.allow_mixed,
            published=self._store.aggregates.published_groups(request.model,
                                                              tuple(request.gpu_names)),
        )
        return _comparison_message(result)

    @_translating_errors
    def Leaderboard(self, request, context):  # noqa: N802
        _check_model(request.model)
        _check_pins(request, _LEADERBOARD_PINS)
        limit = _check_limit("limit", request.limit, DEFAULT_LEADERBOARD, MAX_PAGE_SIZE)
        query = LeaderboardQuery(
            model=request.model, precision=request.precision, backend=request.backend,
            settings=request.settings or record.default_settings(request.model),
            batch_rule=request.batch_rule or record.DEFAULT_BATCH_RULE,
            benchmark_version=request.benchmark_version,
            include_flagged=request.include_flagged,
            corroborated_only=request.corroborated_only, limit=limit,
        )
        rows, version = self._store.aggregates.leaderboard(query)
        response = collector_pb2.LeaderboardResponse(model=request.model)
        # What every entry shares: the dimensions ranked one value at a time.
        for name in comparison_key.RANKED_DIMENSIONS:
            setattr(response, name, version if name == "benchmark_version"
                    else getattr(query, name))
        ranked = [r for r in rows if not r.uncatalogued]
        apart = [r for r in rows if r.uncatalogued]
        for rank, r in [*enumerate(ranked, start=1), *((0, r) for r in apart)]:
            entry = (response.uncatalogued if r.uncatalogued else response.entries).add(
                rank=rank,
                gpu_name=r.gpu_name,
                gpu_count=r.gpu_count,
                runs=r.runs,
                best_epoch2_seconds=r.best_epoch2_seconds,
                epoch2_median_seconds=r.epoch2_median_seconds,
                train_images_per_second_median=r.train_images_per_second_median or 0.0,
                max_batch_per_gpu=r.max_batch_per_gpu,
                largest_batch_per_gpu_max=r.largest_batch_per_gpu_max,
                submitters=r.corroboration.submitters,
                corroborated=r.corroboration.corroborated,
                corroborated_by=r.corroboration.by,
            )
            for name, value in r.key.items():
                if name in _ENTRY_FIELDS:
                    setattr(entry, name, value)
        return response


# The pins a LeaderboardRequest has (the dimensions with a `gpubench leaderboard`
# flag), and the dimensions a LeaderboardEntry carries.
_LEADERBOARD_PINS = tuple(d.name for d in comparison_key.DIMENSIONS if d.leaderboard_help)
_ENTRY_FIELDS = frozenset(collector_pb2.LeaderboardEntry.DESCRIPTOR.fields_by_name)


def _group_message(f: compare.GroupFigures) -> collector_pb2.CompareGroup:
    return collector_pb2.CompareGroup(
        gpu_name=f.gpu_name,
        gpu_count=f.gpu_count,
        runs=f.runs,
        epoch2_median_seconds=f.epoch2_median_seconds,
        epoch2_min_seconds=f.epoch2_min_seconds,
        epoch2_max_seconds=f.epoch2_max_seconds,
        train_images_per_second_median=f.train_images_per_second_median or 0.0,
        max_batch_per_gpu=f.max_batch_per_gpu,
        max_global_batch=f.max_global_batch,
        peak_memory_median_bytes=round(f.peak_memory_median_bytes or 0),
        peak_memory_share=compare.memory_share(f) or 0.0,
        energy_per_epoch_median_joules=f.energy_per_epoch_median_joules or 0.0,
        images_per_joule=f.images_per_joule_median or 0.0,
        outliers_excluded=f.outliers_excluded,
        memory_total_bytes=round(f.memory_total_bytes or 0),
        largest_batch_per_gpu_max=f.largest_batch_per_gpu_max,
        memory_limit_bytes=f.memory_limit_bytes,
        flagged_included=f.flagged_included,
        submitters=f.submitters,
        source=f.source,
    )


def _comparison_message(result: compare.Comparison) -> collector_pb2.CompareResponse:
    def group(g: compare.ComparedGroup | compare.PublishedGroup) -> collector_pb2.CompareGroup:
        message = _group_message(g.figures)
        if isinstance(g, compare.ComparedGroup):  # a published group is set against nothing
            message.speedup, message.is_baseline = g.speedup, g.is_baseline
        message.differences.extend(g.differences)
        return message

    groups = [group(g) for g in result.groups]
    published = [group(p) for p in result.published]
    uncatalogued = [group(g) for g in result.uncatalogued]
    response = collector_pb2.CompareResponse(
        model=result.model,
        baseline=result.baseline,
        groups=groups,
        warnings=list(result.warnings),
        published=published,
        uncatalogued=uncatalogued,
        mixed=[collector_pb2.MixedDimension(dimension=m.dimension, flag=m.flag,
                                            values=[str(v) for v in m.values])
               for m in result.mixed],
    )
    for name, value in result.shared.items():
        setattr(response, name, value)
    return response


def token_message(row: TokenRow) -> collector_pb2.Token:
    """A stored token as the wire's Token (never the secret or its hash)."""
    token = collector_pb2.Token(name=row.name, admin=row.admin, revoked=row.revoked)
    token.created_at.FromDatetime(row.created_at)
    if row.last_used_at is not None:
        token.last_used_at.FromDatetime(row.last_used_at)
    return token


class AdminService(collector_pb2_grpc.AdminServicer):
    """Token administration and backups on a live collector (admin tokens only; see
    collector.auth)."""

    def __init__(self, tokens: TokenBook, store: Store) -> None:
        self._tokens = tokens
        self._store = store

    @_translating_errors
    def CreateToken(self, request, context):  # noqa: N802
        row, secret = self._tokens.create(request.name, admin=request.admin)
        return collector_pb2.CreateTokenResponse(token=token_message(row), secret=secret)

    @_translating_errors
    def ListTokens(self, request, context):  # noqa: N802
        return collector_pb2.ListTokensResponse(
            tokens=[token_message(t) for t in self._tokens.list()]
        )

    @_translating_errors
    def RevokeToken(self, request, context):  # noqa: N802
        row = self._tokens.revoke(request.name)
        return collector_pb2.RevokeTokenResponse(token=token_message(row))

    @_translating_errors
    def Backup(self, request, context):  # noqa: N802
        # It writes into a folder of this machine: only its own operator, through the
        # local credential (gpubench-collector backup), not an admin token from afar.
        caller = _caller()
        if caller.name != LOCAL_ADMIN:
            raise AccessDenied(
                f"Backup writes on the collector's machine: only `gpubench-collector "
                f"backup` there (its local credential) may call it, not token {caller.name!r}"
            )
        self._tokens.flush()  # the last-used times noted so far, into the copy
        manifest = backup.take(self._store, Path(request.folder))
        return collector_pb2.BackupResponse(
            folder=request.folder, runs=manifest.runs, tokens=manifest.tokens,
        )
