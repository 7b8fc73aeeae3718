"""The last hour of each service's traffic, for the console's charts: requests/s, errors/s,
p50/p99 latency, ready replicas and (async services) the queue's backlog, one point per
``STEP_S`` seconds.

Fed by the gateways' load reports (:meth:`MetricsHistory.add`, from the ``SIGNALS_PATH``
handler of the leading control plane) and by the reconciler's observations
(:meth:`MetricsHistory.replicas`); read by ``GET /api/v2/services/{cluster}/{name}/metrics``.
Memory only and bounded: at most ``POINTS`` points per service, and only services that had
traffic or a replica change within the hour are held (about 100 KB each); nothing runs
on a timer. Latency is merged as histograms while a point is open (several gateways report
into it) and reduced to its quantiles when the next point opens.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import islice

from contract.wire import LoadReport

STEP_S = 10
POINTS = 360  # one hour


@dataclass(slots=True)
class _Point:
    step: int  # time // STEP_S
    requests: int = 0  # admitted
    completed: int = 0
    errors: int = 0
    replicas: int | None = None  # last observed in this step
    backlog: int | None = None  # an async service's messages not yet answered, last read
    counts: list[int] = field(default_factory=list)  # latency histogram while open
    bounds: tuple[float, ...] = ()
    p50: float | None = None  # seconds, once closed
    p99: float | None = None

    def close(self) -> None:
        if self.counts:
            self.p50 = quantile(0.5, self.bounds, self.counts)
            self.p99 = quantile(0.99, self.bounds, self.counts)
        self.counts, self.bounds = [], ()  # a closed point keeps a few numbers only


@dataclass(frozen=True, slots=True)
class Sample:
    """One point as the API answers it (rates per second over the step)."""

    time: float  # start of the step, Unix seconds
    requests_per_s: float
    errors_per_s: float
    p50_ms: float | None
    p99_ms: float | None
    replicas: int | None
    backlog: int | None = None  # None: not an async service, or not read in this step


def quantile(q: float, bounds: tuple[float, ...], counts: list[int]) -> float | None:
    """The ``q`` quantile of a histogram (``counts[i]`` at most ``bounds[i]``, the last count
    above every bound), interpolated linearly inside its bucket as Prometheus does; a value
    in the overflow bucket reads as the largest bound."""
    total = sum(counts)
    if total == 0 or not bounds:
        return None
    rank = q * total
    seen = 0
    for i, count in enumerate(counts):
        if count and seen + count >= rank:
            if i >= len(bounds):
                return bounds[-1]
            low = bounds[i - 1] if i else 0.0
            return low + (bounds[i] - low) * (rank - seen) / count
        seen += count
    return bounds[-1]


class MetricsHistory:
    def __init__(self, *, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        self._series: dict[str, deque[_Point]] = {}

    def _point(self, service: str) -> _Point:
        step = int(self._clock() // STEP_S)
        series = self._series.get(service)
        if series is not None and series and series[-1].step == step:
            return series[-1]
        if series is None:
            series = deque(maxlen=POINTS)
        else:
            del self._series[service]  # re-inserted last: the dict stays in order of use
            if series:
                series[-1].close()
        self._drop_stale(step)
        self._series[service] = series
        point = _Point(step)
        series.append(point)
        return point

    def _drop_stale(self, step: int) -> None:
        """Free the least recently used series while it is over an hour old (a few per new
        point at most, so forgetting costs nothing on a timer)."""
        for name in list(islice(self._series, 2)):
            series = self._series[name]
            if series and series[-1].step < step - POINTS:
                del self._series[name]

    def add(self, report: LoadReport) -> None:
        bounds = tuple(report.latency_bounds_s)
        for load in report.services:
            if not (load.requests or load.completed or load.errors):
                continue
            point = self._point(load.service)
            point.requests += load.requests
            point.completed += load.completed
            point.errors += load.errors
            if len(load.latency) != len(bounds) + 1 or not bounds:
                continue  # no histogram, or one that does not fit its bounds
            if not point.counts or point.bounds != bounds:
                point.counts, point.bounds = [0] * len(load.latency), bounds
            point.counts = [a + b for a, b in zip(point.counts, load.latency, strict=True)]

    def replicas(self, service: str, ready: int) -> None:
        """The ready replicas the reconciler just observed (kept only when it changed)."""
        if self.last_replicas(service) != ready:
            self._point(service).replicas = ready

    def backlog(self, service: str, pending: int) -> None:
        """An async service's backlog as the autoscaler just read it (the step keeps the
        last reading; a step without one reads as unknown)."""
        self._point(service).backlog = pending

    def last_replicas(self, service: str) -> int | None:
        for point in reversed(self._series.get(service, ())):
            if point.replicas is not None:
                return point.replicas
        return None

    def forget(self, service: str) -> None:
        self._series.pop(service, None)

    def samples(self, service: str, window_s: int, replicas_now: int) -> list[Sample]:
        """One sample per step over the last ``window_s`` seconds, oldest first; steps
        without reports read as zero traffic, and replicas carry forward from the last
        change (``replicas_now`` before any is known). The step in progress is included,
        its rates over the time it has run."""
        now = self._clock()
        current = int(now // STEP_S)
        first = current - min(window_s // STEP_S, POINTS) + 1
        series = self._series.get(service) or deque()
        points = {p.step: p for p in series}
        known = [(p.step, p.replicas) for p in series if p.replicas is not None]
        replicas: int | None = replicas_now
        if known:  # the last change before the window; unknown if it changed within only
            prior = [r for s, r in known if s < first]
            replicas = prior[-1] if prior else None
        out = []
        for step in range(first, current + 1):
            point = points.get(step)
            seconds = STEP_S if step < current else max(1.0, now - step * STEP_S)
            if point is not None and point.replicas is not None:
                replicas = point.replicas
            p50 = p99 = None
            if point is not None:
                if point.counts:  # still open
                    p50 = quantile(0.5, point.bounds, point.counts)
                    p99 = quantile(0.99, point.bounds, point.counts)
                else:
                    p50, p99 = point.p50, point.p99
            out.append(
                Sample(
                    time=float(step * STEP_S),
                    requests_per_s=(point.completed or point.requests) / seconds if point else 0.0,
                    errors_per_s=point.errors / seconds if point else 0.0,
                    p50_ms=None if p50 is None else p50 * 1000,
                    p99_ms=None if p99 is None else p99 * 1000,
                    replicas=replicas,
                    backlog=point.backlog if point is not None else None,
                )
            )
        return out
