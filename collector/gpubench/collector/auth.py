"""Who may call what: bearer tokens, the server interceptor, the submission rate limit.

A token is a random secret ("gpb_" + 43 URL-safe characters) handed out once; the
store keeps only its sha256. Calls carry it as `authorization: Bearer <secret>`
metadata. The interceptor decides per method:

- health checks and server reflection: open to all;
- reads (GetRun, ListRuns, Compare, Leaderboard): a valid token, unless the
  collector runs with public reads;
- writes (SubmitRun, DeleteRun): a valid token; SubmitRun is rate limited per token;
- Stats, what operators watch: a read;
- CheckAccess, an agent's preflight: the check a write goes through, so a valid token
  even with public reads, but no submission of the rate limit;
- the Admin service (tokens, backups): an admin token.

Missing, unknown or revoked tokens get UNAUTHENTICATED; a valid token that may
not do something gets PERMISSION_DENIED (DeleteRun's "submitter or admin" rule
is checked by the servicer, which knows the run). Past
DEFAULT_AUTH_FAILURES_PER_MINUTE failed authentications a minute from a client address,
its calls with wrong tokens (or none) are refused (RESOURCE_EXHAUSTED, with the wait)
until it has one again (AuthFailures). Behind a proxy the collector was told to trust,
the client address is the one the proxy forwards (collector.forwarded).
"""

from __future__ import annotations

import contextvars
import hashlib
import logging
import math
import re
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from enum import Enum
from typing import TYPE_CHECKING, Any

import grpc
from google.protobuf import message_factory

from gpubench.collector.errors import ShuttingDown
from gpubench.collector.forwarded import TrustedProxies
from gpubench.collector.rows import utc_now
from gpubench.collector.stats import SubmissionCounts
from gpubench.collector.statuses import answer_of
from gpubench.collector.tokens import TokenRow
from gpubench.collector.transport import Refusal, address_key, parse_request
from gpubench.errors import InvalidRecord
from gpubench.v1 import collector_pb2

if TYPE_CHECKING:  # the token book is given its store
    from gpubench.collector.store import Store

log = logging.getLogger(__name__)

TOKEN_PREFIX = "gpb_"
# Token names become run submitters: keep them printable and short.
TOKEN_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.@+-]{0,63}$")
# The name runs submitted with the serve process's own local credential carry.
LOCAL_ADMIN = "local-admin"
# How often a token's last_used_at is written back (not on every call).
LAST_USED_INTERVAL_S = 60.0
# Failed authentications a client address may have a minute (bursts of as many); past
# them its calls with unseen tokens are refused until it has one again (AuthFailures).
DEFAULT_AUTH_FAILURES_PER_MINUTE = 30.0
# Peer addresses whose failures are counted at once, at most (memory).
MAX_PEERS = 100_000


def new_secret() -> str:
    """A fresh token secret."""
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


def secret_hash(secret: str) -> str:
    """What the store keeps of a secret."""
    return hashlib.sha256(secret.encode()).hexdigest()


def check_token_name(name: str) -> None:
    """Raise InvalidRecord unless `name` is a usable token name."""
    if not TOKEN_NAME.match(name):
        raise InvalidRecord(
            "token name",
            f"{name[:80]!r} must be 1-64 characters: letters, digits and _ . @ + - "
            "(starting with a letter or digit)",
        )
    if name == LOCAL_ADMIN:
        raise InvalidRecord("token name", f"{name!r} is reserved for the collector itself")


@dataclass(frozen=True)
class Caller:
    """The identity behind a call."""

    name: str
    admin: bool


# The caller of the RPC being handled (set by the interceptor, read by the servicers).
current_caller: contextvars.ContextVar[Caller | None] = contextvars.ContextVar(
    "current_caller", default=None
)


class Access(Enum):
    """What a method needs."""

    OPEN = "open"
    READ = "read"
    WRITE = "write"
    SUBMIT = "submit"  # a write that is rate limited
    ADMIN = "admin"


METHODS: dict[str, Access] = {
    "/gpubench.v1.Collector/SubmitRun": Access.SUBMIT,
    "/gpubench.v1.Collector/DeleteRun": Access.WRITE,
    "/gpubench.v1.Collector/GetRun": Access.READ,
    "/gpubench.v1.Collector/ListRuns": Access.READ,
    "/gpubench.v1.Collector/Compare": Access.READ,
    "/gpubench.v1.Collector/Leaderboard": Access.READ,
    "/gpubench.v1.Collector/CheckAccess": Access.WRITE,
    "/gpubench.v1.Collector/Stats": Access.READ,
    "/gpubench.v1.Admin/CreateToken": Access.ADMIN,
    "/gpubench.v1.Admin/ListTokens": Access.ADMIN,
    "/gpubench.v1.Admin/RevokeToken": Access.ADMIN,
    "/gpubench.v1.Admin/Backup": Access.ADMIN,  # and only the local credential (service)
}
OPEN_SERVICES = ("/grpc.health.v1.Health/", "/grpc.reflection.")


def request_class_of(method: str) -> type:
    """The request message class of a Collector or Admin method (its full gRPC path)."""
    service, _, name = method.lstrip("/").rpartition("/")
    descriptor = collector_pb2.DESCRIPTOR.services_by_name[service.rpartition(".")[2]]
    return message_factory.GetMessageClass(descriptor.methods_by_name[name].input_type)


def access_of(method: str) -> Access:
    """What `method` (a full gRPC method path) needs; unknown methods need an admin."""
    if method.startswith(OPEN_SERVICES):
        return Access.OPEN
    return METHODS.get(method, Access.ADMIN)


class TokenBook:
    """Token administration and lookup, with a cache in front of the store.

    Every token change while the collector runs goes through this object (the
    Admin service), so the cache never serves a revoked token. A lookup racing a
    change must not write the row it read before the change into the cache after the
    change cleared it: each change bumps a generation, and a lookup caches its row only
    if the generation is still the one it saw before reading the store.
    """

    def __init__(self, store: Store, *, local_admin_secret: str | None = None) -> None:
        self._store = store
        self._lock = threading.Lock()
        self._by_hash: dict[str, TokenRow] = {}
        self._generation = 0  # bumped by every token change, after the store has it
        self._used: dict[str, datetime] = {}
        self._flushed_at = time.monotonic()
        self._local_hash = secret_hash(local_admin_secret) if local_admin_secret else None
        # The valid tokens' hashes and the generation they were read at (`known`).
        self._valid: tuple[int, frozenset[str]] | None = None

    def create(self, name: str, *, admin: bool) -> tuple[TokenRow, str]:
        """A new token and its secret (shown once)."""
        check_token_name(name)
        secret = new_secret()
        row = self._store.tokens.create(name, secret_hash(secret), admin)
        # A replaced (revoked) token of the same name must not linger; the valid tokens'
        # hashes are read again.
        self._forget(name)
        return row, secret

    def list(self) -> list[TokenRow]:
        """Every token."""
        self.flush()
        return self._store.tokens.all()

    def revoke(self, name: str) -> TokenRow:
        """Revoke a token by name (NotFound if absent)."""
        row = self._store.tokens.revoke(name)
        self._forget(name)
        return row

    def _forget(self, name: str) -> None:
        """Drop `name` from the cache once the store has its change; lookups that read
        the store before now do not cache what they read."""
        with self._lock:
            self._generation += 1
            self._by_hash = {h: t for h, t in self._by_hash.items() if t.name != name}

    def known(self, secret: str) -> bool:
        """Whether `secret` is a valid token (or the local credential): such calls need
        no failure budget. Answered from the valid tokens' hashes held in memory (a few
        hundred at most), read from the store again only after a token change, so a
        guess costs no store read."""
        if self.is_local(secret):
            return True
        digest = secret_hash(secret)
        with self._lock:
            valid, generation = self._valid, self._generation
        if valid is None or valid[0] != generation:
            hashes = frozenset(t.secret_sha256 for t in self._store.tokens.all() if not t.revoked)
            valid = (generation, hashes)
            with self._lock:
                if self._generation == generation:  # no change since the read
                    self._valid = valid
        return digest in valid[1]

    def is_local(self, secret: str) -> bool:
        """Whether `secret` is the serve process's own local admin credential."""
        return self._local_hash is not None and secrets.compare_digest(
            secret_hash(secret), self._local_hash
        )

    def identify(self, secret: str) -> Caller | None:
        """The caller a secret belongs to; None for unknown or revoked secrets."""
        digest = secret_hash(secret)
        if self._local_hash is not None and secrets.compare_digest(digest, self._local_hash):
            return Caller(LOCAL_ADMIN, True)
        with self._lock:
            row = self._by_hash.get(digest)
            generation = self._generation
        if row is None:
            row = self._store.tokens.by_secret_hash(digest)
            if row is None:
                return None
            with self._lock:
                # A change since the read (a revoke) has cleared the cache: the row
                # read may predate it and must not be cached over it. This call still
                # gets the row, like any call that began before the revoke returned.
                if self._generation == generation:
                    self._by_hash[digest] = row
        if row.revoked:
            return None
        self._note_use(row.name)
        return Caller(row.name, row.admin)

    def _note_use(self, name: str) -> None:
        with self._lock:
            self._used[name] = utc_now()
            due = time.monotonic() - self._flushed_at >= LAST_USED_INTERVAL_S
        if due:
            self.flush()

    def flush(self) -> None:
        """Write the last-used times noted since the previous flush."""
        with self._lock:
            used, self._used = self._used, {}
            self._flushed_at = time.monotonic()
        try:
            self._store.tokens.record_use(used)
        except ShuttingDown:  # closed before the server stopped: only these times are lost
            log.warning("last-used times of %d token(s) not written: the store is closed",
                        len(used))


class RateLimiter:
    """A token bucket per caller: `rate` submissions per second, bursts up to `burst`."""

    def __init__(self, rate: float, burst: float | None = None) -> None:
        self.rate = rate
        self.burst = burst if burst is not None else max(rate, 1.0)
        self._lock = threading.Lock()
        self._buckets: dict[str, tuple[float, float]] = {}  # name -> (tokens, at)

    def allow(self, name: str) -> bool:
        """Take one submission from `name`'s bucket; False when it is empty."""
        if self.rate <= 0:
            return True
        now = time.monotonic()
        with self._lock:
            tokens, at = self._buckets.get(name, (self.burst, now))
            tokens = min(self.burst, tokens + (now - at) * self.rate)
            if tokens < 1.0:
                self._buckets[name] = (tokens, now)
                return False
            self._buckets[name] = (tokens - 1.0, now)
            return True


class AuthFailures:
    """Failed authentications per client address: a budget a minute that holds however
    many calls an address has in flight.

    A token has 256 random bits: no guesser finds one by trying. What guessing can do
    is cost the collector work and, if the limit shut the address out, cost everyone
    behind that address (a NAT, a proxy, the results site) their valid calls. Each
    address has `per_minute` failures a minute (bursts of as many). A call whose token
    is not valid (TokenBook.known, from memory) takes one failure from its address's
    budget before the token is checked (`admit`), given back should it pass after all
    (`forgive`: a token made since): the budget is spent at the moment each call is
    decided, so calls in flight together cannot all spend its last failure. With the
    budget spent, such calls are refused at once with the wait until the address has
    one again: no server thread is held, and other addresses' budgets and calls are
    untouched. Valid tokens and public reads never need the budget.

    Peers are keyed by IP address (an IPv6 address by its /64, which one host usually
    holds whole), so that new connections do not start afresh.
    """

    def __init__(self, per_minute: float) -> None:
        self.per_minute = per_minute
        self._rate = per_minute / 60.0
        self._lock = threading.Lock()
        self._buckets: dict[str, tuple[float, float]] = {}  # peer -> (failures left, at)
        self.refused = 0  # calls refused with the budget spent

    def admit(self, peer: str) -> float:
        """Take one failure from `peer`'s budget for a call whose token is about to be
        checked: 0.0 when taken, else the wait (s) until the budget has one again (the
        call is to be refused)."""
        now = time.monotonic()
        with self._lock:
            if len(self._buckets) >= MAX_PEERS:
                self._forget_full(now)
            left = self._left(peer, now)
            if left < 1.0:
                self._buckets[peer] = (left, now)
                self.refused += 1
                return (1.0 - left) / self._rate
            self._buckets[peer] = (left - 1.0, now)
            return 0.0

    def forgive(self, peer: str) -> None:
        """Give back the failure `admit` took: the token was valid after all."""
        now = time.monotonic()
        with self._lock:
            left = self._left(peer, now)
            self._buckets[peer] = (min(self.per_minute, left + 1.0), now)

    def _left(self, peer: str, now: float) -> float:
        left, at = self._buckets.get(peer, (self.per_minute, now))
        return min(self.per_minute, left + (now - at) * self._rate)

    def _forget_full(self, now: float) -> None:
        """Drop the peers whose budget is whole again; if too many are left (a flood from
        many addresses), drop them all and say so."""
        self._buckets = {p: b for p, b in self._buckets.items()
                         if self._left(p, now) < self.per_minute}
        if len(self._buckets) >= MAX_PEERS:
            log.warning("failed authentications from more than %d addresses at once; "
                        "their counts start again", MAX_PEERS)
            self._buckets = {}


def peer_key(peer: str | None) -> str:
    """The key of a gRPC peer ("ipv4:1.2.3.4:567", "ipv6:[::1]:567", "unix:...") that
    failed authentications are counted by: its IP address, an IPv6 one by its /64
    (collector.transport.address_key)."""
    if not peer:
        return "unknown"
    kind, _, rest = peer.partition(":")
    if kind in ("ipv4", "ipv6"):
        return address_key(rest.rpartition(":")[0])
    return kind


def bearer_secret(metadata: Any) -> str | None:
    """The secret of an `authorization: Bearer ...` entry; None when there is none.

    Returns "" for an authorization entry that is not a bearer token.
    """
    for key, value in metadata or ():
        if key == "authorization":
            scheme, _, secret = str(value).partition(" ")
            return secret.strip() if scheme.lower() == "bearer" else ""
    return None


class Gate:
    """Whether a call may go ahead: its token, admin rights and the submission rate limit."""

    def __init__(
        self, tokens: TokenBook, *, public_read: bool = False, limiter: RateLimiter | None = None,
        failures: AuthFailures | None = None, counts: SubmissionCounts | None = None,
        proxies: TrustedProxies | None = None,
    ) -> None:
        self.tokens = tokens
        self._public_read = public_read
        self._limiter = limiter
        self._failures = failures
        self._counts = counts  # submissions refused here are counted (collector.stats)
        self._proxies = proxies or TrustedProxies(())  # whose x-forwarded-for is believed

    def check(self, access: Access, secret: str | None, peer: str | None = None) -> Caller | None:
        """The caller for a call needing `access`; raises Refusal when it may not proceed.

        `secret` is what `bearer_secret` found (None: no authorization entry); `peer`
        the call's gRPC peer, whose failed authentications are limited. Returns None
        only for a tokenless read on a public-read collector.
        """
        try:
            return self._check_peer(access, secret, peer)
        except Refusal as refused:
            if access is Access.SUBMIT and self._counts is not None:
                self._counts.refuse(refused)
            raise

    def _check_peer(self, access: Access, secret: str | None, peer: str | None) -> Caller | None:
        failures = self._failures
        public = secret is None and access is Access.READ and self._public_read
        if failures is None or public or (secret and self.tokens.known(secret)):
            return self._check(access, secret)
        key = peer_key(peer)
        wait = failures.admit(key)
        if wait > 0:
            raise Refusal(
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                f"too many failed authentications from {key} "
                f"({failures.per_minute:g} a minute): retry in {math.ceil(wait)} s",
            )
        try:
            caller = self._check(access, secret)
        except Refusal as refused:
            if refused.code != grpc.StatusCode.UNAUTHENTICATED:
                failures.forgive(key)  # the token was valid: refused for another reason
            raise
        failures.forgive(key)
        return caller

    def _check(self, access: Access, secret: str | None) -> Caller | None:
        if secret is None:
            if access is Access.READ and self._public_read:
                return None
            raise Refusal(
                grpc.StatusCode.UNAUTHENTICATED,
                "no token: send 'authorization: Bearer <token>' "
                "(gpubench --token or GPUBENCH_TOKEN)",
            )
        caller = self.tokens.identify(secret) if secret else None
        if caller is None:
            raise Refusal(grpc.StatusCode.UNAUTHENTICATED, "token unknown or revoked")
        if access is Access.ADMIN and not caller.admin:
            raise Refusal(
                grpc.StatusCode.PERMISSION_DENIED, f"token {caller.name!r} is not an admin token"
            )
        # The operator's own local credential (imports through a live collector) is not limited.
        if (access is Access.SUBMIT and self._limiter and caller.name != LOCAL_ADMIN
                and not self._limiter.allow(caller.name)):
            raise Refusal(
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                f"token {caller.name!r}: over the submission rate limit "
                f"({self._limiter.rate:g}/s); retry later",
            )
        return caller

    def guarded(
        self, behavior: Callable[[Any, grpc.ServicerContext], Any], access: Access,
        request_class: type,
    ) -> Callable[[bytes, grpc.ServicerContext], Any]:
        """`behavior` (a servicer method) taking its request as bytes, with the token
        check in front and only then the request parsed (a `request_class`); the caller
        set for it in `current_caller`. A refusal becomes `context.abort`; failed
        authentications are counted by the call's peer as gRPC saw it."""

        def checked(data: bytes, context: grpc.ServicerContext) -> Any:
            metadata = context.invocation_metadata()
            secret = bearer_secret(metadata)
            try:
                peer = self._proxies.client_peer(context.peer(), metadata)
                caller = self.check(access, secret, peer)
                request = parse_request(request_class, data)
            except Exception as exc:  # a refusal, the store closing, or a bug (INTERNAL)
                context.abort(*answer_of(exc, "checking a token"))
            reset = current_caller.set(caller)
            try:
                return behavior(request, context)
            finally:
                current_caller.reset(reset)

        return checked


class AuthInterceptor(grpc.ServerInterceptor):
    """Checks every call's token against what its method needs, before its request is
    parsed and the servicer runs.

    The interceptor sees a call's metadata before gRPC reads its request: it swaps
    the method's handler for one that takes the request as bytes and parses it only
    after the token check (`Gate.guarded`).
    """

    def __init__(self, gate: Gate) -> None:
        self._gate = gate
        self._checked: dict[str, grpc.RpcMethodHandler] = {}  # method -> wrapped handler

    def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], grpc.RpcMethodHandler | None],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler | None:
        method = handler_call_details.method
        checked = self._checked.get(method)
        if checked is None:
            handler = continuation(handler_call_details)
            access = access_of(method)
            if handler is None or access is Access.OPEN or handler.unary_unary is None:
                return handler
            # Made once per method: the handler with the token check in front, and the
            # request left as bytes (no request_deserializer) until the check passed.
            checked = self._checked[method] = grpc.unary_unary_rpc_method_handler(
                self._gate.guarded(handler.unary_unary, access, request_class_of(method)),
                response_serializer=handler.response_serializer,
            )
        return checked
