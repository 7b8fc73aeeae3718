"""The route table kept in a ConfigMap of the release namespace, so a gateway pod that starts
while no control plane answers (a new node, a rescheduled pod, the control plane's own
upgrade gone wrong) serves the last table instead of nothing.

The leading control plane (:class:`~controlplane.server.ControlPlane` runs
:meth:`RouteSnapshotPublisher.run`, which checks the lead before each write) writes the whole
table, gzip-compressed, as the ConfigMap's one ``binaryData`` key :data:`KEY`, after a change
and at most every ``interval_s``: read from the route feed in pages and compressed as they
come, never held whole. The chart mounts the ConfigMap into every gateway pod
(``OPENEAS_GATEWAY_ROUTE_SNAPSHOT_SHARED``); the gateway reads it only when no control
plane answers in time (:mod:`gateway.snapshot` reads gzip). Like the gateway's own file it
holds token digests and replica addresses, never a token (a gateway serving it refuses
signed calls until the control plane answers, as with its own file).

A ConfigMap holds at most 1 MiB: a compressed table above :data:`MAX_BYTES` is not written
(logged once per version); gateways then keep the last snapshot that fitted.
"""

from __future__ import annotations

import asyncio
import base64
import gzip
import io
import itertools
import logging
from collections.abc import Callable, Iterator
from typing import Any

from sqlalchemy.orm import Session, sessionmaker

from contract.wire import RouteTable, whole_table_json
from controlplane.runtime.kubernetes.client import KubeClient
from controlplane.runtime.kubernetes.settings import KubernetesSettings
from controlplane.store import route_feed

log = logging.getLogger(__name__)

KEY = "routes.json.gz"
# Under the API's 1 MiB per object, with room for metadata and base64 (4/3).
MAX_BYTES = 700 * 1024
FIELD_MANAGER = "openeas-route-snapshot"


def encode(table: RouteTable) -> bytes:
    """The table as the gateway's snapshot file holds it (token digests, no token),
    gzip-compressed (``mtime=0``: the same table gives the same bytes)."""
    compressed = encode_pages(iter([table]))
    assert compressed is not None
    return compressed


def encode_pages(pages: Iterator[RouteTable], limit: int | None = None) -> bytes | None:
    """:func:`encode` of the whole table ``pages`` make (:func:`route_feed.pages`), a
    page in memory at a time; None as soon as it is over ``limit`` bytes compressed."""
    first = next(pages)
    routes = itertools.chain(first.routes, (r for page in pages for r in page.routes))
    out = io.BytesIO()
    with gzip.GzipFile(filename="", fileobj=out, mode="wb", mtime=0) as gz:
        for piece in whole_table_json(first.version, routes, first.groups):
            gz.write(piece)
            if limit is not None and out.tell() > limit:
                return None
    return out.getvalue()


def manifest(name: str, version: int, compressed: bytes) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": name,
            "labels": {"app.kubernetes.io/part-of": "openeas"},
            # Read by people: which version the gateways would fall back to.
            "annotations": {"openeas.io/route-table-version": str(version)},
        },
        "binaryData": {KEY: base64.b64encode(compressed).decode()},
    }


class RouteSnapshotPublisher:
    def __init__(
        self,
        sessions: sessionmaker[Session],
        cluster: str,
        default_timeout_ms: int,
        settings: KubernetesSettings,
        *,
        interval_s: float = 10.0,
    ) -> None:
        self._sessions = sessions
        self._cluster = cluster
        self._timeout_ms = default_timeout_ms
        # The client works in one namespace: the release's, where the gateways run.
        self._settings = settings.model_copy(
            update={"namespace": settings.route_snapshot_namespace}
        )
        self.name = settings.route_snapshot_configmap
        self.interval_s = interval_s
        self.written = -1  # the route version last written (or found too large)
        self._client: KubeClient | None = None

    def publish_once(self) -> bool:
        """Write the table if its version moved since the last write; True when written."""
        with self._sessions() as s:
            current = route_feed.version(s)
        if current == self.written:
            return False
        pages = route_feed.pages(self._sessions, self._cluster, self._timeout_ms)
        first = next(pages)
        version = first.version
        compressed = encode_pages(itertools.chain([first], pages), MAX_BYTES)
        if compressed is None:
            log.warning(
                "route snapshot: version %d is over %d bytes compressed: not written "
                "(gateways keep the last one that fitted)",
                version,
                MAX_BYTES,
            )
            self.written = version
            return False
        if self._client is None:
            self._client = KubeClient(self._settings)
        self._client.apply(manifest(self.name, version, compressed), field_manager=FIELD_MANAGER)
        self.written = version
        log.info("route snapshot: version %d written to ConfigMap %s", version, self.name)
        return True

    async def run(self, leading: Callable[[], bool]) -> None:
        """While this process leads, keep the ConfigMap at most ``interval_s`` behind."""
        try:
            while True:
                if leading():
                    try:
                        await asyncio.to_thread(self.publish_once)
                    except Exception as e:  # the API or the database away: next time
                        log.warning("route snapshot: not written: %s", e)
                else:
                    self.written = -1  # whoever leads next writes at once
                await asyncio.sleep(self.interval_s)
        finally:
            if self._client is not None:
                self._client.close()
