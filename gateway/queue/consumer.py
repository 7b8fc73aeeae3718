"""The replicas' side of async services: the platform, not the tenant's replica, takes
input messages and calls the replica's processor.

Where it runs: in the gateway, one task per *ready replica of an async service* in its
route table (:meth:`Consumers.on_table` starts and stops them as tables arrive, touching
only the services a table changes). Several gateway processes share the work through a
lease per replica in Redis: exactly one of them consumes for a replica at a time, so a
replica's window holds however many gateways there are. A service with no ready replica
costs nothing; each consumer waits in a blocking read (woken by a put), and idle it makes
one blocking read and one lease renewal per ``TURN_S``: cost grows with ready replicas,
never with services. Messages put with ``_priority_=1`` are taken before the group's next
ones (:meth:`gateway.queue.streams.Streams.take_priority`).

Each consumer holds at most ``window`` messages (``metadata.rpc.worker_threads``): it
POSTs each message's data to ``<replica><path>`` (the put's path suffix, else the spec's
``queue.default_path``), writes the response body to the sink under the message's request
id with the status in its tags, and acknowledges — one script
(:meth:`gateway.queue.streams.Streams.answer`), so nothing is answered twice. A message
whose replica died or timed out stays pending: a live consumer of the same service takes
it over at once when its holder left the route table, or after ``claim_idle_s``; after
``max_delivery`` deliveries it goes to the dead-letter stream. While the sink is full no
input is taken (EAS's back-pressure).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from dataclasses import dataclass, field

import aiohttp

from contract.wire import QueueRoute
from gateway.metrics import GatewayMetrics
from gateway.queue.door import limits
from gateway.queue.streams import REPLICAS_GROUP, Entry, QueueUnavailable, Streams
from gateway.routing.route_table import RouteChange, RouteState

log = logging.getLogger(__name__)

TURN_S = 2.0  # longest blocking read; the lease is renewed at least this often
LEASE_S = 10.0  # a gateway that stops renewing loses its replicas' leases after this
FULL_SINK_WAIT_S = 0.5
# A replica that failed a call (refused, broke, timed out) takes nothing for this long and
# the messages it holds go to the others at once (it may still be listed: its death is not
# in the route table yet).
DOWN_S = 2.0


@dataclass
class _Running:
    task: asyncio.Task[None]
    inflight: set[asyncio.Task[None]] = field(default_factory=set)
    down_until: float = 0.0  # loop time until which its replica is presumed down
    stopped: bool = False  # set with the cancel: a turn that outlived it is the last


class Consumers:
    """Every consumer this gateway process runs: (service, replica base URL) → task."""

    def __init__(
        self,
        routes: RouteState,
        streams: Streams,
        *,
        claim_idle_s: float,
        metrics: GatewayMetrics,
    ) -> None:
        self.metrics = metrics
        self.routes = routes
        self.streams = streams
        self.claim_idle_ms = int(claim_idle_s * 1000)
        self.owner = str(uuid.uuid4())  # this process, in the leases it holds
        self.running: dict[tuple[str, str], _Running] = {}
        self._session: aiohttp.ClientSession | None = None
        self._releasing: set[asyncio.Task[None]] = set()
        self.closed = False

    def on_table(self, change: RouteChange) -> None:
        """Start consumers for new ready replicas of async services, stop the others."""
        if self.closed:
            return
        table = change.table
        names = (
            {key[0] for key in self.running} | {r.service for r in table.routes}
            if table.full
            else {r.service for r in table.routes} | set(table.removed)
        )
        for name in names:
            entry = self.routes.services.get(name)
            wanted = (
                {ep.base_url for ep in entry.endpoints}
                if entry is not None and entry.queue is not None
                else set()
            )
            have = {ep for (svc, ep) in self.running if svc == name}
            for ep in have - wanted:
                self._stop(name, ep)
            for ep in wanted - have:
                task = asyncio.create_task(self._run(name, ep), name=f"queue-{name}")
                self.running[(name, ep)] = _Running(task)

    def _stop(self, name: str, ep: str) -> None:
        running = self.running.pop((name, ep), None)
        if running is not None:
            running.stopped = True
            running.task.cancel()
            for t in running.inflight:
                t.cancel()
            # Another gateway may take the replica at once (it may come back in its table).
            release = asyncio.create_task(self._release(name, ep))
            self._releasing.add(release)
            release.add_done_callback(self._releasing.discard)

    async def _release(self, name: str, ep: str) -> None:
        with contextlib.suppress(QueueUnavailable):
            await self.streams.release(name, ep, self.owner)

    async def close(self) -> None:
        self.closed = True  # no route change starts a consumer from here on
        for key in list(self.running):
            running = self.running[key]
            self._stop(*key)
            with contextlib.suppress(asyncio.CancelledError):
                await running.task
        await asyncio.gather(*self._releasing, return_exceptions=True)
        if self._session is not None:
            await self._session.close()

    def _queue(self, name: str) -> QueueRoute | None:
        entry = self.routes.services.get(name)
        return None if entry is None else entry.queue

    async def _run(self, name: str, ep: str) -> None:
        """Consume for (``name``, ``ep``) until stopped: a stopped consumer ends at its
        next turn even when a cancellation is lost on the way (the Redis client can swallow
        one that lands inside a blocking read)."""
        while True:
            running = self.running.get((name, ep))
            if running is None or running.stopped or running.task is not asyncio.current_task():
                return  # stopped; or stopped and started again, as another task
            try:
                await self._consume(name, ep, running)
                return
            except asyncio.CancelledError:
                raise
            except QueueUnavailable as e:
                log.warning("queue of %s unavailable for replica %s: %s", name, ep, e)
            except Exception:
                log.exception("consumer of %s for %s crashed; restarting it", name, ep)
            await asyncio.sleep(1.0)

    async def _consume(self, name: str, ep: str, running: _Running) -> None:
        streams = self.streams
        inflight = running.inflight
        await streams.ensure_group(name, "input", REPLICAS_GROUP)
        mine_first = True  # what this replica held when its consumer last stopped
        while not running.stopped:
            queue = self._queue(name)
            if queue is None:
                return
            if not await streams.lease(name, ep, self.owner, LEASE_S):
                await asyncio.sleep(TURN_S)
                continue
            rest = running.down_until - asyncio.get_running_loop().time()
            if rest > 0:
                await asyncio.sleep(rest)
                continue
            sink = limits(queue, "sink")
            if await streams.sink_full(name, sink):
                await asyncio.sleep(FULL_SINK_WAIT_S)
                continue
            free = queue.window - len(inflight)
            if free <= 0:
                await asyncio.wait(inflight, timeout=TURN_S, return_when=asyncio.FIRST_COMPLETED)
                continue
            if mine_first:
                mine_first = False
                got = await streams.read_group(
                    name, "input", REPLICAS_GROUP, ep, free, None, own_pending=True
                )
            else:
                got = await streams.take_priority(name, free)  # ``_priority_=1`` first
                if not got:
                    got = await self._claim(name, ep, queue, free)
            if not got:
                got = await streams.read_group(name, "input", REPLICAS_GROUP, ep, free, TURN_S)
            for entry in got:
                task = asyncio.create_task(self._deliver(name, ep, entry))
                inflight.add(task)
                task.add_done_callback(inflight.discard)

    async def _claim(self, name: str, ep: str, queue: QueueRoute, free: int) -> list[Entry]:
        """Take over what replicas that left hold, or what is held too long; bury what
        was delivered ``max_delivery`` times."""
        entry = self.routes.services.get(name)
        alive = {e.base_url for e in entry.endpoints} if entry is not None else set()
        alive -= await self.streams.down(name)
        take: list[int] = []
        pending = await self.streams.pending(name, "input", REPLICAS_GROUP, 1000)
        backlog, sink = await self.streams.depth(name)
        self.metrics.queue_pending.set((name,), len(pending))
        self.metrics.queue_length.set((name, "input"), backlog)
        self.metrics.queue_length.set((name, "sink"), sink)
        for p in pending:
            if p.consumer == ep or (p.consumer in alive and p.idle_ms < self.claim_idle_ms):
                continue
            if p.deliveries >= queue.max_delivery:
                reason = f"delivered {p.deliveries} times without an answer"
                if await self.streams.bury(name, p.index, p.deliveries, reason):
                    self.metrics.queue_dead_lettered.inc((name,))
                continue
            take.append(p.index)
            if len(take) >= free:
                break
        got = await self.streams.claim(name, "input", REPLICAS_GROUP, ep, take)
        if got:
            self.metrics.queue_redelivered.inc((name,), len(got))
        return got

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession()
        return self._session

    async def _deliver(self, name: str, ep: str, entry: Entry) -> None:
        queue = self._queue(name)
        route = self.routes.services.get(name)
        if queue is None or route is None:
            return
        path = entry.path or queue.default_path
        timeout = aiohttp.ClientTimeout(total=route.timeout_s)
        try:
            async with self._client().post(ep + path, data=entry.data, timeout=timeout) as resp:
                body = await resp.read()
                status = resp.status
        except (aiohttp.ClientError, TimeoutError, OSError) as e:
            # Left pending: another replica takes it (see _claim).
            log.info("replica %s of %s did not answer message %d: %s", ep, name, entry.index, e)
            running = self.running.get((name, ep))
            if running is not None:
                running.down_until = asyncio.get_running_loop().time() + DOWN_S
            await self.streams.mark_down(name, ep, DOWN_S)
            return
        tags = {**entry.tags, "requestId": entry.request_id, "status": str(status)}
        write = bool(body) or status >= 400
        while True:
            done = await self.streams.answer(
                name, entry, body, tags, limits(queue, "sink"), write=write
            )
            if done is not None:
                if done:
                    self.metrics.queue_answered.inc((name,))
                return
            await asyncio.sleep(FULL_SINK_WAIT_S)  # the sink is full: hold the answer
