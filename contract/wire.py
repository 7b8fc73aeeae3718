"""Wire types shared by the control plane and the gateway.

The control plane publishes the route table at ``GET /internal/v1/routes``; the gateway
long-polls it and swaps its in-memory table. Neither server imports the other: this module
is the whole contract between them, so keep it small and dependency-light.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

ROUTES_PATH = "/internal/v1/routes"
SIGNALS_PATH = "/internal/v1/signals"
WAKE_PATH = "/internal/v1/wake"


def token_digest(token: str) -> str:
    """SHA-256 hex digest of a service token: what is stored for checking, and what the
    gateway compares a presented token with."""
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


class MirrorRoute(BaseModel):
    """A service's mirror: ``ratio`` % of its requests are also sent to each of ``targets``
    (other services) after the primary answered, and the answers compared — byte-equal, or
    output tensors within the absolute ``tolerance``."""

    model_config = ConfigDict(frozen=True)

    ratio: int  # 1..100
    targets: list[str]
    tolerance: float | None = None


class QueueRoute(BaseModel):
    """An async service's queues as the gateway serves them (EAS's queue protocol at
    ``/api/predict/<svc>`` and ``…/sink``) and consumes them for its replicas: each ready
    replica is handed at most ``window`` input messages at once; ``default_path`` is where a
    put to the bare service path goes on the replica."""

    model_config = ConfigDict(frozen=True)

    source_max_length: int
    source_max_payload_bytes: int
    source_auto_evict: bool = False
    sink_max_length: int
    sink_max_payload_bytes: int
    sink_auto_evict: bool = False
    max_delivery: int
    window: int
    default_path: str = "/"


class Route(BaseModel):
    """One service as the gateway needs it."""

    model_config = ConfigDict(frozen=True)

    service: str
    token_sha256: str
    # The token itself: the key of EAS's signed predict calls (HMAC-SHA1, which needs it).
    # None from a control plane that predates them (signed calls are then refused); never
    # in a repr, nor in the gateway's snapshot on disk.
    token: str | None = Field(default=None, repr=False)
    endpoints: list[str]  # base URLs of ready replicas, e.g. "http://127.0.0.1:41233"
    # The same replicas' gRPC ports, as http:// base URLs (cleartext HTTP/2); empty from a
    # control plane that predates gRPC, so an old peer's table still parses.
    grpc_endpoints: list[str] = []
    timeout_ms: int  # upstream timeout (metadata.rpc.keepalive or the platform default)
    rate_limit: int | None = None  # requests per second, None = unlimited
    max_queue_size: int | None = None  # in-flight requests per service, None = unlimited
    status: str  # service status, for the gateway's 503 detail
    group: str | None = None  # the group it is a member of
    weight: int = 100  # its share in a "customized" group
    grouping: bool = False  # takes group traffic (else standalone: its own endpoint only)
    mirror: MirrorRoute | None = None  # shadows of its traffic, compared with its answers
    # At zero replicas by its autoscaler (min 0): the gateway holds its requests and asks
    # WAKE_PATH for a replica instead of answering 503. False from peers that predate it.
    wakeable: bool = False
    # An async service's queues (None: a synchronous one; also from peers that predate it).
    queue: QueueRoute | None = None


class GroupRoute(BaseModel):
    """A service group's own routing: its token and how it splits traffic between the
    members (routes whose ``group`` names it and that are ``grouping``)."""

    model_config = ConfigDict(frozen=True)

    group: str
    token_sha256: str
    token: str | None = Field(default=None, repr=False)  # as Route.token
    traffic_mode: Literal["auto", "customized"]  # by running replicas | by weights


class RouteTable(BaseModel):
    """The table at one version, whole (``full``) or as the changes after the version the
    watcher passed as ``?after=``: ``routes`` replace those services' routes and ``removed``
    services are gone. ``version`` only grows; a watcher gets an answer when a newer one
    exists, and a whole table when it has none yet or is too far behind."""

    # Its strings are unique per route (names, tokens): a parse caches keys only, or the
    # parser's process-wide cache would hold thousands of tokens alive.
    model_config = ConfigDict(cache_strings="keys")

    version: int
    routes: list[Route]
    full: bool = True
    removed: list[str] = []
    groups: list[GroupRoute] = []  # whole, or those changed
    removed_groups: list[str] = []
    # A whole table asked for in pages (``?page_size=``) comes in pages: each but the last
    # names the next (passed back as ``?page=``), those after the first are ``continued``
    # (groups come with the first). Every page carries the first page's version, read
    # before any page's routes: the changes after it cover what changed between pages.
    next_page: str | None = None
    continued: bool = False


# A whole table as the route snapshots hold it: one JSON document (any JSON reader, and
# RouteTable.model_validate_json, parse it whole), laid out a route per line so a reader
# can take it a line at a time (gateway/table_lines.py):
#
#   {"version":N,"full":true,"routes":[     TABLE_HEAD
#   {route}                                  the first route
#   ,{route}                                 each next one: ITEM_SEPARATOR, then the route
#   ],"groups":[                             ROUTES_END
#   {group}                                  the groups alike
#   ,{group}
#   ]}                                       TABLE_END
#
# Every line ends with a newline, the last one too; a route or group is its compact JSON
# (never a raw newline: JSON escapes those in strings), without its token.
TABLE_HEAD = b'{"version":%d,"full":true,"routes":[\n'
ITEM_SEPARATOR = b","
ROUTES_END = b'],"groups":[\n'
TABLE_END = b"]}\n"


def whole_table_json(
    version: int, routes: Iterable[Route], groups: Iterable[GroupRoute]
) -> Iterator[bytes]:
    """A whole :class:`RouteTable`'s JSON in the layout above, a line (a route) at a time,
    tokens left out: the route snapshots (a gateway's file, the control plane's ConfigMap),
    written without the whole table in memory as wire routes at once."""
    yield TABLE_HEAD % version
    yield from _lines(routes)
    yield ROUTES_END
    yield from _lines(groups)
    yield TABLE_END


def _lines(items: Iterable[Route | GroupRoute]) -> Iterator[bytes]:
    for i, item in enumerate(items):
        body = item.model_dump_json(exclude=_NO_TOKEN).encode()
        yield (ITEM_SEPARATOR if i else b"") + body + b"\n"


_NO_TOKEN = {"token"}


class ServiceLoad(BaseModel):
    """One service's traffic through one gateway process during one report interval."""

    model_config = ConfigDict(extra="forbid")

    service: str = Field(max_length=63)
    requests: int = Field(ge=0)  # admitted during the interval
    concurrency: float = Field(ge=0)  # mean in-flight requests over the interval
    # For the console's charts (defaulted: a gateway that does not send them still parses).
    completed: int = Field(default=0, ge=0)  # answered during the interval
    errors: int = Field(default=0, ge=0)  # of those, answered with a 5xx
    # Answered requests per latency bucket: counts[i] took at most the report's
    # ``latency_bounds_s[i]``; the last count is above the largest bound.
    latency: list[Annotated[int, Field(ge=0)]] = Field(default=[], max_length=64)


class WakeRequest(BaseModel):
    """What a gateway posts to ``WAKE_PATH`` (with its route-reader credential) when it
    holds requests for a service at zero: once per service per wake-up, not per request."""

    model_config = ConfigDict(extra="forbid")

    service: str = Field(min_length=1, max_length=63)


class WakeAnswer(BaseModel):
    """The instance count the service now has asked for (its replicas follow)."""

    service: str
    instances: int


class LoadReport(BaseModel):
    """What a gateway process pushes to ``SIGNALS_PATH`` every ``interval_s``: the services
    with traffic, plus once with zeros those that just went quiet. ``reporter`` is random
    per process, so the control plane sums the workers and expires a silent one."""

    model_config = ConfigDict(extra="forbid")

    reporter: str = Field(min_length=1, max_length=64)
    interval_s: float = Field(gt=0, le=60)
    services: list[ServiceLoad] = Field(max_length=100_000)
    # Upper bounds of the latency buckets, ascending.
    latency_bounds_s: list[Annotated[float, Field(gt=0, allow_inf_nan=False)]] = Field(
        default=[], max_length=63
    )
