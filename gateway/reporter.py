"""The gateway's load report: every ``report_interval_s`` each gateway process pushes its
per-service request counts and mean in-flight requests to the control plane's
``SIGNALS_PATH`` (with the credential it reads routes with), where the leading autoscaler
sums the reports of every process and expires a silent one.

Started by :class:`gateway.app.Gateway` when it holds a control-plane credential. A report
carries only the services the proxy saw traffic for (:class:`gateway.limits.Activity`), plus
once, with zeros, those that just went quiet; with no traffic nothing is sent.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Callable

import aiohttp

from contract.wire import SIGNALS_PATH, LoadReport, ServiceLoad
from gateway.limits import Activity

log = logging.getLogger(__name__)


class LoadReporter:
    def __init__(
        self,
        url: str,
        token: str,
        activity: Activity,
        *,
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

    def collect(self) -> LoadReport | None:
        """The report for the time since the last one; None when there is nothing to say."""
        now = self._clock()
        elapsed, self._last_at = max(now - self._last_at, 1e-6), now
        loads = []
        for name, in_flight in self.activity.drain().items():
            requests, mean = in_flight.take(elapsed)
            loads.append(ServiceLoad(service=name, requests=requests, concurrency=mean))
            if in_flight.count:  # requests still running: report it next time too
                self.activity.touch(name, in_flight)
        busy = {load.service for load in loads}
        loads += [ServiceLoad(service=n, requests=0, concurrency=0) for n in self._busy - busy]
        self._busy = busy
        if not loads:
            return None
        return LoadReport(reporter=self.reporter, interval_s=elapsed, services=loads)

    async def run(self) -> None:
        timeout = aiohttp.ClientTimeout(total=max(2.0, self.interval_s * 2))
        session = aiohttp.ClientSession(timeout=timeout)
        try:
            while True:
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
