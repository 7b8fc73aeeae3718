"""The autoscaler as the leading reconciler runs it: which services have an autoscaler,
their recent recommendations, and the loop that decides and scales.

The reconciler hands every service it reconciles to :meth:`Autoscaling.observe` (so specs
are known without a query of their own) and runs :meth:`Autoscaling.run` while it leads.
Gateway reports (:class:`controlplane.elasticity.load_reports.LoadReports`) wake the loop
for the services they name; between reports it re-evaluates only autoscaled services that
have load or are above their minimum (a scale-down waits out its window). Idle services at
their minimum cost nothing. A decision is written by :meth:`Services.autoscale` — the manual
scale's write, with an ``Autoscaled`` event saying why — and the reconciler follows the new
generation on either runtime. State here is memory only: a new leader starts the windows
afresh.

Scale to zero: a service with ``min: 0`` is watched while it has replicas (so the grace
period can run out) and costs nothing at zero. A gateway holding requests for it calls
:meth:`Autoscaling.wake` (``WAKE_PATH``), which writes ``scaleUpActivationReplicas`` through
the same write at once and restarts the grace period; the first replica ready after it
closes a :class:`~controlplane.elasticity.coldstart.ColdStart` with a ``ColdStart`` event.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import aiohttp
from sqlalchemy.orm import Session, sessionmaker

from controlplane.elasticity.coldstart import ColdStart
from controlplane.elasticity.load_reports import LoadReports
from controlplane.elasticity.queues import Backlog
from controlplane.elasticity.scaling_decision import History, decide
from controlplane.elasticity.triton_metrics import QueueTimes
from controlplane.metrics import ControlPlaneMetrics
from controlplane.model.spec import BACKLOG, Autoscaler
from controlplane.model.states import ServiceState
from controlplane.runtime.base import CpuSource, Observation, Runtime, RuntimeError_
from controlplane.store import queries
from controlplane.store.services import Services

log = logging.getLogger(__name__)


@dataclass
class Tracked:
    autoscaler: Autoscaler
    instances: int
    stopped: bool
    history: History
    cpu_request: int = 1  # cores per replica (metadata.cpu), what cpu % is of
    metrics_urls: tuple[str, ...] = ()  # ready replicas' metrics ports
    ready: int | None = None  # ready replicas as last observed (None: not yet)
    values: dict[str, float] = field(default_factory=dict)
    last_decision: str = ""
    last_decision_at: str = ""
    last_active: float = 0.0  # the last request or wake-up seen (min 0: the grace period)
    generation: int = 0  # of the spec last seen or written here (older reads are stale)
    cold: ColdStart | None = None  # on its way from zero
    # Held from a decision to its write's end, so a wake-up and a tick never decide on the
    # same count; a read the reconciler hands in meanwhile waits for the write (``stashed``).
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    stashed: ServiceState | None = None
    is_async: bool = False  # its backlog is read (queue[backlog], and idle only when empty)


class NotWakeable(Exception):
    """The service does not scale to zero (no autoscaler with min 0), is stopped or gone."""


class Autoscaling:
    def __init__(
        self,
        sessions: sessionmaker[Session],
        services: Services,
        *,
        tick_s: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
        metrics: ControlPlaneMetrics | None = None,
        backlog: Backlog | None = None,
    ) -> None:
        self.backlog = backlog  # async services' queues (None: no Redis configured)
        self._sessions = sessions
        self.metrics = metrics  # counts each scale written
        self.services = services  # whose scale-write the decisions go through
        self.cluster = services.cluster
        self.signals = LoadReports(clock=clock)
        self.signals.listeners.append(self._on_report)
        self.tick_s = tick_s
        self._clock = clock
        self._tracked: dict[str, Tracked] = {}
        self._plain: set[str] = set()  # services known to have no autoscaler
        self._due: set[str] = set()
        self._wake: asyncio.Event | None = None
        self._queue_times: QueueTimes | None = None
        self._cpu: CpuSource | None = None
        self._cpu_read: dict[str, tuple[float, float | None]] = {}  # service → (at, %)

    # -- what the reconciler and the API tell it --------------------------------------------
    def observe(self, state: ServiceState) -> None:
        """The service as the reconciler just read it: start, update or stop tracking."""
        auto = state.spec.autoscaler
        if auto is None or state.deleting:
            self._tracked.pop(state.name, None)
            self._plain.add(state.name)
            return
        self._plain.discard(state.name)
        instances = state.spec.metadata.instance
        t = self._tracked.get(state.name)
        if t is not None and t.lock.locked():
            # A write of ours is under way: this read may be its result before the write's
            # generation is known here, and would make the decision under way stale.
            t.stashed = state
            return
        now = self._clock()
        if t is None:
            # Seeded with the current count: a new leader does not scale down (or to zero)
            # before the window (or grace period) has passed under its own eyes.
            t = self._tracked[state.name] = Tracked(auto, instances, state.stopped, ())
            t.history, t.last_active = ((now, instances),), now
        elif state.generation < t.generation:
            return  # read before this process's own last write: that one stands
        elif t.instances == 0 and instances > 0:
            t.last_active = now  # up from zero by another hand: the grace period starts
        t.autoscaler, t.instances, t.stopped = auto, instances, state.stopped
        t.generation = state.generation
        t.cpu_request = state.spec.metadata.cpu
        t.is_async = state.spec.is_async
        self._mark([state.name])

    def replicas(self, name: str, seen: Observation) -> None:
        """The replicas as the reconciler just observed them (where queue time is read, and
        a cold start's phases)."""
        self.signals.history.replicas(name, sum(r.state == "Running" for r in seen.replicas))
        t = self._tracked.get(name)
        if t is not None:
            t.metrics_urls = tuple(r.metrics for r in seen.replicas if r.metrics)
            t.ready = sum(r.state == "Running" for r in seen.replicas)
            if t.cold is not None:
                done = t.cold.observe(seen.replicas, self._clock())
                if done is not None:
                    t.cold = None
                    t.last_active = self._clock()  # held requests go out now
                    log.info("autoscaler: %s %s", name, done)
                    asyncio.get_running_loop().run_in_executor(None, self._note, name, done)

    def _note(self, name: str, message: str) -> None:
        try:
            self.services.note(self.cluster, name, "ColdStart", message)
        except Exception as e:  # deleted meanwhile, database away: the log line stays
            log.warning("autoscaler: cold start of %s not recorded: %s", name, e)

    async def wake(self, name: str) -> int:
        """A gateway holds requests for ``name``: at zero, scale it to
        ``scaleUpActivationReplicas`` now; either way the grace period starts again.
        Returns the instance count asked for; :class:`NotWakeable` when it cannot wake."""
        requested = self._clock()
        t = self._tracked.get(name)
        if t is None and (name in self._plain or not await asyncio.to_thread(self._load, name)):
            raise NotWakeable(f"service {name!r} has no autoscaler with min 0")
        t = self._tracked[name]
        if not t.autoscaler.to_zero:
            raise NotWakeable(f"service {name!r} does not scale to zero (autoscaler min > 0)")
        if t.stopped:
            raise NotWakeable(f"service {name!r} is stopped: 'eascmd start {name}'")
        t.last_active = requested
        async with self._deciding(t):
            if t.instances > 0:
                return t.instances
            activation = t.autoscaler.clamp(t.autoscaler.on_zero.scaleUpActivationReplicas)
            why = f"scaled 0→{activation}: woken by a request"
            await self._scale(t, name, activation, why, "Woken", requested, "woken by a request")
            return t.instances

    @asynccontextmanager
    async def _deciding(self, t: Tracked) -> AsyncIterator[None]:
        """Decide and write alone; then take in what the reconciler read meanwhile."""
        async with t.lock:
            yield
        stashed, t.stashed = t.stashed, None
        if stashed is not None:
            self.observe(stashed)  # older than the write: its generation says so

    async def _scale(
        self, t: Tracked, name: str, to: int, why: str, reason: str, at: float, trigger: str
    ) -> None:
        """Write ``to`` instances (if the service is still at ``t.instances``); call it
        within :meth:`_deciding`."""
        before = t.instances
        generation = await asyncio.to_thread(
            self.services.autoscale, self.cluster, name, before, to, why, reason
        )
        if generation is None:
            return
        log.info("autoscaler: %s %s", name, why)
        if self.metrics is not None:
            self.metrics.decided(name, before, to, reason)
        t.instances = to
        t.generation = generation
        t.last_decision = why
        t.last_decision_at = datetime.now(UTC).isoformat(timespec="seconds")
        if before == 0 and to > 0:
            t.history = ((self._clock(), to),)
            t.cold = ColdStart(at, self._clock(), trigger)
        elif to == 0:
            t.cold = None
        self._mark([name])

    def forget(self, name: str) -> None:
        self.signals.history.forget(name)
        self._tracked.pop(name, None)
        self._plain.discard(name)
        self._cpu_read.pop(name, None)
        if self._queue_times is not None:
            self._queue_times.forget(name)

    def status(self, name: str) -> dict[str, Any] | None:
        """Current metric values and the last decision, for describe (None when this
        process does not lead or does not track the service)."""
        t = self._tracked.get(name) if self.signals.leading else None
        if t is None:
            return None
        return {
            "Metrics": {k: round(v, 3) for k, v in t.values.items()},
            "LastDecision": t.last_decision,
            "LastDecisionTime": t.last_decision_at,
        }

    def _on_report(self, names: list[str]) -> None:
        self._mark(n for n in names if n not in self._plain)

    def _mark(self, names: Any) -> None:
        self._due.update(names)
        if self._wake is not None and self._due:
            self._wake.set()

    # -- the loop ---------------------------------------------------------------------------
    async def run(self, runtime: Runtime | None = None) -> None:
        """Decide and scale until cancelled (the reconciler runs this while it leads, with
        its runtime: where the cpu metric comes from)."""
        self._cpu = runtime if isinstance(runtime, CpuSource) else None
        self._wake = asyncio.Event()
        self.signals.leading = True
        session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=1.0))

        async def fetch(url: str) -> str:
            async with session.get(url + "/metrics") as resp:
                resp.raise_for_status()
                return await resp.text()

        self._queue_times = QueueTimes(fetch, clock=self._clock)
        try:
            while True:
                watch = self._watched()
                try:
                    async with asyncio.timeout(self.tick_s if watch else None):
                        await self._wake.wait()
                except TimeoutError:
                    pass
                self._wake.clear()
                due, self._due = self._due | self._watched(), set()
                await asyncio.gather(*(self._evaluate(name) for name in due))
        finally:
            self.signals.leading = False
            self._wake = self._queue_times = self._cpu = None
            await session.close()

    def _watched(self) -> set[str]:
        """Autoscaled services that need a look without a report: with load still counted,
        or above their minimum (a scale-down waits out its window)."""
        loaded = {n for n in self.signals.active() if n in self._tracked}
        above = {n for n, t in self._tracked.items() if t.instances > t.autoscaler.min}
        return loaded | above

    async def _evaluate(self, name: str) -> None:
        t = self._tracked.get(name)
        if t is None:
            if name in self._plain or not await asyncio.to_thread(self._load, name):
                return
            t = self._tracked[name]
        if t.stopped:
            return
        load = self.signals.load(name)
        values = {"qps": load.qps, "concurrency": load.concurrency}
        now = self._clock()
        if load.qps > 0 or load.concurrency > 0:
            t.last_active = now
        wanted = {s.metricName for s in t.autoscaler.scaleStrategies}
        if "queue_time_ms" in wanted and t.metrics_urls and self._queue_times is not None:
            queue_ms = await self._queue_times.sample(name, t.metrics_urls)
            if queue_ms is not None:
                values["queue_time_ms"] = queue_ms
        if "cpu" in wanted:
            cpu = await self._cpu_percent(name, t.cpu_request)
            if cpu is not None:
                values["cpu"] = cpu
        if t.is_async and self.backlog is not None:
            backlog = await self.backlog.of(name)
            if backlog is not None:
                values[BACKLOG] = float(backlog)
                self.signals.history.backlog(name, backlog)
                if backlog > 0:
                    t.last_active = now  # work waiting is not idle: no scale to zero
        t.values = values
        async with self._deciding(t):
            if t.stopped or self._tracked.get(name) is not t:  # changed while measuring
                return
            idle = 0.0 if t.cold is not None else now - t.last_active  # waking is not idle
            d = decide(t.autoscaler, t.instances, t.values, t.history, now, t.ready, idle)
            t.history = d.history
            if d.instances != t.instances:
                why = f"scaled {t.instances}→{d.instances}: {d.reason}"
                await self._scale(t, name, d.instances, why, "Autoscaled", now, "woken by load")

    async def _cpu_percent(self, name: str, request: int) -> float | None:
        """Mean CPU per ready replica, % of its requested cores; read at most once a tick
        (between reads the last value stands)."""
        now = self._clock()
        at, value = self._cpu_read.get(name, (float("-inf"), None))
        if self._cpu is None or now - at < self.tick_s:
            return value
        try:
            cores = await self._cpu.cpu_cores(name)
        except RuntimeError_ as e:  # no metrics API, API unreachable: no value this time
            log.debug("autoscaler: no cpu for %s: %s", name, e)
            cores = []
        value = 100.0 * sum(cores) / len(cores) / request if cores else None
        self._cpu_read[name] = (now, value)
        return value

    def _load(self, name: str) -> bool:
        """Learn a service first named by a report (the reconciler has not shown it yet)."""
        with self._sessions() as s:
            row = queries.find(s, self.cluster, name)
            if row is None:
                self._plain.add(name)
                return False
            state = ServiceState(
                row.name, row.uid, row.generation, row.spec, row.stopped, row.deleting
            )
        self.observe(state)
        return name in self._tracked
