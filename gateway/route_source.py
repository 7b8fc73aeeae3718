"""The sources that keep the gateway's route table (:mod:`gateway.routing.route_table`) current:

- :class:`ControlPlaneRouteSource` long-polls the control plane's ``ROUTES_PATH`` (the
  deployable gateway and ``openeas up``);
- :class:`StaticRouteSource` holds a table set in-process (tests, embedding).

While the control plane cannot be reached the last table stays in force and the source's
health says since when.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Protocol

import aiohttp
from pydantic import ValidationError

from contract.wire import ROUTES_PATH, RouteTable

log = logging.getLogger(__name__)

ApplyFn = Callable[[RouteTable], None]
# Routes per page of a whole table, from the control plane or from a snapshot file.
PAGE_SIZE = 500
Health = dict[str, str | int | float | bool | None]


def iso_time(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


class RouteSource(Protocol):
    """Pushes route tables into the gateway until cancelled."""

    async def run(self, apply: ApplyFn) -> None:
        """Call ``apply`` with each new table (the current one first, if any); return
        only when cancelled."""
        ...

    def health(self) -> Health:
        """What the gateway's health output says about this source."""
        ...


class StaticRouteSource:
    """A table set in-process with :meth:`publish`; applied at once to every running
    gateway using this source."""

    def __init__(self, table: RouteTable | None = None) -> None:
        self.table = table
        self._subscribers: list[ApplyFn] = []

    def publish(self, table: RouteTable) -> None:
        self.table = table
        for apply in list(self._subscribers):
            apply(table)

    async def run(self, apply: ApplyFn) -> None:
        self._subscribers.append(apply)
        try:
            if self.table is not None:
                apply(self.table)
            await asyncio.Event().wait()
        finally:
            self._subscribers.remove(apply)

    def health(self) -> Health:
        return {"route_source": "static"}


class ControlPlaneRouteSource:
    """Long-polls ``GET <url>/internal/v1/routes?after=<version>&wait=<s>`` with the route-reader
    bearer token. A 200 carries a newer table (applied at once), a 204 means nothing
    changed during the hold. A whole table is asked for in pages of ``page_size`` routes,
    each applied as it arrives, the next asked for at once. On any failure the last table
    stays in force, the health output reports ``unreachable since …`` and the poll is
    retried with capped back-off; after a failure the next poll asks for the full table
    (``after=-1``), so a control plane that restarted with a lower version is followed
    too."""

    def __init__(
        self,
        url: str,
        token: str,
        *,
        wait_s: float = 25.0,
        connect_timeout_s: float = 3.0,
        backoff_initial_s: float = 0.05,
        backoff_max_s: float = 1.0,
        min_interval_s: float = 0.05,
        page_size: int = PAGE_SIZE,
    ) -> None:
        self.url = url.rstrip("/") + ROUTES_PATH
        self._auth = f"Bearer {token}"
        self.wait_s = wait_s
        self.connect_timeout_s = connect_timeout_s
        self.backoff_initial_s = backoff_initial_s
        self.backoff_max_s = backoff_max_s
        self.min_interval_s = min_interval_s
        # Routes per page of a whole table: never one answer of the whole cluster's routes
        # (held at once as wire routes while parsed) however many services it has.
        self.page_size = page_size
        self.version: int | None = None
        self.last_sync: float | None = None
        self.unreachable_since: float | None = None
        self.last_error: str | None = None
        self.on_unreachable: Callable[[], None] | None = None  # once per outage

    def health(self) -> Health:
        if self.unreachable_since is not None:
            state = f"unreachable since {iso_time(self.unreachable_since)}"
            if self.last_error:
                state += f" ({self.last_error})"
        elif self.last_sync is None:
            state = "connecting"
        else:
            state = "ok"
        return {
            "route_source": "control_plane",
            "control_plane": state,
            "control_plane_url": self.url,
            "last_sync": iso_time(self.last_sync) if self.last_sync else None,
        }

    def _failed(self, reason: str) -> None:
        if self.unreachable_since is None:
            self.unreachable_since = time.time()
            log.warning("control plane unreachable (%s); serving the last route table", reason)
            if self.on_unreachable is not None:
                self.on_unreachable()
        self.last_error = reason

    async def poll_once(
        self, session: aiohttp.ClientSession, after: int, page: str | None = None
    ) -> RouteTable | None:
        """One long-poll, or the ``page`` of a whole table. Returns the new table, None on
        204; raises on failure."""
        # Whole seconds: parses whether the server declares ``wait`` an int or a float.
        params = {"after": str(after), "wait": str(max(1, math.ceil(self.wait_s)))}
        if after < 0 or page is not None:  # a whole table: in pages
            params["page_size"] = str(self.page_size)
        if page is not None:
            params["page"] = page
        async with session.get(
            self.url, params=params, headers={"Authorization": self._auth}
        ) as resp:
            if resp.status == 204:
                return None
            if resp.status != 200:
                raise _PollError(f"HTTP {resp.status}")
            body = await resp.read()
        try:
            return RouteTable.model_validate_json(body)
        except ValidationError as e:
            raise _PollError(f"invalid route table: {e.error_count()} errors") from e

    async def run(self, apply: ApplyFn) -> None:
        timeout = aiohttp.ClientTimeout(
            total=self.wait_s + 10.0, sock_connect=self.connect_timeout_s
        )
        backoff = self.backoff_initial_s
        after = -1
        page: str | None = None  # the next page of a whole table being read
        async with aiohttp.ClientSession(timeout=timeout) as session:
            while True:
                try:
                    table = await self.poll_once(session, after, page)
                except asyncio.CancelledError:
                    raise
                except _PollError as e:
                    self._failed(str(e))
                except (aiohttp.ClientError, TimeoutError, OSError) as e:
                    self._failed(_describe(e))
                else:
                    now = time.time()
                    if self.unreachable_since is not None:
                        log.info("control plane reachable again")
                    self.unreachable_since = None
                    self.last_error = None
                    self.last_sync = now
                    backoff = self.backoff_initial_s
                    if table is not None and table.next_page is not None:
                        page = table.next_page  # asked for at once; the version waits
                        apply(table)
                        continue
                    page = None
                    if table is not None:
                        self.version = after = table.version
                        apply(table)
                        # Changes arriving meanwhile come as one delta: a burst of creates
                        # costs the control plane a few answers a second per gateway, not
                        # one per commit (and a server ignoring ?after= cannot spin us).
                        await asyncio.sleep(self.min_interval_s)
                    continue
                after, page = -1, None  # (a whole table read anew, from its first page)
                await asyncio.sleep(backoff)
                backoff = min(self.backoff_max_s, backoff * 2)


class _PollError(Exception):
    pass


def _describe(e: BaseException) -> str:
    """A short, secret-free reason for the health output."""
    if isinstance(e, aiohttp.ClientConnectorError):
        return f"cannot connect: {e.os_error.strerror or type(e.os_error).__name__}"
    if isinstance(e, TimeoutError):
        return "timed out"
    return type(e).__name__
