"""Prometheus text exposition (format 0.0.4) for the gateway, written by hand: a handful
of counters, gauges and histograms updated on the request path, so each update is a dict
lookup and an add. Labels are service names and status codes only — never a token, a
path or anything a client chose freely (unknown services count under ``service=""``).

Every name starts ``openeas_gateway_``. A metric renamed into that prefix is also exposed
under its old name (``alias``) for one release, so dashboards and alerts can move over;
``GatewayMetrics().all`` is the registry the chart's dashboard and alerts are checked
against.
"""

from __future__ import annotations

import operator
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from contract.exposition import label_set, number

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

LabelValues = tuple[str, ...]

# Proxy latencies span sub-millisecond (small tensors) to seconds (big batches).
LATENCY_BUCKETS: tuple[float, ...] = (
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
)

# A cold start is a process start, maybe a model pull, and Triton loading: seconds to minutes.
COLD_START_BUCKETS: tuple[float, ...] = (
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    20.0,
    30.0,
    60.0,
    120.0,
    300.0,
    600.0,
)


class _Metric(ABC):
    kind = ""

    def __init__(self, name: str, help_text: str, labelnames: tuple[str, ...] = ()) -> None:
        self.name = name
        self.help = help_text
        self.labelnames = labelnames
        self.alias = ""  # a former name, rendered too until its release is over

    def header(self) -> list[str]:
        return [f"# HELP {self.name} {self.help}", f"# TYPE {self.name} {self.kind}"]

    @abstractmethod
    def samples(self) -> Iterable[str]:
        """The exposition lines of this metric's values."""

    @abstractmethod
    def snapshot(self) -> list[Any]:
        """The values as JSON-able data (what a sibling worker sends, see :meth:`merge`)."""

    @abstractmethod
    def merge(self, snapshot: list[Any]) -> None:
        """Fold another worker's :meth:`snapshot` into these values."""

    @abstractmethod
    def blank(self) -> _Metric:
        """The same metric with no values (to merge workers' snapshots into)."""


class Counter(_Metric):
    kind = "counter"

    def __init__(self, name: str, help_text: str, labelnames: tuple[str, ...] = ()) -> None:
        super().__init__(name, help_text, labelnames)
        self.values: dict[LabelValues, float] = {}
        self.combine: Callable[[float, float], float] = operator.add  # across workers

    def inc(self, labels: LabelValues = (), amount: float = 1.0) -> None:
        self.values[labels] = self.values.get(labels, 0.0) + amount

    def items(self) -> list[tuple[LabelValues, float]]:
        return list(self.values.items())

    def samples(self) -> Iterable[str]:
        for labels, value in sorted(self.items()):
            yield f"{self.name}{label_set(self.labelnames, labels)} {number(value)}"

    def snapshot(self) -> list[Any]:
        return [[list(labels), value] for labels, value in self.items()]

    def merge(self, snapshot: list[Any]) -> None:
        for labels, value in snapshot:
            key = tuple(labels)
            mine = self.values.get(key)
            self.values[key] = value if mine is None else self.combine(mine, value)

    def blank(self) -> Counter:
        out = Counter(self.name, self.help, self.labelnames)
        out.combine = self.combine
        return out


class Cell:
    """One series' value, held by whoever updates it per call (no label lookup then)."""

    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value = 0.0


def server_error(status: int) -> bool:
    """What the load report counts as a service's error (a 5xx answer)."""
    return 500 <= status < 600


class RequestCounter(Counter):
    """Answers by service and status code, plus each service's running total of 5xx answers,
    so the load report reads a service's errors without scanning every code. Values are
    :class:`Cell` objects a :class:`ServiceSeries` keeps by status code."""

    def __init__(self, name: str, help_text: str, labelnames: tuple[str, ...]) -> None:
        super().__init__(name, help_text, labelnames)
        self.errors: dict[str, int] = {}
        self.cells: dict[LabelValues, Cell] = {}

    def cell(self, labels: LabelValues) -> Cell:
        found = self.cells.get(labels)
        if found is None:
            found = self.cells[labels] = Cell()
        return found

    def inc(self, labels: LabelValues = (), amount: float = 1.0) -> None:
        self.cell(labels).value += amount
        if server_error(int(labels[1])):
            self.error(labels[0], int(amount))

    def error(self, service: str, n: int = 1) -> None:
        self.errors[service] = self.errors.get(service, 0) + n

    def items(self) -> list[tuple[LabelValues, float]]:
        return [(labels, cell.value) for labels, cell in self.cells.items()]

    def merge(self, snapshot: list[Any]) -> None:
        for labels, value in snapshot:
            self.cell(tuple(labels)).value += value

    def blank(self) -> RequestCounter:
        return RequestCounter(self.name, self.help, self.labelnames)


class Gauge(Counter):
    """Summed across workers (requests in flight), unless ``combine`` says otherwise
    (``min``: a table version or an up flag is only as good as the worst worker's)."""

    kind = "gauge"

    def __init__(
        self,
        name: str,
        help_text: str,
        labelnames: tuple[str, ...] = (),
        combine: Callable[[float, float], float] = operator.add,
    ) -> None:
        super().__init__(name, help_text, labelnames)
        self.combine = combine

    def set(self, labels: LabelValues, value: float) -> None:
        self.values[labels] = value

    def blank(self) -> Gauge:
        return Gauge(self.name, self.help, self.labelnames, self.combine)


class Tally:
    """A count as a native int (compiled): adding one makes no object, where an item of a
    list of ints past 256 is a new int at each increment, added by the generic protocol."""

    __slots__ = ("n",)

    def __init__(self) -> None:
        self.n = 0


class _HistogramChild:
    __slots__ = ("buckets", "sum", "tallies")

    def __init__(self, buckets: tuple[float, ...]) -> None:
        self.buckets = buckets
        # Last: above the largest bound (+Inf).
        self.tallies = [Tally() for _ in range(len(buckets) + 1)]
        self.sum = 0.0

    @property
    def counts(self) -> list[int]:
        """Observations per bucket (not cumulative)."""
        return [t.n for t in self.tallies]

    def observe(self, value: float) -> None:
        self.observe_in(self.bucket(value), value)

    def bucket(self, value: float) -> int:
        """The first bound not below ``value``, from the smallest: predict calls mostly land
        in the first buckets, where this takes one or two comparisons (a bisection, four)."""
        bounds = self.buckets
        n = len(bounds)
        i = 0
        while i < n and bounds[i] < value:
            i += 1
        return i

    def observe_in(self, i: int, value: float) -> None:
        """``value``, known to fall in bucket ``i``."""
        self.tallies[i].n += 1
        self.sum += value


class Histogram(_Metric):
    kind = "histogram"

    def __init__(
        self,
        name: str,
        help_text: str,
        labelnames: tuple[str, ...] = (),
        buckets: tuple[float, ...] = LATENCY_BUCKETS,
    ) -> None:
        super().__init__(name, help_text, labelnames)
        self.buckets = tuple(sorted(buckets))
        self.children: dict[LabelValues, _HistogramChild] = {}

    def observe(self, labels: LabelValues, value: float) -> None:
        self.child(labels).observe(value)

    def child(self, labels: LabelValues) -> _HistogramChild:
        """The series of ``labels`` (kept: observing it directly skips the lookup)."""
        child = self.children.get(labels)
        if child is None:
            child = self.children[labels] = _HistogramChild(self.buckets)
        return child

    def samples(self) -> Iterable[str]:
        for labels, child in sorted(self.children.items()):
            cumulative = 0
            counts = child.counts
            for bound, count in zip(self.buckets, counts, strict=False):
                cumulative += count
                le = f'le="{number(bound)}"'
                yield f"{self.name}_bucket{label_set(self.labelnames, labels, le)} {cumulative}"
            cumulative += counts[-1]
            inf = 'le="+Inf"'
            yield f"{self.name}_bucket{label_set(self.labelnames, labels, inf)} {cumulative}"
            yield f"{self.name}_sum{label_set(self.labelnames, labels)} {number(child.sum)}"
            yield f"{self.name}_count{label_set(self.labelnames, labels)} {cumulative}"

    def snapshot(self) -> list[Any]:
        return [[list(labels), c.counts, c.sum] for labels, c in self.children.items()]

    def merge(self, snapshot: list[Any]) -> None:
        for labels, counts, total in snapshot:
            child = self.child(tuple(labels))
            if len(counts) != len(child.tallies):
                raise ValueError(f"{self.name}: a worker has other buckets")
            for tally, count in zip(child.tallies, counts, strict=True):
                tally.n += count
            child.sum += total

    def blank(self) -> Histogram:
        return Histogram(self.name, self.help, self.labelnames, self.buckets)


class ServiceSeries:
    """One service's series of the metrics every predict call updates, found once per call
    by the service's name instead of by three label tuples built, hashed and compared."""

    __slots__ = (
        "_codes",
        "_last_cell",
        "_last_status",
        "_requests",
        "_same_buckets",
        "duration",
        "name",
        "upstream_duration",
    )

    def __init__(self, metrics: GatewayMetrics, name: str) -> None:
        self.name = name
        self.duration = metrics.duration.child((name,))
        self.upstream_duration = metrics.upstream_duration.child((name,))
        self._same_buckets = self.duration.buckets == self.upstream_duration.buckets
        self._requests = metrics.requests
        self._codes: dict[int, Cell] = {}  # status → its count
        # The last status's count, before the dict: a service answers mostly one status.
        self._last_status = 0
        self._last_cell: Cell | None = None

    def relayed(self, status: int, took: float) -> None:
        """A call answered by a replica in ``took`` seconds, which is also its time upstream
        (the fast path sends it when it is admitted): both histograms, found in one search."""
        duration, upstream = self.duration, self.upstream_duration
        if self._same_buckets:
            i = duration.bucket(took)
            duration.observe_in(i, took)
            upstream.observe_in(i, took)
        else:
            duration.observe(took)
            upstream.observe(took)
        self.answered(status)

    def answered(self, status: int) -> None:
        cell = self._last_cell
        if cell is None or status != self._last_status:
            cell = self._codes.get(status)
            if cell is None:
                cell = self._codes[status] = self._requests.cell((self.name, str(status)))
            self._last_status, self._last_cell = status, cell
        cell.value += 1.0
        if server_error(status):
            self._requests.error(self.name)


class GatewayMetrics:
    """Every metric the gateway exports; one instance per gateway app."""

    def __init__(self) -> None:
        self._series: dict[str, ServiceSeries] = {}
        # The last name asked for and its series, before the dict: compared by identity
        # (the proxy passes its route entry's string, the same object call after call).
        self._last_name = ""
        self._last_series: ServiceSeries | None = None
        p = "openeas_gateway_"
        self.requests = RequestCounter(
            p + "requests_total",
            "Predict requests answered, by service and status code.",
            ("service", "code"),
        )
        self.duration = Histogram(
            p + "request_duration_seconds",
            "Predict request latency as seen by the gateway, headers in to last byte out.",
            ("service",),
        )
        self.upstream_duration = Histogram(
            p + "upstream_duration_seconds",
            "Time from sending a request to a replica to the end of its response.",
            ("service",),
        )
        self.in_flight = Gauge(
            p + "in_flight_requests", "Predict requests being forwarded now.", ("service",)
        )
        self.upstream_errors = Counter(
            p + "upstream_errors_total",
            "Replica failures: connect (refused, skipped to another), timeout, broken.",
            ("service", "kind"),
        )
        self.grpc_requests = Counter(
            p + "grpc_requests_total",
            "gRPC calls answered (a stream counts once), by service and gRPC status code.",
            ("service", "code"),
        )
        self.grpc_duration = Histogram(
            p + "grpc_request_duration_seconds",
            "gRPC call latency as seen by the gateway, call start to status sent.",
            ("service",),
        )
        self.route_version = Gauge(
            p + "route_table_version", "Version of the route table in use.", combine=min
        )
        self.control_plane_up = Gauge(
            p + "control_plane_up",
            "1 when the last route sync with the control plane worked.",
            combine=min,
        )
        self.mirror_requests = Counter(
            p + "mirror_requests_total",
            "Mirrored requests by service, target and result: match, mismatch (status or "
            "answer differs), error (no ready replica, refused, timed out, broke), skipped "
            "(streamed body, primary failed or answer over the copy limit, too many in flight).",
            ("service", "target", "result"),
        )
        self.mirror_duration = Histogram(
            p + "mirror_duration_seconds",
            "Shadow latency: request sent to a target's replica to the end of its answer.",
            ("service", "target"),
        )
        self.cold_start = Histogram(
            p + "cold_start_seconds",
            "Wake-ups of services scaled to zero: from the first request held to its release "
            "to a ready replica.",
            ("service",),
            COLD_START_BUCKETS,
        )
        q = p + "queue_"  # async services' queues (gateway.queue)
        self.queue_puts = Counter(
            q + "puts_total",
            "Entries put, by service and queue (input, sink).",
            ("service", "queue"),
        )
        self.queue_gets = Counter(
            q + "gets_total",
            "Entries returned by get and pushed by watches, by service and queue.",
            ("service", "queue"),
        )
        self.queue_answered = Counter(
            q + "answered_total",
            "Input messages answered into the sink by a replica.",
            ("service",),
        )
        self.queue_redelivered = Counter(
            q + "redelivered_total",
            "Input messages taken over from a replica that failed, left or held them too long.",
            ("service",),
        )
        self.queue_dead_lettered = Counter(
            q + "dead_lettered_total",
            "Input messages moved to the dead-letter stream after max_delivery deliveries.",
            ("service",),
        )
        # Read from Redis by this process's consumers (one value for the whole gateway).
        self.queue_length = Gauge(
            q + "length", "Entries in a queue, by service and queue.", ("service", "queue"), max
        )
        self.queue_pending = Gauge(
            q + "pending", "Input messages held by replicas now.", ("service",), max
        )
        # Their names before the prefix: kept for one release (0.2 drops them).
        self.mirror_requests.alias = "openeas_mirror_requests_total"
        self.mirror_duration.alias = "openeas_mirror_duration_seconds"
        self.cold_start.alias = "openeas_cold_start_seconds"
        self.all: tuple[_Metric, ...] = (
            self.requests,
            self.duration,
            self.upstream_duration,
            self.in_flight,
            self.upstream_errors,
            self.grpc_requests,
            self.grpc_duration,
            self.route_version,
            self.control_plane_up,
            self.mirror_requests,
            self.mirror_duration,
            self.cold_start,
            self.queue_puts,
            self.queue_gets,
            self.queue_answered,
            self.queue_redelivered,
            self.queue_dead_lettered,
            self.queue_length,
            self.queue_pending,
        )
        for metric in self.all:
            if metric.name.startswith(q):
                metric.alias = metric.name.replace(p, "openeas_", 1)

    def series(self, service: str) -> ServiceSeries:
        """``service``'s per-call series (as many as there are label values already)."""
        last = self._last_series
        if last is not None and service is self._last_name:
            return last
        found = self._series.get(service)
        if found is None:
            found = self._series[service] = ServiceSeries(self, service)
        self._last_name, self._last_series = service, found
        return found

    def snapshot(self) -> dict[str, list[Any]]:
        return {metric.name: metric.snapshot() for metric in self.all}

    def render(self, others: Iterable[Mapping[str, list[Any]]] = ()) -> bytes:
        """The exposition of these values, plus those of ``others`` (sibling workers'
        :meth:`snapshot`, so a scrape of any worker shows the whole gateway)."""
        metrics: Iterable[_Metric] = self.all
        others = list(others)
        if others:
            metrics = []
            for mine in self.all:
                metric = mine.blank()
                metric.merge(mine.snapshot())
                for snapshot in others:
                    metric.merge(snapshot.get(mine.name, []))
                metrics.append(metric)
        lines: list[str] = []
        for mine, metric in zip(self.all, metrics, strict=True):
            block = [*metric.header(), *metric.samples()]
            lines.extend(block)
            if mine.alias:
                # Each line names the metric once, first (after "# HELP " / "# TYPE ").
                lines.extend(line.replace(metric.name, mine.alias, 1) for line in block)
        return ("\n".join(lines) + "\n").encode("utf-8")
