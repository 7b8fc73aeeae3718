"""The gateway's in-memory route table. A route source (:mod:`gateway.route_source`)
pushes :class:`contract.wire.RouteTable` tables — whole, or the changes after the version
the gateway has — into a :class:`RouteState` through its ``apply`` callback.

The proxy only reads :class:`RouteState`; each service's route is replaced by one dict
assignment, so a request sees a service's old or new route, never half of each, and a change
to one service costs work for that service only (a whole table is rebuilt only when one
arrives). Compiled with the proxy (``gateway/native.py``): each call looks its service up
here.
"""

from __future__ import annotations

import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from contract.wire import GroupRoute, QueueRoute, Route, RouteTable
from gateway.routing.auth import SigningKey, digest_bytes, token_digest_of
from gateway.routing.balancer import Endpoint, EndpointPool
from gateway.routing.limits import Activity, InFlight, OverLimit, TokenBucket
from gateway.routing.traffic import MirrorState, SmoothWeighted


class ServiceRoute:
    """One service as the proxy uses it: what its wire route says, then live admission
    state. Compact by contract, as a gateway holds one per service of the cluster
    (``tests/gateway/test_route_memory.py`` holds a route to its budget): the wire route is
    not kept, the token digest is its 32 bytes (also the :attr:`RouteState.by_digest` key),
    text that many routes share (status, group) is interned, and what only a called service
    needs is made on its first call (the in-flight count, the signing key)."""

    __slots__ = (
        "_key",
        "accepted",
        "admitted",
        "bucket",
        "digest",
        "endpoints",
        "group",
        "grouping",
        "grpc_endpoints",
        "max_queue_size",
        "mirror",
        "queue",
        "rate_limit",
        "service",
        "status",
        "timeout_s",
        "token",
        "wakeable",
        "weight",
    )

    def __init__(
        self,
        route: Route,
        *,
        endpoints: tuple[Endpoint, ...] = (),
        grpc_endpoints: tuple[Endpoint, ...] = (),
        timeout_s: float,
        bucket: TokenBucket | None = None,
        in_flight: InFlight | None = None,
        mirror: MirrorState | None = None,
    ) -> None:
        self.service: str = route.service
        self.digest: bytes = digest_bytes(route.token_sha256)
        # The token, which signed calls are checked with (None: they are refused); its
        # SigningKey is made by the first signed call (:attr:`key`).
        self.token: bytes | None = route.token.encode("utf-8") if route.token else None
        self._key: SigningKey | None = None
        self.endpoints: tuple[Endpoint, ...] = endpoints
        self.grpc_endpoints: tuple[Endpoint, ...] = grpc_endpoints  # the same replicas' gRPC ports
        self.timeout_s: float = timeout_s
        self.rate_limit: int | None = route.rate_limit
        self.max_queue_size: int | None = route.max_queue_size
        self.status: str = sys.intern(route.status)  # for a 503's detail only
        self.group: str | None = None if route.group is None else sys.intern(route.group)
        self.weight: int = route.weight
        self.grouping: bool = route.grouping
        self.wakeable: bool = route.wakeable
        self.queue: QueueRoute | None = route.queue
        self.bucket: TokenBucket | None = bucket
        # The in-flight count once a call was admitted (:attr:`in_flight` makes it): what
        # a call that was admitted leaves, read without a call on the per-request path.
        self.admitted: InFlight | None = in_flight
        self.mirror: MirrorState | None = mirror  # None for most services: one check per call
        # The last Authorization value that passed, compared in constant time before hashing
        # (a hash per request cost more than the comparison). Never carried to a new route.
        # A signed call's value never goes here: each is checked in full (its Date and body).
        self.accepted: bytes | None = None

    @property
    def in_flight(self) -> InFlight:
        """The service's in-flight count (its ``max_queue_size`` bound, its load for the
        autoscaler), made on first use and carried to the service's next route."""
        in_flight = self.admitted
        if in_flight is None:
            in_flight = self.admitted = InFlight(self.max_queue_size or None)
        return in_flight

    @property
    def key(self) -> SigningKey | None:
        """The key signed calls are checked with, None without a token."""
        key = self._key
        if key is None and self.token is not None:
            key = self._key = SigningKey(self.token)
        return key

    def wire(self) -> Route:
        """The route as the control plane sent it, less its token (for the snapshot)."""
        return Route(
            service=self.service,
            token_sha256=self.digest.hex(),
            endpoints=[ep.base_url for ep in self.endpoints],
            grpc_endpoints=[ep.base_url for ep in self.grpc_endpoints],
            timeout_ms=round(self.timeout_s * 1000),
            rate_limit=self.rate_limit,
            max_queue_size=self.max_queue_size,
            status=self.status,
            group=self.group,
            weight=self.weight,
            grouping=self.grouping,
            mirror=None if self.mirror is None else self.mirror.route,
            wakeable=self.wakeable,
            queue=self.queue,
        )

    def take_place(self, activity: Activity, now: float) -> OverLimit | None:
        """Admit one call under the service's rate limit and in-flight bound (HTTP and gRPC
        alike), and mark the service busy for the load report: None, or why not. ``now``:
        ``time.monotonic()`` (the in-flight count's clock), read once by the caller."""
        bucket = self.bucket
        name = self.service
        if bucket is not None and not bucket.try_acquire():
            return OverLimit(
                f"service {name!r} is over its rate limit of {self.rate_limit} requests/s",
                bucket.retry_after_s(),
            )
        in_flight = self.admitted
        if in_flight is None:
            in_flight = self.in_flight
        if not in_flight.enter_at(now):
            return OverLimit(
                f"service {name!r} already has {in_flight.limit} requests in flight "
                "(metadata.rpc.max_queue_size)",
                1,
                450,
            )
        if not in_flight.active:
            activity.touch(name, in_flight)
        return None


class Asleep(Exception):
    """The service that should answer is at zero and wakes on request: hold the call
    (either door) until it has a ready replica."""

    def __init__(self, entry: ServiceRoute) -> None:
        super().__init__(entry.service)
        self.entry = entry


@dataclass(slots=True)
class GroupEntry:
    """A service group as the proxy uses it: its token digest and its traffic split."""

    route: GroupRoute
    digest: bytes
    picker: SmoothWeighted = field(default_factory=SmoothWeighted)
    accepted: bytes | None = None  # as ServiceRoute.accepted
    key: SigningKey | None = None  # as ServiceRoute.key


@dataclass(frozen=True)
class RouteChange:
    """What one applied table changed, for listeners (the upstream connection pool)."""

    table: RouteTable
    added: frozenset[Endpoint] = field(default_factory=frozenset)  # newly routed replicas
    released: frozenset[Endpoint] = field(default_factory=frozenset)  # no route lists them


class RouteState:
    """Current table: service name → :class:`ServiceRoute`. ``version`` is None until a
    first table arrives."""

    def __init__(self, pool: EndpointPool, *, default_timeout_ms: int) -> None:
        self.pool = pool
        self.default_timeout_ms = default_timeout_ms
        self.version: int | None = None
        self.updated_at: float | None = None
        # Counts the tables applied: what a caller resolved at one generation holds until
        # the next (the proxy keeps a repeated head's service entry while it does).
        self.generation = 0
        self.services: dict[str, ServiceRoute] = {}
        self.listeners: list[Callable[[RouteChange], None]] = []
        self._refs: Counter[Endpoint] = Counter()  # how many services list each endpoint
        self.groups: dict[str, GroupEntry] = {}
        self.members: dict[str, set[str]] = {}  # group → its members' service names
        # Token digest → service, for callers that name their service by its token alone
        # (gRPC clients that only have the gateway's address); tokens are unique per cluster.
        self.by_digest: dict[bytes, str] = {}
        self.group_by_digest: dict[bytes, str] = {}  # a group token's digest → the group
        # While a whole table arrives in pages: the services and groups its pages listed.
        self._listed: set[str] | None = None
        self._listed_groups: set[str] | None = None
        self._timeouts: dict[int, float] = {}  # one float per distinct timeout, shared

    def by_token(self, token: bytes) -> ServiceRoute | None:
        """The service whose token ``token`` is (one hash, one lookup)."""
        name = self.by_digest.get(token_digest_of(token))
        return None if name is None else self.services.get(name)

    def get(self, service: str) -> ServiceRoute | None:
        return self.services.get(service)

    def wire(self) -> tuple[list[ServiceRoute], list[GroupRoute]] | None:
        """What the snapshot saves of the table in force, None before a first whole one:
        the entries as they are now (each turns into its wire route with
        :meth:`ServiceRoute.wire`, one at a time, wherever it is written) and the groups."""
        if self.version is None:
            return None
        return list(self.services.values()), [entry.route for entry in self.groups.values()]

    def named(self, name: str) -> GroupEntry | tuple[ServiceRoute, GroupEntry | None] | None:
        """What a caller's name for its target reaches (a path segment on HTTP, a host
        label on gRPC): a group, whose name wins over a service's (the group endpoint is
        what callers of a released service use); a service, with the group whose token
        also opens it when named ``<group>.<service>`` (EAS's spelling); or nothing."""
        group = self.groups.get(name) if self.groups else None
        if group is not None:
            return group
        if "." not in name:  # (most calls: no partition to build)
            entry = self.services.get(name)
            return None if entry is None else (entry, None)
        group_name, dot, member = name.partition(".")
        entry = self.services.get(member if dot else name)
        if entry is None or (dot and entry.group != group_name):
            return None
        return entry, self.groups.get(group_name) if dot else None

    def pick(self, group: GroupEntry, *, grpc: bool = False) -> ServiceRoute | None:
        """The member that takes the next request of ``group``: among those taking group
        traffic with a ready replica (on the gRPC door: one with a gRPC port), by weight
        ("customized") or ready replicas ("auto")."""
        auto = group.route.traffic_mode == "auto"
        candidates = {}
        for name in self.members.get(group.route.group, ()):
            entry = self.services[name]
            ready = entry.grpc_endpoints if grpc else entry.endpoints
            if entry.grouping and ready:
                candidates[name] = (entry, len(ready) if auto else entry.weight)
        chosen = group.picker.pick((name, share) for name, (_, share) in candidates.items())
        return None if chosen is None else candidates[chosen][0]

    def member(self, group: GroupEntry, *, grpc: bool = False) -> ServiceRoute | None:
        """The member that takes this call of ``group`` (:meth:`pick`); when none can,
        raises :class:`Asleep` for the one to wake, else None (the door answers that
        nobody can take it)."""
        entry = self.pick(group, grpc=grpc)
        if entry is None:
            asleep = self.asleep_member(group)
            if asleep is not None:
                raise Asleep(asleep)
        return entry

    def asleep_member(self, group: GroupEntry) -> ServiceRoute | None:
        """When no member can take the group's traffic now: the one to wake (taking group
        traffic, at zero and wakeable; the heaviest), else None."""
        asleep = [
            self.services[name]
            for name in sorted(self.members.get(group.route.group, ()))
            if self.services[name].grouping and self.services[name].wakeable
        ]
        return max(asleep, key=lambda e: e.weight, default=None)

    def group_tokens(self, group: GroupEntry) -> list[bytes]:
        """The digests that open a group endpoint: the group's, then every member's."""
        members = self.members.get(group.route.group, ())
        return [group.digest, *(self.services[name].digest for name in members)]

    def group_keys(self, group: GroupEntry) -> list[SigningKey | None]:
        """The keys a signed call to a group endpoint may be signed with, in the order of
        :meth:`group_tokens`."""
        members = self.members.get(group.route.group, ())
        return [group.key, *(self.services[name].key for name in members)]

    def apply(self, table: RouteTable) -> None:
        """Apply ``table``: a whole one replaces every route (over its pages: each page's
        routes replace theirs, and the last page drops what no page listed), changes replace
        and remove only theirs. Per-service counters (in flight, rate-limit bucket) and
        per-endpoint counts survive when the service or endpoint is still there.

        ``version`` moves to a whole table's version at its last page only: a gateway asks
        for the changes after it next, and they include any made while the pages were read
        (the pages' version was read before their routes: :mod:`controlplane.store.route_feed`)."""
        before = set(self._refs)
        if table.full:
            listed, listed_groups = self._listed, self._listed_groups
            if not table.continued or listed is None or listed_groups is None:  # it begins
                listed = self._listed = set()
                listed_groups = self._listed_groups = set()
            for route in table.routes:
                self._put(route, self._drop(route.service))
                listed.add(route.service)
            for group in table.groups:
                self._put_group(group, self.groups.get(group.group))
                listed_groups.add(group.group)
            if table.next_page is None:  # its last page
                for name in [name for name in self.services if name not in listed]:
                    self._drop(name)
                for name in [name for name in self.groups if name not in listed_groups]:
                    self._drop_group(name)
                self._listed = self._listed_groups = None
        else:
            for name in table.removed:
                self._drop(name)
            for route in table.routes:
                self._put(route, self._drop(route.service))
            for name in table.removed_groups:
                self._drop_group(name)
            for group in table.groups:
                self._put_group(group, self.groups.get(group.group))
        after = set(self._refs)
        change = RouteChange(table, frozenset(after - before), frozenset(before - after))
        if not (table.full and table.next_page is not None):
            self.version = table.version
        self.generation += 1
        self.updated_at = time.time()
        self.pool.forget(ep.base_url for ep in change.released)
        for listener in self.listeners:
            listener(change)

    def _forget_accepted(self, group: str) -> None:
        """A member came, went or changed its token: the group's last accepted credential
        may have been that member's, so the next call is checked again."""
        entry = self.groups.get(group)
        if entry is not None:
            entry.accepted = None

    def _put_group(self, route: GroupRoute, prev: GroupEntry | None) -> None:
        picker = prev.picker if prev is not None else SmoothWeighted()  # keeps its rhythm
        self._drop_group(route.group)  # a rotated token stops opening it
        entry = self.groups[route.group] = GroupEntry(
            route, digest_bytes(route.token_sha256), picker, key=_key(route.token)
        )
        self.group_by_digest[entry.digest] = route.group

    def _drop_group(self, name: str) -> None:
        entry = self.groups.pop(name, None)
        if entry is not None and self.group_by_digest.get(entry.digest) == name:
            del self.group_by_digest[entry.digest]

    def _drop(self, name: str) -> ServiceRoute | None:
        entry = self.services.pop(name, None)
        if entry is not None and entry.group is not None:
            self._forget_accepted(entry.group)
            members = self.members.get(entry.group)
            if members is not None:
                members.discard(name)
                if not members:
                    del self.members[entry.group]
        if entry is not None:
            if self.by_digest.get(entry.digest) == name:
                del self.by_digest[entry.digest]
            both = entry.endpoints + entry.grpc_endpoints
            self._refs.subtract(both)
            for endpoint in both:
                if self._refs[endpoint] <= 0:
                    del self._refs[endpoint]
        return entry

    def _put(self, route: Route, prev: ServiceRoute | None) -> None:
        bucket: TokenBucket | None = None
        if route.rate_limit is not None and route.rate_limit > 0:
            if (
                prev is not None
                and prev.bucket is not None
                and prev.bucket.rate == route.rate_limit
            ):
                bucket = prev.bucket
            else:
                bucket = TokenBucket(route.rate_limit)
        in_flight = None if prev is None else prev.admitted
        if in_flight is not None:
            in_flight.limit = route.max_queue_size if route.max_queue_size else None
        timeout_ms = route.timeout_ms if route.timeout_ms > 0 else self.default_timeout_ms
        timeout_s = self._timeouts.setdefault(timeout_ms, timeout_ms / 1000.0)
        endpoints = self.pool.resolve(route.endpoints) if route.endpoints else ()
        grpc_endpoints = self.pool.resolve(route.grpc_endpoints) if route.grpc_endpoints else ()
        self._refs.update(endpoints + grpc_endpoints)
        entry = ServiceRoute(
            route,
            endpoints=endpoints,
            grpc_endpoints=grpc_endpoints,
            timeout_s=timeout_s,
            bucket=bucket,
            in_flight=in_flight,
            mirror=MirrorState.of(route.mirror, prev.mirror if prev is not None else None),
        )
        self.by_digest[entry.digest] = entry.service
        if entry.group is not None:
            self.members.setdefault(entry.group, set()).add(entry.service)
            self._forget_accepted(entry.group)
        self.services[entry.service] = entry


def _key(token: str | None) -> SigningKey | None:
    return None if not token else SigningKey(token.encode("utf-8"))
