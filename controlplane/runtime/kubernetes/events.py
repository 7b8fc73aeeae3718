"""Service events as Kubernetes Events on the service's Deployment, so ``kubectl describe
deployment`` and cluster event pipelines see what ``eascmd events`` shows.

Any control-plane replica writes service events (an API call, the reconciler, the
autoscaler) to the database; the leader mirrors them: :meth:`EventMirror.run` reads the
events after the last one it sent (an indexed range on the events' id) every
``interval_s`` and creates one ``v1`` Event each in the serving namespace, naming the
Deployment as ``involvedObject``. A new leader starts from the events present when it took
the lead (history is in the database; the cluster's events expire after an hour anyway).
An Event that cannot be created is logged and skipped: events are advice, never a reason
to stop.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from datetime import UTC
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from controlplane.model.spec import k8s_name
from controlplane.runtime.kubernetes.client import KubeClient
from controlplane.runtime.kubernetes.settings import KubernetesSettings
from controlplane.store.tables import EventRow, ServiceRow

log = logging.getLogger(__name__)

COMPONENT = "openeas-controlplane"
MAX_MESSAGE = 1024  # what the API keeps of an Event's message
BATCH = 500  # events sent per read


def kube_event(
    namespace: str, service: str, event_id: int, row: EventRow, instance: str
) -> dict[str, Any]:
    """The ``v1`` Event of service event ``row`` (its database id ``event_id``), on the
    Deployment of ``service``. Named after the object and the id: unique, and a retry of
    the same event is refused as existing instead of doubled."""
    deployment = k8s_name(service)
    at = row.created_at
    at = at.replace(tzinfo=UTC) if at.tzinfo is None else at.astimezone(UTC)
    stamp = at.strftime("%Y-%m-%dT%H:%M:%SZ")
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": f"{deployment}.openeas-{event_id:x}", "namespace": namespace},
        "involvedObject": {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "name": deployment,
            "namespace": namespace,
        },
        "reason": row.reason[:128],
        "message": row.message[:MAX_MESSAGE],
        "type": row.type if row.type in ("Normal", "Warning") else "Normal",
        "source": {"component": COMPONENT},
        "reportingComponent": "openeas.io/controlplane",
        "reportingInstance": instance[:128],
        "firstTimestamp": stamp,
        "lastTimestamp": stamp,
        "count": 1,
    }


class EventMirror:
    def __init__(
        self,
        sessions: sessionmaker[Session],
        cluster: str,
        settings: KubernetesSettings,
        *,
        instance: str = COMPONENT,
        interval_s: float = 2.0,
    ) -> None:
        self._sessions = sessions
        self._cluster = cluster
        self._settings = settings
        self.namespace = settings.namespace
        self.instance = instance
        self.interval_s = interval_s
        self.cursor: int | None = None  # the last event id sent (None: not leading)
        self._client: KubeClient | None = None

    def start_from_now(self) -> None:
        with self._sessions() as s:
            self.cursor = s.scalar(select(func.max(EventRow.id))) or 0

    def mirror_once(self) -> int:
        """Create the Events of the service events after the cursor; how many were sent."""
        if self.cursor is None:
            self.start_from_now()
        assert self.cursor is not None
        with self._sessions() as s:
            rows = s.execute(
                select(EventRow, ServiceRow.name)
                .join(ServiceRow, EventRow.service_id == ServiceRow.id)
                .where(EventRow.id > self.cursor, ServiceRow.cluster == self._cluster)
                .order_by(EventRow.id)
                .limit(BATCH)
            ).all()
        if not rows:
            return 0
        if self._client is None:
            self._client = KubeClient(self._settings)
        sent = 0
        for event, service in rows:
            body = kube_event(self.namespace, service, event.id, event, self.instance)
            try:
                if self._client.create(body):
                    sent += 1
            except Exception as e:  # advice only: log, and go on with the next one
                log.warning("event %s of %s not sent to Kubernetes: %s", event.reason, service, e)
            self.cursor = event.id
        return sent

    async def run(self, leading: Callable[[], bool]) -> None:
        """While this process leads, mirror new events every ``interval_s``."""
        try:
            while True:
                if leading():
                    try:
                        await asyncio.to_thread(self.mirror_once)
                    except Exception as e:  # the database away: next time
                        log.warning("events not mirrored to Kubernetes: %s", e)
                else:
                    self.cursor = None  # a later lead starts from its own now
                await asyncio.sleep(self.interval_s)
        finally:
            if self._client is not None:
                self._client.close()
