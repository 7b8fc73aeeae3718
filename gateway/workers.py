"""Metrics across the workers of ``openeas gateway --workers N``: one aggregated view.

The kernel hands each connection (a scrape too) to any worker, and each keeps its own
counters. So every worker also listens on a Unix socket in a directory the supervising
parent made (``<dir>/<index>.sock``) and answers a connection there with a JSON snapshot of
its metrics (:meth:`gateway.metrics.GatewayMetrics.snapshot`); the worker that is scraped
asks its siblings and renders the sum (:meth:`gateway.metrics.GatewayMetrics.render`).
Nothing is polled between scrapes; a sibling that does not answer in time (stopping,
restarted) is left out of that one scrape and logged.

The autoscaler's signals need none of this: each worker pushes its own load report with its
own reporter id, and the control plane sums them (:mod:`gateway.reporter`).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

Snapshot = dict[str, list[Any]]
ASK_TIMEOUT_S = 1.0  # per sibling, per scrape


class WorkerPeers:
    """This worker's place among its siblings: ``directory`` holds one socket per worker."""

    def __init__(self, directory: Path, index: int) -> None:
        self.directory = directory
        self.index = index
        self.path = directory / f"{index}.sock"
        self._server: asyncio.AbstractServer | None = None

    async def start(self, snapshot: Callable[[], Snapshot]) -> None:
        async def answer(_reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            try:
                writer.write(json.dumps(snapshot()).encode())
                await writer.drain()
            except ConnectionError:
                pass  # the asking sibling gave up
            finally:
                writer.close()

        self.path.unlink(missing_ok=True)  # left by a worker this one replaces
        self._server = await asyncio.start_unix_server(answer, path=str(self.path))

    async def gather(self) -> list[Snapshot]:
        """The snapshots of every sibling that answers."""
        paths = [p for p in sorted(self.directory.glob("*.sock")) if p != self.path]
        answers = await asyncio.gather(*(self._ask(p) for p in paths))
        return [a for a in answers if a is not None]

    async def _ask(self, path: Path) -> Snapshot | None:
        try:
            async with asyncio.timeout(ASK_TIMEOUT_S):
                reader, writer = await asyncio.open_unix_connection(str(path))
                try:
                    data = await reader.read()
                finally:
                    writer.close()
            snapshot: Snapshot = json.loads(data)
            return snapshot
        except (OSError, TimeoutError, ValueError) as e:
            log.warning("metrics of worker %s left out of this scrape: %s", path.stem, e)
            return None

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None
        self.path.unlink(missing_ok=True)
