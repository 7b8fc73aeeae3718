"""Who is refused, and why: the one admission core behind both doors.

The HTTP door (:class:`gateway.http.proxy.PredictProxy`, and its coroutine half in
:mod:`gateway.http.forwarding`) and the gRPC door (:class:`gateway.grpc.server.GrpcDoor`)
read a call's service name and credential each in its own way (a path segment and an
``Authorization`` header; an ``:authority`` and metadata), then ask :class:`Admission`, in
this order:

1. **route**: the service, or the group whose traffic split picks a member
   (:meth:`Admission.member`); none by that name is ``NOT_FOUND``;
2. **token**: the service's (or its group's) token digest; none or another is
   ``UNAUTHENTICATED``;
3. **what the call asks**: Triton's admin API is ``FORBIDDEN``, a body over the limit is
   ``TOO_LARGE`` (:meth:`Admission.admit`);
4. **wake**: a service at zero that wakes on request raises
   :class:`gateway.routing.route_table.Asleep`, and the door holds the call
   (:mod:`gateway.wake`) — a wait that ends without a replica is refused by
   :meth:`Admission.not_woken` (``QUEUE_FULL``, ``WAKE_TIMEOUT``, ``UNAVAILABLE``);
5. **replica**: no ready replica (for that door's protocol) is ``UNAVAILABLE``;
6. **limits**: over the rate limit or the bound of calls in flight is ``OVER_LIMIT``; a call
   that passes holds its place in the service's in-flight count, and the door must
   ``entry.in_flight.leave()`` when it ends.

A refusal is a :class:`Refused` with one of the kinds below and a detail a human can act
on; each door maps the kind to its own status (``HTTP_STATUS`` in
:mod:`gateway.http.problems`, ``GRPC_CODE`` in :mod:`gateway.grpc.server`), so the two doors
refuse the same calls for the same reasons. Called per request, so compiled
(``gateway/native.py``): no coroutines here.
"""

from __future__ import annotations

from typing import Final

from gateway.routing.limits import Activity
from gateway.routing.route_table import Asleep, GroupEntry, RouteState, ServiceRoute
from gateway.wake import NotWakeable, QueueFull, WakeTimeout, queue_bound

# The kinds of refusal (what each door maps to a status).
NOT_FOUND: Final = "not_found"
UNAUTHENTICATED: Final = "unauthenticated"
FORBIDDEN: Final = "forbidden"  # Triton's admin API
TOO_LARGE: Final = "too_large"
UNAVAILABLE: Final = "unavailable"  # no ready replica: retry after a moment
OVER_LIMIT: Final = "over_limit"
QUEUE_FULL: Final = "queue_full"  # a service waking from zero holds as many calls as it may
WAKE_TIMEOUT: Final = "wake_timeout"
KINDS: Final = (
    NOT_FOUND,
    UNAUTHENTICATED,
    FORBIDDEN,
    TOO_LARGE,
    UNAVAILABLE,
    OVER_LIMIT,
    QUEUE_FULL,
    WAKE_TIMEOUT,
)

ADMIN_API: Final = "Triton's admin API (model repository, shared memory, trace, logging)"


class Refused(Exception):
    """A call the gateway answers itself: its ``kind``, a ``detail`` for a human, the
    ``service`` it named (labels the metrics; empty when unknown) and, for a refusal worth
    retrying, when (``retry_after_s``)."""

    def __init__(
        self, kind: str, detail: str, service: str = "", retry_after_s: int | None = None
    ) -> None:
        super().__init__(detail)
        self.kind = kind
        self.detail = detail
        self.service = service
        self.retry_after_s = retry_after_s


class Admission:
    """The admission decisions over one gateway's routes and limits; one per gateway,
    shared by both doors."""

    def __init__(
        self,
        routes: RouteState,
        activity: Activity,
        *,
        max_body_bytes: int,
        retry_after_s: int,
        wake_queue: int,
    ) -> None:
        self.routes = routes
        self.activity = activity
        self.max_body_bytes = max_body_bytes
        self.retry_after_s = retry_after_s
        self.wake_queue = wake_queue

    # -- route --------------------------------------------------------------------------

    @staticmethod
    def unknown(name: str) -> Refused:
        return Refused(NOT_FOUND, f"no service named {name!r}")

    def member(self, group: GroupEntry, *, grpc: bool = False) -> ServiceRoute:
        """The member that takes this call of ``group`` (its traffic split); raises
        :class:`Asleep` for a member to wake, :class:`Refused` when none can take it."""
        entry = self.routes.member(group, grpc=grpc)
        if entry is not None:
            return entry
        name = group.route.group
        ready = "a ready gRPC replica" if grpc else "a ready replica"
        raise self.unavailable(
            name, f"group {name!r} has no member taking group traffic with {ready}"
        )

    # -- token --------------------------------------------------------------------------

    @staticmethod
    def unauthenticated(service: str, detail: str) -> Refused:
        return Refused(UNAUTHENTICATED, detail, service)

    # -- what the call asks, wake, replica, limits ----------------------------------------

    def admit(
        self,
        entry: ServiceRoute,
        *,
        grpc: bool,
        admin: str | None,
        length: int | None,
        now: float,
    ) -> None:
        """Refuse (:class:`Refused`), hold (:class:`Asleep`) or admit an authenticated call
        for ``entry``: ``admin`` names the admin operation it asks for (None: a tenant's),
        ``length`` its body size when known; admitted, it holds a place in the service's
        in-flight count from ``now`` (``time.monotonic()``)."""
        name = entry.service
        if admin is not None:
            raise Refused(FORBIDDEN, f"{admin} is not available through the gateway", name)
        limit = self.max_body_bytes
        if length is not None and length > limit:
            raise Refused(
                TOO_LARGE, f"request body of {length} bytes exceeds the limit of {limit}", name
            )
        if not (entry.grpc_endpoints if grpc else entry.endpoints):
            if entry.wakeable:
                raise Asleep(entry)
            port = " with a gRPC port" if grpc else ""
            raise self.unavailable(
                name, f"service {name!r} has no ready replica{port} (status: {entry.status})"
            )
        over = entry.take_place(self.activity, now)
        if over is not None:
            # max_queue_size full is EAS's queue full (450), the rate limit 429.
            kind = QUEUE_FULL if over.status == 450 else OVER_LIMIT
            raise Refused(kind, over.detail, name, over.retry_after_s)

    def unavailable(self, name: str, detail: str) -> Refused:
        """No ready replica: a refusal the caller may retry after a moment (replicas come
        and go)."""
        return Refused(UNAVAILABLE, detail, name, self.retry_after_s)

    def not_woken(self, e: Exception, asleep: ServiceRoute) -> Refused:
        """Why a call held for ``asleep`` (a service at zero) was not let through:
        ``e`` is what its wait raised (:mod:`gateway.wake`), or a refusal of its
        admission once woken."""
        name = asleep.service
        if isinstance(e, Refused):
            return e
        if isinstance(e, QueueFull):
            bound = queue_bound(asleep, self.wake_queue)
            return Refused(
                QUEUE_FULL,
                f"service {name!r} is waking up from zero and already holds {bound} requests: "
                "this one was not processed, retry in a moment",
                name,
                max(1, self.retry_after_s),
            )
        if isinstance(e, WakeTimeout):
            return Refused(
                WAKE_TIMEOUT,
                f"service {name!r} was scaled to zero and no replica was ready within "
                f"{asleep.timeout_s * 1000:.0f} ms (its timeout)",
                name,
            )
        why = str(e) if isinstance(e, NotWakeable) else "none ready yet"
        return self.unavailable(name, f"service {name!r} has no ready replica: {why}")
