"""The gateway's load report: every ``report_interval_s`` each gateway process pushes its
per-service request counts and mean in-flight requests to the control plane's
``SIGNALS_PATH`` (with the credential it reads routes with), where the leading autoscaler
sums the reports of every process and expires a silent one.

Started by :class:`gateway.app.Gateway` when it holds a control-plane credential. A report
carries only the services the proxy saw traffic for (:class:`gateway.routing.limits.Activity`), plus
once, with zeros, those that just went quiet; with no traffic nothing is sent, and the
reporter does not wake until a request comes. Each busy service also carries what was
answered since its last report (count, 5xx, latency histogram), the difference of the
gateway's own metrics, for the console's charts.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Callable

import aiohttp

from contract.wire import SIGNALS_PATH, LoadReport, ServiceLoad
from gateway.metrics import GatewayMetrics
from gateway.routing.limits import Activity

log = logging.getLogger(__name__)


class LoadReporter:
    def __init__(
        self,
        url: str,
        token: str,
        activity: Activity,
        *,
        metrics: GatewayMetrics | None = None,
        interval_s: float = 0.5,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.url = url.rstrip("/") + SIGNALS_PATH
        self._auth = f"Bearer {token}"
        self.activity = activity
        self.interval_s = interval_s
        self.reporter = uuid.uuid4().hex[:16]  # one per process: workers report apart
        self._clock = clock
        self._last_at = clock()
        self._busy: set[str] = set()  # in the last report with traffic
        self.metrics = metrics
        # service → (5xx answers, latency bucket counts) when last reported, to send the
        # difference; as many entries as the metrics hold children.
        self._answered: dict[str, tuple[int, list[int]]] = {}

    def collect(self) -> LoadReport | None:
        """The report for the time since the last one; None when there is nothing to say."""
        now = self._clock()
        elapsed, self._last_at = max(now - self._last_at, 1e-6), now
        loads = []
        for name, in_flight in self.activity.drain().items():
            requests, mean = in_flight.take(elapsed)
            load = ServiceLoad(service=name, requests=requests, concurrency=mean)
            if self.metrics is not None:
                self._add_answers(load, self.metrics)
            loads.append(load)
            if in_flight.count:  # requests still running: report it next time too
                self.activity.touch(name, in_flight)
        busy = {load.service for load in loads}
        loads += [ServiceLoad(service=n, requests=0, concurrency=0) for n in self._busy - busy]
        self._busy = busy
        if not loads:
            return None
        bounds = list(self.metrics.duration.buckets) if self.metrics is not None else []
        return LoadReport(
            reporter=self.reporter, interval_s=elapsed, services=loads, latency_bounds_s=bounds
        )

    def _add_answers(self, load: ServiceLoad, metrics: GatewayMetrics) -> None:
        child = metrics.duration.children.get((load.service,))
        if child is None:
            return
        errors, counts = metrics.requests.errors.get(load.service, 0), list(child.counts)
        last_errors, last_counts = self._answered.get(load.service, (0, [0] * len(counts)))
        self._answered[load.service] = (errors, counts)
        load.latency = [now - then for now, then in zip(counts, last_counts, strict=True)]
        load.completed = sum(load.latency)
        load.errors = errors - last_errors

    async def _until_touched(self) -> None:
        woken: asyncio.Future[None] = asyncio.get_running_loop().create_future()

        def wake() -> None:
            if not woken.done():  # cancelled meanwhile (shutting down): not the request's fault
                woken.set_result(None)

        self.activity.on_touch = wake
        try:
            await woken
        finally:
            self.activity.on_touch = None

    async def run(self) -> None:
        timeout = aiohttp.ClientTimeout(total=max(2.0, self.interval_s * 2))
        session = aiohttp.ClientSession(timeout=timeout)
        try:
            while True:
                if not self._busy and not self.activity.touched:
                    # Nothing was in the last report: an idle gateway sleeps until traffic
                    # comes, and that traffic's report covers the time since it came.
                    await self._until_touched()
                    self._last_at = self._clock()
                await asyncio.sleep(self.interval_s)
                report = self.collect()
                if report is None:
                    continue
                try:
                    async with session.post(
                        self.url,
                        data=report.model_dump_json(),
                        headers={"Authorization": self._auth, "Content-Type": "application/json"},
                    ) as resp:
                        if resp.status == 421:
                            # Not the leading control plane: a new connection may reach it
                            # (a Service spreads new connections over the replicas).
                            await session.close()
                            session = aiohttp.ClientSession(timeout=timeout)
                        elif resp.status >= 300:
                            log.debug("load report refused: HTTP %d", resp.status)
                except (aiohttp.ClientError, TimeoutError, OSError) as e:
                    log.debug("load report not delivered: %s", type(e).__name__)
        finally:
            await session.close()
