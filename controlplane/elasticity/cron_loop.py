"""The scheduled scaler as the leading reconciler runs it: once a second, the services
with a scheduled scaler are read (one indexed query, only those rows) and each job that
fired since the last look is written by :meth:`Services.cron_scale`, an event saying which.

State here is the time of the last look only: a new leader starts from its own start, so a
job is never run twice by two leaders, and one missed while none led is not replayed.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from datetime import datetime

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from controlplane.model import cron_schedule
from controlplane.model.errors import ControlPlaneError
from controlplane.store.services import Services
from controlplane.store.tables import ServiceRow

log = logging.getLogger(__name__)


class CronScaling:
    def __init__(
        self,
        sessions: sessionmaker[Session],
        services: Services,
        *,
        tick_s: float = 1.0,
        clock: Callable[[], datetime] = cron_schedule.now,
    ) -> None:
        self._sessions = sessions
        self._services = services
        self._tick_s = tick_s
        self._clock = clock

    def scheduled(self) -> list[tuple[str, dict[str, object]]]:
        with self._sessions() as s:
            query = select(ServiceRow.name, ServiceRow.cron_scaler).where(
                ServiceRow.cluster == self._services.cluster,
                ServiceRow.cron_scaler.is_not(None),
                ServiceRow.deleting.is_(False),
            )
            return [(name, cron) for name, cron in s.execute(query) if cron]

    def tick(self, after: datetime, until: datetime) -> None:
        for name, cron in self.scheduled():
            firing = cron_schedule.fired(cron, after, until)
            if firing is None:
                continue
            try:
                self._services.cron_scale(
                    self._services.cluster,
                    name,
                    firing.job,
                    firing.target,
                    firing.at.strftime("%Y-%m-%dT%H:%M:%SZ"),
                )
            except ControlPlaneError as e:  # deleted meanwhile, or a concurrent delete
                log.info("cron scaler: %s job %s not applied: %s", name, firing.job, e)

    async def run(self) -> None:
        last = self._clock()
        while True:
            await asyncio.sleep(self._tick_s)
            now = self._clock()
            try:
                await asyncio.to_thread(self.tick, last, now)
            except Exception:  # a database blip: the next tick looks again from ``last``
                log.exception("cron scaler: tick failed")
                continue
            last = now
