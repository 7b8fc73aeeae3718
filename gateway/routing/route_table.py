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

import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from contract.wire import GroupRoute, Route, RouteTable
from gateway.routing.auth import SigningKey, digest_bytes, token_digest_of
from gateway.routing.balancer import Endpoint, EndpointPool
from gateway.routing.limits import Activity, InFlight, OverLimit, TokenBucket
from gateway.routing.traffic import MirrorState, SmoothWeighted


@dataclass(slots=True)
class ServiceRoute:
    """One service as the proxy uses it: its wire route plus live admission state."""

    route: Route
    service: str  # route.service, read per call (the wire route is not compiled)
    digest: bytes
    endpoints: tuple[Endpoint, ...]
    timeout_s: float
    bucket: TokenBucket | None
    in_flight: InFlight
    mirror: MirrorState | None = None  # None for most services: one check on the hot path
    # The last Authorization value that passed, compared in constant time before hashing
    # (a hash per request cost more than the comparison). Never carried to a new table.
    # A signed call's value never goes here: each is checked in full (its Date and body).
    accepted: bytes | None = None
    key: SigningKey | None = None  # the token, which signed calls are checked with (or none)

    def take_place(self, activity: Activity, now: float) -> OverLimit | None:
        """Admit one call under the service's rate limit and in-flight bound (HTTP and gRPC
        alike), and mark the service busy for the load report: None, or why not. ``now``:
        ``time.monotonic()`` (the in-flight count's clock), read once by the caller."""
        bucket = self.bucket
        name = self.service
        if bucket is not None and not bucket.try_acquire():
            return OverLimit(
                f"service {name!r} is over its rate limit of {self.route.rate_limit} requests/s",
                bucket.retry_after_s(),
            )
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

    grpc_endpoints: tuple[Endpoint, ...] = ()  # the same replicas' gRPC ports


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

    def by_token(self, token: bytes) -> ServiceRoute | None:
        """The service whose token ``token`` is (one hash, one lookup)."""
        name = self.by_digest.get(token_digest_of(token))
        return None if name is None else self.services.get(name)

    def get(self, service: str) -> ServiceRoute | None:
        return self.services.get(service)

    def table(self) -> RouteTable | None:
        """The whole table in force (for the snapshot), None before the first one."""
        if self.version is None:
            return None
        return RouteTable(
            version=self.version,
            routes=[entry.route for entry in self.services.values()],
            groups=[entry.route for entry in self.groups.values()],
        )

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
        if entry is None or (dot and entry.route.group != group_name):
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
            if entry.route.grouping and ready:
                candidates[name] = (entry, len(ready) if auto else entry.route.weight)
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
            if self.services[name].route.grouping and self.services[name].route.wakeable
        ]
        return max(asleep, key=lambda e: e.route.weight, default=None)

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
        """Apply ``table``: a whole one replaces every route, changes replace and remove
        only theirs. Per-service counters (in flight, rate-limit bucket) and per-endpoint
        counts survive when the service or endpoint is still there."""
        before = set(self._refs)
        if table.full:
            old, self.services = self.services, {}
            old_groups, self.groups = self.groups, {}
            self._refs.clear()
            self.members.clear()
            self.by_digest.clear()
            self.group_by_digest.clear()
            for route in table.routes:
                self._put(route, old.get(route.service))
            for group in table.groups:
                self._put_group(group, old_groups.get(group.group))
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
        if entry is not None and entry.route.group is not None:
            self._forget_accepted(entry.route.group)
            members = self.members.get(entry.route.group)
            if members is not None:
                members.discard(name)
                if not members:
                    del self.members[entry.route.group]
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
        in_flight = prev.in_flight if prev is not None else InFlight()
        in_flight.limit = route.max_queue_size if route.max_queue_size else None
        timeout_ms = route.timeout_ms if route.timeout_ms > 0 else self.default_timeout_ms
        endpoints = self.pool.resolve(route.endpoints)
        grpc_endpoints = self.pool.resolve(route.grpc_endpoints)
        self._refs.update(endpoints + grpc_endpoints)
        digest = digest_bytes(route.token_sha256)
        self.by_digest[digest] = route.service
        if route.group is not None:
            self.members.setdefault(route.group, set()).add(route.service)
            self._forget_accepted(route.group)
        self.services[route.service] = ServiceRoute(
            route=route,
            service=route.service,
            digest=digest,
            endpoints=endpoints,
            timeout_s=timeout_ms / 1000.0,
            bucket=bucket,
            in_flight=in_flight,
            mirror=MirrorState.of(route.mirror, prev.mirror if prev is not None else None),
            grpc_endpoints=grpc_endpoints,
            key=_key(route.token),
        )


def _key(token: str | None) -> SigningKey | None:
    return None if not token else SigningKey(token.encode("utf-8"))
