"""The client's address behind a proxy the collector trusts (docker/edge: HAProxy).

Behind a proxy every call comes from the proxy's address, so the failed-authentication
limit (collector.auth.AuthFailures) would count all clients as one. The proxy says whom
it serves in `x-forwarded-for` (HAProxy's `option forwardfor` appends the address it
accepted the connection from). That header is believed only from a peer the operator
named with `serve --trusted-proxy`: anyone else could write any address in it, so from
any other peer it is ignored. Of a trusted proxy's header the last address is taken,
the one the proxy itself added; those before it came from the client and prove nothing.
"""

from __future__ import annotations

import ipaddress
import logging
import socket
import threading
import time
from collections.abc import Iterable
from typing import Any

log = logging.getLogger(__name__)

FORWARDED_FOR = "x-forwarded-for"
# How often names given as trusted proxies (a compose service) are looked up again when a
# peer is not among them (s): the proxy's container may start, or move, after this one.
RESOLVE_EVERY_S = 5.0

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


class TrustedProxies:
    """The peers whose `x-forwarded-for` names the client: addresses, networks (CIDR) or
    host names, looked up again now and then."""

    def __init__(self, proxies: Iterable[str]) -> None:
        self._networks: list[Network] = []
        self._names: list[str] = []
        for proxy in proxies:
            try:
                self._networks.append(ipaddress.ip_network(proxy.strip("[]"), strict=False))
            except ValueError:
                self._names.append(proxy)
        self._lock = threading.Lock()
        self._resolved: list[Network] = []
        self._resolved_at = -RESOLVE_EVERY_S
        self._unresolved: set[str] = set()

    def __bool__(self) -> bool:
        return bool(self._networks or self._names)

    def client_peer(self, peer: str | None, metadata: Any) -> str | None:
        """The call's client as a gRPC peer ("ipv4:ADDRESS:0"): the last address of the
        `x-forwarded-for` metadata when `peer` is a trusted proxy, else `peer` itself."""
        if not peer or not self:
            return peer
        forwarded = forwarded_for(metadata)
        if forwarded is None:  # first: calls without the header cost no look-up
            return peer
        kind, _, rest = peer.partition(":")
        if kind not in ("ipv4", "ipv6"):
            return peer
        try:
            address = ipaddress.ip_address(rest.rpartition(":")[0].strip("[]").split("%")[0])
        except ValueError:
            return peer
        if not self.trusts(address):
            return peer
        if forwarded.version == 4:
            return f"ipv4:{forwarded}:0"
        return f"ipv6:[{forwarded}]:0"

    def trusts(self, address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
        """Whether `address` is one of the trusted proxies."""
        if address.version == 6 and address.ipv4_mapped is not None:
            address = address.ipv4_mapped
        if any(address in network for network in self._networks):
            return True
        if not self._names:
            return False
        with self._lock:
            if time.monotonic() - self._resolved_at >= RESOLVE_EVERY_S \
                    and not any(address in network for network in self._resolved):
                self._resolve()
            return any(address in network for network in self._resolved)

    def _resolve(self) -> None:
        """Look the names up again (the lock held)."""
        found: list[Network] = []
        for name in self._names:
            try:
                infos = socket.getaddrinfo(name, None, proto=socket.IPPROTO_TCP)
            except OSError as exc:
                if name not in self._unresolved:
                    log.warning("trusted proxy %s: cannot look it up (%s); its calls "
                                "count as its own until it can be", name, exc)
                    self._unresolved.add(name)
                continue
            self._unresolved.discard(name)
            found.extend(ipaddress.ip_network(str(info[4][0]).split("%")[0]) for info in infos)
        self._resolved = found
        self._resolved_at = time.monotonic()


def forwarded_for(metadata: Any) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    """The last address of the last `x-forwarded-for` entry of a call's metadata (what the
    proxy nearest the collector added); None when there is none, or it is no address."""
    last = None
    for key, value in metadata or ():
        if key == FORWARDED_FOR:
            last = value
    if last is None:
        return None
    item = str(last).rpartition(",")[2].strip().strip("[]")
    try:
        return ipaddress.ip_address(item)
    except ValueError:
        return None
