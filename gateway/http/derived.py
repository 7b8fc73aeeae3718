"""What the router and the predict proxy derive from one client head, kept with it
(:attr:`gateway.http.server.Head.derived`) for as long as the client repeats that head byte
for byte: the router's reading of its target, the service entry the proxy resolved it to,
and the upstream heads the proxy made from it per replica.

The server only carries the slot; :class:`gateway.http.router.Router` fills it when it reads
a head's own target, and :class:`gateway.http.proxy.PredictProxy` the rest. Invariants:
``entry`` holds only while the route table's generation is still ``entry_at`` (a new table
may route the same name elsewhere); an upstream head is the same bytes for the same client
head, connection and replica, so it is kept per replica, at most :data:`MAX_UPSTREAM_HEADS`.
Compiled with the proxy (``gateway/native.py``).
"""

from __future__ import annotations

from typing import Final

from gateway.routing.balancer import Endpoint
from gateway.routing.paths import Target
from gateway.routing.route_table import ServiceRoute

MAX_UPSTREAM_HEADS: Final = 16  # upstream heads kept per client head (one per replica it went to)


class Derived:
    """One client head's derivations (see the module)."""

    __slots__ = ("entry", "entry_at", "last_endpoint", "last_head", "target", "upstream_heads")

    def __init__(self, target: Target | None) -> None:
        self.target = target  # the router's reading of the head's target; None: no predict call
        self.entry: ServiceRoute | None = None  # what ``target`` resolved to, at ``entry_at``
        self.entry_at = -1  # the route table's generation (RouteState.generation)
        self.upstream_heads: dict[Endpoint, bytes] = {}
        # The last replica asked for and its head, before the dict (one replica mostly:
        # compared by identity).
        self.last_endpoint: Endpoint | None = None
        self.last_head = b""
