"""The wire between a multi-process collector's owner and its front-end processes.

Both ends (collector.owner, collector.frontend) speak length-prefixed protobuf over a
Unix stream socket: every message is a 4-byte big-endian unsigned length N, then N
bytes of one message of protos/gpubench/v1/collector_ipc.proto (an OwnerMessage from
the owner, a FrontendMessage from a front-end). That file documents the messages and
the order they come in; this module frames them, bounds them, runs the handshake and
turns a runs-table row, a status and an acknowledgement into messages and back. No
object is ever unpickled or evaluated: a message is parsed by its protobuf type only.

The handshake: the owner sends a Challenge of NONCE_BYTES random bytes, the front-end
answers with a Proof, HMAC-SHA256 keyed with the secret the owner gave it (on stdin),
of PROOF_CONTEXT and the nonce; the owner compares it with `hmac.compare_digest` and
closes the connection unless it matches. The socket also lives in a folder only the
collector's user may enter (mode 0700).

Bounds: a side refuses a frame whose length is over `frame_limit` (the larger of the
collector's request and response limits, plus FRAME_SLACK), HANDSHAKE_LIMIT before the
handshake, and closes the connection, so a broken peer cannot make it allocate more.

Kept free of the database, for the front-end processes.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import os
import socket
from typing import Any

import grpc

from gpubench import comparison_key
from gpubench.collector.rows import Ack, ack_message
from gpubench.collector.transport import Refusal, server_options
from gpubench.v1 import collector_ipc_pb2 as ipc_pb2

HEADER_BYTES = 4
SECRET_BYTES = 32
NONCE_BYTES = 32
# What the Proof's HMAC covers besides the nonce: a proof made for anything else (another
# protocol keyed with the same secret) is never a valid one here.
PROOF_CONTEXT = b"gpubench collector ipc v1\n"
# The largest frame before the handshake is done (a Challenge or a Proof: under 100 bytes).
HANDSHAKE_LIMIT = 1024
# How long the owner waits for a connecting front-end's proof (s).
HANDSHAKE_TIMEOUT_S = 5.0
# Room beyond the largest gRPC message for what a frame adds: the method's name, the
# caller's authorization entry and address, a submission's row and problems.
FRAME_SLACK = 1 << 20
# How much one read of a connection asks the kernel for.
READ_BYTES = 1 << 16

_STATUS_OF_NUMBER = {status.value[0]: status for status in grpc.StatusCode}


class FrameError(ConnectionError):
    """A peer broke the protocol (a frame over the limit, bytes that are no message, a
    message out of place): its connection is closed."""


def frame_limit(max_message_bytes: int) -> int:
    """The largest frame either side accepts once connected: a request of up to
    `max_message_bytes` (the collector's --max-message-bytes) or a response of up to the
    send limit the front-ends' gRPC servers have, plus FRAME_SLACK."""
    options = dict(server_options(max_message_bytes))
    return max(max_message_bytes, options["grpc.max_send_message_length"]) + FRAME_SLACK


def framed(message: Any, limit: int) -> bytes:
    """`message` serialised and framed; FrameError if it is over `limit`."""
    data = message.SerializeToString()
    if len(data) > limit:
        raise FrameError(f"a {type(message).__name__} of {len(data):,} bytes is over the "
                         f"{limit:,} a frame may have")
    return len(data).to_bytes(HEADER_BYTES, "big") + data


def _length(header: bytes | bytearray | memoryview, limit: int) -> int:
    size = int.from_bytes(header[:HEADER_BYTES], "big")
    if size > limit:
        raise FrameError(f"a frame of {size:,} bytes announced; at most {limit:,} are accepted")
    return size


def parse(message_class: Any, data: bytes) -> Any:
    """`data` parsed as a `message_class` with a message set in its `kind`; FrameError
    for anything else."""
    try:
        message = message_class.FromString(data)
    except Exception as exc:  # DecodeError, or what upb raises on bytes it cannot read
        raise FrameError(f"not a {message_class.__name__}: {exc}") from None
    if message.WhichOneof("kind") is None:
        raise FrameError(f"a {message_class.__name__} without a message")
    return message


class Frames:
    """Splits what one connection's reads bring into frames, refusing one over the limit
    as soon as its length is read."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._buffer = bytearray()

    def feed(self, data: bytes) -> list[bytes]:
        """The frames `data` completes, in order (often exactly one); FrameError."""
        if not self._buffer and len(data) >= HEADER_BYTES:  # the common case: whole frames
            size = _length(data, self.limit)
            if len(data) == HEADER_BYTES + size:
                return [data[HEADER_BYTES:]]
        buffer = self._buffer
        buffer += data
        found = []
        while len(buffer) >= HEADER_BYTES:
            size = _length(buffer, self.limit)
            if len(buffer) < HEADER_BYTES + size:
                break
            found.append(bytes(buffer[HEADER_BYTES:HEADER_BYTES + size]))
            del buffer[:HEADER_BYTES + size]
        return found


# -- blocking and asyncio reads -------------------------------------------------------


def _read_exactly(sock: socket.socket, size: int) -> bytes:
    data = bytearray(size)
    view = memoryview(data)
    got = 0
    while got < size:
        n = sock.recv_into(view[got:])
        if n == 0:
            raise ConnectionError("the connection closed")
        got += n
    return bytes(data)


def receive(sock: socket.socket, message_class: Any, limit: int) -> Any:
    """Read one frame from a blocking socket and parse it; ConnectionError (FrameError
    included) when the peer closed or broke the protocol."""
    size = _length(_read_exactly(sock, HEADER_BYTES), limit)
    return parse(message_class, _read_exactly(sock, size))


def send(sock: socket.socket, message: Any, limit: int) -> None:
    """Write one message to a blocking socket."""
    sock.sendall(framed(message, limit))


async def read(reader: asyncio.StreamReader, message_class: Any, limit: int) -> Any:
    """Read one frame from an asyncio stream and parse it; asyncio.IncompleteReadError
    when the peer closed, FrameError when it broke the protocol."""
    size = _length(await reader.readexactly(HEADER_BYTES), limit)
    return parse(message_class, await reader.readexactly(size))


# -- the handshake ----------------------------------------------------------------------


def new_secret() -> bytes:
    """A fresh secret for the front-ends of one owner."""
    return os.urandom(SECRET_BYTES)


def challenge() -> tuple[bytes, bytes]:
    """A fresh nonce, and the framed Challenge carrying it."""
    nonce = os.urandom(NONCE_BYTES)
    message = ipc_pb2.OwnerMessage(challenge=ipc_pb2.Challenge(nonce=nonce))
    return nonce, framed(message, HANDSHAKE_LIMIT)


def proof(secret: bytes, nonce: bytes) -> ipc_pb2.FrontendMessage:
    """The Proof answering a Challenge of `nonce`."""
    mac = hmac.new(secret, PROOF_CONTEXT + nonce, hashlib.sha256).digest()
    return ipc_pb2.FrontendMessage(proof=ipc_pb2.Proof(mac=mac))


def proves(message: ipc_pb2.FrontendMessage, secret: bytes, nonce: bytes) -> bool:
    """Whether `message` is the Proof for `nonce` (compared in constant time)."""
    if message.WhichOneof("kind") != "proof":
        return False
    return hmac.compare_digest(proof(secret, nonce).proof.mac, message.proof.mac)


def nonce_of(message: ipc_pb2.OwnerMessage) -> bytes:
    """The nonce of the owner's first message; FrameError unless it is a Challenge."""
    if message.WhichOneof("kind") != "challenge" or len(message.challenge.nonce) != NONCE_BYTES:
        raise FrameError("the owner's first message is no challenge")
    return message.challenge.nonce


# -- the runs-table row -----------------------------------------------------------------

# The dimensions of the comparison key without a field of their own: in the maps.
_KEY_MAPS = ("key_texts", "key_counts")
_ROW_FIELDS = [f for f in ipc_pb2.RunRow.DESCRIPTOR.fields if f.name not in _KEY_MAPS]
_MAPPED = tuple(d for d in comparison_key.DIMENSIONS
                if d.name not in ipc_pb2.RunRow.DESCRIPTOR.fields_by_name)
_MAPPED_NAMES = frozenset(d.name for d in _MAPPED)
# The timestamps (unset: NULL), the other columns that may be NULL, and the rest.
_TIMES = frozenset(f.name for f in _ROW_FIELDS if f.message_type is not None)
_NULLABLE = tuple(f.name for f in _ROW_FIELDS if f.has_presence and f.message_type is None)
_PLAIN = tuple(f.name for f in _ROW_FIELDS if not f.has_presence)


def fill_row(target: ipc_pb2.RunRow, row: dict[str, Any]) -> None:
    """Set `target`'s fields from a row made by rows.run_row (None: left unset).
    AttributeError for a column the message lacks: a column added to run_row needs its
    field in RunRow."""
    for name, value in row.items():
        if value is None:
            continue
        if name in _MAPPED_NAMES:
            (target.key_counts if isinstance(value, int) else target.key_texts)[name] = value
        elif name in _TIMES:
            getattr(target, name).FromDatetime(value)
        else:
            setattr(target, name, value)


def row_of(message: ipc_pb2.RunRow) -> dict[str, Any]:
    """The row a RunRow carries, as rows.run_row made it (naive UTC datetimes)."""
    row: dict[str, Any] = {name: getattr(message, name) for name in _PLAIN}
    for name in _NULLABLE:
        row[name] = getattr(message, name) if message.HasField(name) else None
    for name in _TIMES:
        row[name] = getattr(message, name).ToDatetime() if message.HasField(name) else None
    for dimension in _MAPPED:
        held = message.key_counts if dimension.numeric else message.key_texts
        row[dimension.name] = held.get(dimension.name, dimension.empty)
    return row


# -- requests ------------------------------------------------------------------------------


def _caller(request: Any, authorization: str | None, peer: str | None) -> None:
    if authorization is not None:
        request.authorization = authorization
    if peer is not None:
        request.peer = peer


def auth_request(authorization: str | None, peer: str | None) -> ipc_pb2.FrontendMessage:
    """Whether the call's token may submit."""
    message = ipc_pb2.FrontendMessage()
    _caller(message.auth, authorization, peer)
    return message


def submit_request(
    authorization: str | None, peer: str | None, row: dict[str, Any] | None,
    problems: list[tuple[str, str]],
) -> ipc_pb2.FrontendMessage:
    """A validated submission: its row, or its problems."""
    message = ipc_pb2.FrontendMessage()
    submit = message.submit
    _caller(submit, authorization, peer)
    if row is not None:
        fill_row(submit.row, row)
    for path, problem in problems:
        submit.problems.add(path=path, problem=problem)
    return message


def call_request(
    method: str, request: bytes, authorization: str | None, peer: str | None
) -> ipc_pb2.FrontendMessage:
    """Any other method, its request as the caller sent it."""
    message = ipc_pb2.FrontendMessage()
    call = message.call
    call.method = method
    call.request = request
    _caller(call, authorization, peer)
    return message


def caller_of(request: Any) -> tuple[str | None, str | None]:
    """A request's (authorization, peer); None where unset."""
    return (request.authorization if request.HasField("authorization") else None,
            request.peer if request.HasField("peer") else None)


def submission_of(
    request: ipc_pb2.SubmitRequest,
) -> tuple[dict[str, Any] | None, list[tuple[str, str]]]:
    """A SubmitRequest's row (None when it has none: the run is invalid) and problems."""
    row = row_of(request.row) if request.HasField("row") else None
    return row, [(p.path, p.problem) for p in request.problems]


# -- replies ----------------------------------------------------------------------------


def accepted(limit: int) -> bytes:
    """The framed Reply to an AuthRequest whose token may submit."""
    message = ipc_pb2.OwnerMessage()
    message.reply.accepted.SetInParent()
    return framed(message, limit)


def acknowledged(ack: Ack, limit: int) -> bytes:
    """The framed Reply of a committed submission: the SubmitRunResponse itself."""
    message = ipc_pb2.OwnerMessage()
    message.reply.ack.CopyFrom(ack_message(ack))
    return framed(message, limit)


def response(data: bytes, limit: int) -> bytes:
    """The framed Reply of a forwarded call: its response, serialised. A response too
    large for a frame is refused as gRPC refuses one over its send limit."""
    if len(data) > limit - FRAME_SLACK:
        return refused(grpc.StatusCode.RESOURCE_EXHAUSTED,
                       f"Sent message larger than max ({len(data)} vs. {limit - FRAME_SLACK})",
                       limit)
    message = ipc_pb2.OwnerMessage()
    message.reply.response = data
    return framed(message, limit)


def refused(code: grpc.StatusCode, details: str, limit: int, hold_s: float = 0.0) -> bytes:
    """The framed Reply ending a call with a status, its answer held `hold_s` seconds
    by the front-end (collector.auth.AuthFailures)."""
    message = ipc_pb2.OwnerMessage()
    refusal = message.reply.refused
    refusal.code = code.value[0]
    refusal.hold_seconds = hold_s
    try:
        refusal.details = details
    except ValueError:  # text protobuf cannot carry (a lone surrogate): replaced
        refusal.details = details.encode("utf-8", "replace").decode("utf-8")
    return framed(message, limit)


def health(serving: bool) -> ipc_pb2.OwnerMessage:
    """What a front-end's health service must say."""
    return ipc_pb2.OwnerMessage(health=ipc_pb2.Health(serving=serving))


def outcome(reply: ipc_pb2.Reply) -> Any:
    """What a Reply answers: None (the token may submit), the SubmitRunResponse, or the
    response's bytes; raises Refusal with the owner's status."""
    kind = reply.WhichOneof("outcome")
    if kind == "ack":
        return reply.ack
    if kind == "response":
        return reply.response
    if kind == "refused":
        code = _STATUS_OF_NUMBER.get(reply.refused.code, grpc.StatusCode.UNKNOWN)
        raise Refusal(code, reply.refused.details, reply.refused.hold_seconds)
    if kind == "accepted":
        return None
    raise FrameError("a reply without an outcome")
