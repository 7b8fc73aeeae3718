"""The control plane's own Prometheus metrics, every name prefixed ``openeas_controlplane_``.

Who updates them: the API's middleware (latency by route template, method and code), the
reconciler (one observation per service reconciled), the autoscaler (one count per scale it
wrote). Who reads them: ``GET /metrics`` of ``openeas controlplane``, and ``openeas up``'s
public ``/metrics`` after the gateway's series. What the database and the leader know (services
by status, replicas desired and running, the route table's version, leadership, the work
queue's depth) is read when scraped, through :class:`Probe`, never kept here.

Labels are route templates, methods, codes, statuses and service names: never a token, a
concrete path or anything a caller chose freely. :data:`NAMES` is the registry the chart's
dashboard and alerts are checked against.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from contract.exposition import label_set, number

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
PREFIX = "openeas_controlplane_"

# API calls answer in milliseconds; the gateway's route watch is a long-poll of up to a minute.
API_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
# One service's reconcile: a database read, runtime calls (Kubernetes API), a status write.
RECONCILE_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)

Labels = tuple[str, ...]


@dataclass
class Metric:
    """One metric family: its values by label values (a histogram's are bucket counts)."""

    name: str
    help: str
    kind: str  # counter, gauge, histogram
    labelnames: Labels = ()
    buckets: tuple[float, ...] = ()
    values: dict[Labels, float] = field(default_factory=dict)
    hist: dict[Labels, tuple[list[int], list[float]]] = field(default_factory=dict)

    def inc(self, labels: Labels = (), amount: float = 1.0) -> None:
        self.values[labels] = self.values.get(labels, 0.0) + amount

    def set(self, labels: Labels, value: float) -> None:
        self.values[labels] = value

    def observe(self, labels: Labels, value: float) -> None:
        counts, total = self.hist.setdefault(labels, ([0] * (len(self.buckets) + 1), [0.0]))
        i = 0
        while i < len(self.buckets) and self.buckets[i] < value:
            i += 1
        counts[i] += 1
        total[0] += value

    def render(self) -> list[str]:
        lines = [f"# HELP {self.name} {self.help}", f"# TYPE {self.name} {self.kind}"]
        for labels, value in sorted(self.values.items()):
            lines.append(f"{self.name}{label_set(self.labelnames, labels)} {number(value)}")
        for labels, (counts, total) in sorted(self.hist.items()):
            cumulative = 0
            for bound, count in zip((*self.buckets, float("inf")), counts, strict=True):
                cumulative += count
                le = f'le="{number(bound)}"'
                lines.append(
                    f"{self.name}_bucket{label_set(self.labelnames, labels, le)} {cumulative}"
                )
            lines.append(f"{self.name}_sum{label_set(self.labelnames, labels)} {number(total[0])}")
            lines.append(f"{self.name}_count{label_set(self.labelnames, labels)} {cumulative}")
        return lines


@dataclass(frozen=True)
class ServiceRow:
    """What a scrape reads of one service (see :class:`Probe`)."""

    name: str
    status: str
    desired: int
    running: int


@dataclass
class Probe:
    """Where a scrape reads what is not counted here; each part may be absent (an API-only
    process has no reconciler; a test may have no database)."""

    services: Callable[[], Awaitable[list[ServiceRow]]] | None = None
    route_version: Callable[[], Awaitable[int]] | None = None
    leading: Callable[[], bool] | None = None
    queue_depth: Callable[[], int] | None = None


class ControlPlaneMetrics:
    """Every metric the control plane exports; one instance per control-plane process."""

    def __init__(self) -> None:
        p = PREFIX
        self.api_duration = Metric(
            p + "api_request_duration_seconds",
            "API requests by route template, method and status code: arrival to response end.",
            "histogram",
            ("route", "method", "code"),
            API_BUCKETS,
        )
        self.reconcile_duration = Metric(
            p + "reconcile_duration_seconds",
            "One service's reconcile, by result: ok, retry (temporary error), error (a bug).",
            "histogram",
            ("result",),
            RECONCILE_BUCKETS,
        )
        self.queue_depth = Metric(
            p + "reconcile_queue_depth", "Services waiting to be reconciled.", "gauge"
        )
        self.leader = Metric(
            p + "leader", "1 while this process holds the reconciler's lease.", "gauge"
        )
        self.services = Metric(
            p + "services",
            "Services by status (every service of this cluster).",
            "gauge",
            ("status",),
        )
        self.replicas = Metric(
            p + "service_replicas",
            "A service's replicas: desired (asked for) and running (ready).",
            "gauge",
            ("service", "state"),
        )
        self.route_version = Metric(
            p + "route_table_version",
            "The route table's version in the database (a gateway behind it is stale).",
            "gauge",
        )
        self.decisions = Metric(
            p + "autoscaler_decisions_total",
            "Scales the autoscaler wrote, by service, direction (up, down) and reason "
            "(Autoscaled, Woken).",
            "counter",
            ("service", "direction", "reason"),
        )
        self.scrape_errors = Metric(
            p + "scrape_errors_total",
            "Scrapes whose database read failed (its series are left out of that scrape).",
            "counter",
        )
        self.all: tuple[Metric, ...] = (
            self.api_duration,
            self.reconcile_duration,
            self.queue_depth,
            self.leader,
            self.services,
            self.replicas,
            self.route_version,
            self.decisions,
            self.scrape_errors,
        )
        self.probe = Probe()

    def decided(self, service: str, before: int, after: int, reason: str) -> None:
        """The autoscaler wrote ``after`` instances where there were ``before``."""
        self.decisions.inc((service, "up" if after > before else "down", reason))

    async def render(self) -> bytes:
        """The exposition, after reading the probe's parts."""
        probe = self.probe
        self.leader.values = {(): 1.0 if probe.leading is not None and probe.leading() else 0.0}
        if probe.queue_depth is not None:
            self.queue_depth.set((), float(probe.queue_depth()))
        try:
            if probe.services is not None:
                rows = await probe.services()
                self.services.values = by_status(rows)
                self.replicas.values = {
                    key: value
                    for row in rows
                    for key, value in (
                        ((row.name, "desired"), float(row.desired)),
                        ((row.name, "running"), float(row.running)),
                    )
                }
            if probe.route_version is not None:
                self.route_version.set((), float(await probe.route_version()))
        except Exception:  # the database away: the counted series still answer
            self.scrape_errors.inc()
        lines: list[str] = []
        for metric in self.all:
            lines.extend(metric.render())
        return ("\n".join(lines) + "\n").encode("utf-8")


# Every status a service can have (controlplane.reconcile.status), so each shows, at 0 when
# none has it.
STATUSES = ("Creating", "Waiting", "Running", "Updating", "Stopped", "Failed", "Deleting")


def by_status(rows: Iterable[ServiceRow]) -> dict[Labels, float]:
    counts: dict[Labels, float] = {(s,): 0.0 for s in STATUSES}
    for row in rows:
        counts[(row.status,)] = counts.get((row.status,), 0.0) + 1.0
    return counts


def names() -> frozenset[str]:
    """Every series name the control plane can expose (histograms by their three parts)."""
    out: set[str] = set()
    for metric in ControlPlaneMetrics().all:
        if metric.kind == "histogram":
            out.update(metric.name + s for s in ("_bucket", "_sum", "_count"))
        else:
            out.add(metric.name)
    return frozenset(out)


NAMES = names()


class ApiTimer:
    """ASGI middleware: each HTTP request's latency under its route template (``other``
    when no route matched, so unknown paths add no series)."""

    def __init__(self, app: Any, metrics: ControlPlaneMetrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Mapping[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.monotonic()
        code = 500  # unless a response starts

        async def sending(message: Mapping[str, Any]) -> None:
            nonlocal code
            if message["type"] == "http.response.start":
                code = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            route = scope.get("route")
            template = str(getattr(route, "path", "other")) if route is not None else "other"
            self.metrics.api_duration.observe(
                (template, str(scope.get("method", "")), str(code)), time.monotonic() - started
            )
