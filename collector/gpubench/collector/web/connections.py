"""Who gets a connection to the site, and for how long.

uvicorn closes a connection idle after a response (`timeout_keep_alive`), but not one
that never sends a request, nor one that sends its request a byte at a time (any byte
restarts the keep-alive wait), and it counts connections by nobody: 3,000 silent
connections were held open. The site's HTTP protocol is uvicorn's own h11 protocol
with these rules on top (`site_protocol`):

- a connection has REQUEST_TIMEOUT_S, from its start and from the end of each response,
  to send a whole request head; past it, with no request being answered, it is closed;
- an address (an IPv6 one by its /64, collector.door.address_key) holds at most
  `peer_connections`, and the site `max_connections` in all: a new connection past the
  total closes the oldest one waiting for a request, and only when none is waiting is
  it refused (logged).

It relies on what uvicorn's h11 protocol objects have (made on uvicorn 0.54;
pyproject keeps uvicorn below 0.60): `client`, `cycle` (the request being answered)
with its `response_complete`, `on_response_complete`, `handle_events`, `loop`.
`site_protocol` checks for them and, on a uvicorn without them, falls back to uvicorn's
own protocol with a warning.
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from uvicorn.protocols.http.h11_impl import H11Protocol, RequestResponseCycle

from gpubench.collector.door import address_key

log = logging.getLogger(__name__)

# A request head must arrive whole within this long of the connection's start or of the
# previous response's end (s).
REQUEST_TIMEOUT_S = 10.0
# uvicorn's own wait for the next request after a response (s), which any byte restarts.
KEEP_ALIVE_S = 5
MAX_CONNECTIONS = 1000
PEER_CONNECTIONS = 64
# The listening socket's backlog of connections not yet accepted.
BACKLOG = 2048


@dataclass(frozen=True)
class SiteLimits:
    """How many connections the site holds, and how long one may wait for a request."""

    max_connections: int = MAX_CONNECTIONS
    peer_connections: int = PEER_CONNECTIONS
    request_timeout_s: float = REQUEST_TIMEOUT_S


def _fits() -> bool:
    """Whether this uvicorn's h11 protocol has what the site's rules use."""
    return (all(hasattr(H11Protocol, name) for name in ("on_response_complete", "handle_events",
                                                        "connection_made", "connection_lost"))
            and "response_complete" in RequestResponseCycle.__init__.__code__.co_names)


def site_protocol(limits: SiteLimits) -> type[asyncio.Protocol]:
    """uvicorn's h11 protocol with the site's connection rules, counting in a place of
    its own (one per site)."""
    if not _fits():
        log.warning("this uvicorn's HTTP protocol is not the one the site's connection "
                    "limits were made for: serving with uvicorn's own, without them")
        return H11Protocol
    counts = _Counts(limits)

    class SiteProtocol(H11Protocol):
        """uvicorn's h11 protocol with the site's connection rules (connections.py)."""

        def connection_made(self, transport: Any) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._site_timer: asyncio.TimerHandle | None = None
            self._site_key = address_key(self.client[0]) if self.client else "unknown"
            self._site_admitted = counts.admit(self)
            if not self._site_admitted:
                transport.abort()
                return
            self._await_request()

        def connection_lost(self, exc: Exception | None) -> None:
            if getattr(self, "_site_admitted", False):
                counts.gone(self)
                self._site_admitted = False
            timer = getattr(self, "_site_timer", None)
            if timer is not None:
                timer.cancel()
            super().connection_lost(exc)

        def handle_events(self) -> None:
            super().handle_events()
            if self.cycle is not self._site_cycle:  # a request head came whole
                counts.busy(self)

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if not self.transport.is_closing():
                self._await_request()

        def _await_request(self) -> None:
            self._site_cycle = self.cycle
            if self._site_timer is not None:
                self._site_timer.cancel()
            self._site_timer = self.loop.call_later(limits.request_timeout_s, self._too_slow)
            if self.cycle is None or self.cycle.response_complete:
                counts.idle(self)

        def _too_slow(self) -> None:
            self._site_timer = None
            answering = self.cycle is not None and not self.cycle.response_complete
            if self.cycle is self._site_cycle and not answering:
                self.transport.close()

    return SiteProtocol


class _Counts:
    """The connections of one site: per address, in all, and those waiting for a request
    (oldest first), in the site's event loop."""

    def __init__(self, limits: SiteLimits) -> None:
        self._limits = limits
        self._open = 0
        self._per_peer: dict[str, int] = {}
        self._idle: OrderedDict[Any, None] = OrderedDict()
        self.refused = 0

    def admit(self, protocol: Any) -> bool:
        key = protocol._site_key  # noqa: SLF001 - the protocol's own
        if self._per_peer.get(key, 0) >= self._limits.peer_connections:
            self.refused += 1
            return False
        if self._open >= self._limits.max_connections:
            if not self._idle:
                self.refused += 1
                log.warning("refusing a connection: all %d of the site's are answering "
                            "requests", self._limits.max_connections)
                return False
            oldest = next(iter(self._idle))
            self._idle.pop(oldest)
            oldest.transport.close()
        self._open += 1
        self._per_peer[key] = self._per_peer.get(key, 0) + 1
        return True

    def idle(self, protocol: Any) -> None:
        self._idle[protocol] = None
        self._idle.move_to_end(protocol)

    def busy(self, protocol: Any) -> None:
        self._idle.pop(protocol, None)

    def gone(self, protocol: Any) -> None:
        self._idle.pop(protocol, None)
        self._open -= 1
        key = protocol._site_key  # noqa: SLF001
        left = self._per_peer[key] - 1
        if left:
            self._per_peer[key] = left
        else:
            del self._per_peer[key]
