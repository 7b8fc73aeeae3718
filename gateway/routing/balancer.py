"""Replica choice for one request: least outstanding requests, ties broken round-robin,
and a replica that just refused a connection tried last for a moment. Pure logic with an
injectable clock; the proxy keeps the counts up to date.

:class:`Endpoint` objects are shared across route-table versions (by base URL), so a
table swap neither resets the counts of requests still in flight nor forgets a replica
that was refusing connections.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from urllib.parse import urlsplit

log = logging.getLogger(__name__)


class Endpoint:
    """One ready replica, e.g. ``http://127.0.0.1:41233`` (plain HTTP: replicas sit on
    the cluster network behind the gateway)."""

    __slots__ = (
        "address",
        "base_url",
        "down_until",
        "host",
        "host_header",
        "outstanding",
        "port",
    )

    def __init__(self, base_url: str) -> None:
        self.base_url = base_url.rstrip("/")
        self.host, self.port = split_base_url(self.base_url)
        self.address = address(self.host, self.port)  # its connections' key in the pool
        default = self.port == 80
        hostname = f"[{self.host}]" if ":" in self.host else self.host
        self.host_header = (hostname if default else f"{hostname}:{self.port}").encode("idna")
        self.outstanding = 0
        self.down_until = 0.0  # monotonic time before which it is tried last

    def __repr__(self) -> str:
        return f"Endpoint({self.base_url!r}, outstanding={self.outstanding})"


def address(host: str, port: int) -> str:
    """A replica's key in the connection pool: a string, whose hash is kept, where a
    ``(host, port)`` tuple would be built, hashed and compared on every lookup; interned,
    so that an endpoint's and its connections' keys are one object (compared by identity
    first)."""
    return sys.intern(f"{host}:{port}")


def split_base_url(base_url: str) -> tuple[str, int]:
    """``"http://host:port"`` → ``("host", port)``; ValueError for anything else."""
    parts = urlsplit(base_url)
    if parts.scheme != "http" or not parts.hostname or parts.path not in ("", "/"):
        raise ValueError(f"replica URL must be http://host[:port], got {base_url!r}")
    return parts.hostname, parts.port or 80


class EndpointPool:
    """All endpoints the gateway knows, by base URL, plus the choosing policy."""

    def __init__(self, *, down_s: float = 1.0, clock: Callable[[], float] = time.monotonic):
        self._by_url: dict[str, Endpoint] = {}
        self._down_s = down_s
        self._clock = clock
        self._rr = 0

    def resolve(self, base_urls: Iterable[str]) -> tuple[Endpoint, ...]:
        """The shared :class:`Endpoint` for each URL (created on first sight)."""
        out = []
        for url in base_urls:
            key = url.rstrip("/")
            ep = self._by_url.get(key)
            if ep is None:
                try:
                    ep = self._by_url[key] = Endpoint(key)
                except ValueError as e:
                    log.warning("ignoring replica endpoint: %s", e)
                    continue
            out.append(ep)
        return tuple(out)

    def forget(self, base_urls: Iterable[str]) -> None:
        """Drop endpoints no route lists any more, unless a request is still using one (it
        is then kept, and found again if a route lists it later)."""
        for url in base_urls:
            ep = self._by_url.get(url)
            if ep is not None and not ep.outstanding:
                del self._by_url[url]

    def choose(
        self, endpoints: Sequence[Endpoint], exclude: Sequence[Endpoint] = ()
    ) -> Endpoint | None:
        """The endpoint with the fewest outstanding requests among those not excluded,
        preferring ones not marked down; ``None`` when all are excluded."""
        n = len(endpoints)
        if n == 1:
            only = endpoints[0]
            return None if only in exclude else only
        now = self._clock()
        self._rr = start = (self._rr + 1) % n if n else 0
        best: Endpoint | None = None
        best_key = (True, 0)
        for i in range(n):
            ep = endpoints[(start + i) % n]
            if ep in exclude:
                continue
            key = (ep.down_until > now, ep.outstanding)
            if best is None or key < best_key:
                best, best_key = ep, key
        return best

    def mark_down(self, endpoint: Endpoint) -> None:
        endpoint.down_until = self._clock() + self._down_s

    def mark_up(self, endpoint: Endpoint) -> None:
        if endpoint.down_until:
            endpoint.down_until = 0.0
