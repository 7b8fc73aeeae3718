"""EAS's queue protocol at ``/api/predict/<svc>`` and ``/api/predict/<svc>/sink`` for
async services (a route with ``queue``), as ``eas_prediction.QueueClient`` speaks it.

:class:`gateway.http.router.Router` hands a request here when :meth:`QueueDoor.serves` says
its service is async; everything else about predict calls stays in :mod:`gateway.http.proxy`.
Contract: the service token (raw or ``Bearer``; the group token of the same name too), or
EAS's signature made with either (:mod:`gateway.routing.auth`, the body checked against its
Content-MD5 before it is queued), opens both queues; a put is queued whatever the replica
count and wakes a service at zero (the put is answered at once); a full queue is 429 with
the reason, a payload over the queue's ``max_payload_size_kb`` 413, an unknown index 404,
Redis down 503. The operations are read by :mod:`gateway.queue.protocol` and done by
:mod:`gateway.queue.streams`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any, cast

from contract.wire import QueueRoute
from gateway.admission import Admission
from gateway.http.forwarding import read_body
from gateway.http.problems import Problem, refused_problem, write_problem
from gateway.http.server import BodyTooLarge, ClientGone, Request
from gateway.metrics import GatewayMetrics
from gateway.queue import frames, protocol, websocket
from gateway.queue.protocol import INPUT, Address, BadQuery
from gateway.queue.streams import Entry, Limits, QueueFull, QueueUnavailable, Streams
from gateway.routing.auth import (
    MAX_SKEW_S,
    SignatureRefusal,
    body_matches,
    is_signed,
    md5_refusal,
    presented_token,
    signature_matches,
    signature_refusal,
    signed_head,
    token_matches,
)
from gateway.routing.paths import Target
from gateway.routing.route_table import RouteState, ServiceRoute

log = logging.getLogger(__name__)

REQUEST_ID = b"x-eas-queueservice-request-id"
UID = b"x-eas-queueservice-redis-uid"
GID = b"x-eas-queueservice-redis-gid"
DEFAULT_GID = "eas"  # QueueClient's default group

Wake = Callable[[str], Awaitable[Any]]


def unauthorized(service: str, detail: str) -> Problem:
    return refused_problem(Admission.unauthenticated(service, detail))


def limits(queue: QueueRoute, which: str) -> Limits:
    if which == INPUT:
        return Limits(queue.source_max_length, queue.source_auto_evict)
    return Limits(queue.sink_max_length, queue.sink_auto_evict)


def max_payload(queue: QueueRoute, which: str) -> int:
    return queue.source_max_payload_bytes if which == INPUT else queue.sink_max_payload_bytes


class QueueDoor:
    """The queue protocol for every async service in the route table."""

    def __init__(
        self,
        routes: RouteState,
        streams: Streams | None,
        *,
        max_body_bytes: int,
        claim_idle_s: float,
        metrics: GatewayMetrics,
        wake: Wake | None = None,
        max_skew_s: float = MAX_SKEW_S,
    ) -> None:
        self.metrics = metrics
        self.max_skew_s = max_skew_s
        self.routes = routes
        self.streams = streams
        self.max_body_bytes = max_body_bytes
        self.claim_idle_s = claim_idle_s
        self.wake = wake
        self._waking: dict[str, asyncio.Task[Any]] = {}
        # Watches of this process, by (service, queue, group, consumer): a commit wakes
        # the one whose window it frees.
        self.commits: dict[tuple[str, str, str, str], asyncio.Event] = {}

    def serves(self, target: Target) -> bool:
        entry = self.routes.services.get(target.service)
        return entry is not None and entry.queue is not None

    async def handle(self, request: Request, target: Target) -> None:
        try:
            await self._handle(request, target)
        except Problem as p:
            write_problem(request, p, close=p.status == 413)

    async def _handle(self, request: Request, target: Target) -> None:
        entry = self.routes.services[target.service]
        queue = entry.queue
        assert queue is not None
        content_md5 = self._authenticate(request, entry)
        where = protocol.address(target.segments, target.path_qs)
        if where is None:
            raise Problem(404, "below /sink there is nothing: use /api/predict/<svc>/sink")
        try:
            op = protocol.operation(request.method, target.path_qs.partition("?")[2])
        except BadQuery as e:
            raise Problem(400, str(e), service=entry.service) from e
        if (
            content_md5 is not None
            and not isinstance(op, protocol.Put)
            and not body_matches(content_md5, (b"",))
        ):
            raise unauthorized(entry.service, md5_refusal().detail)
        if isinstance(op, protocol.Watch) != bool(request.upgrade):
            raise Problem(
                400,
                "a watch (_watch_=true) is a WebSocket upgrade, and only a watch is",
                service=entry.service,
            )
        streams = self.streams
        if streams is None:
            raise Problem(
                503,
                "async services need a Redis: set OPENEAS_REDIS_URL for the gateway",
                service=entry.service,
            )
        try:
            await self._do(request, entry, queue, where, op, streams, content_md5)
        except QueueUnavailable as e:
            raise Problem(503, str(e), service=entry.service) from e

    def _authenticate(self, request: Request, entry: ServiceRoute) -> bytes | None:
        """Refuse a call without the service's (or its group's) credential. A signed call's
        head is checked here; the Content-MD5 its body must still match is returned."""
        authorization = request.head.authorization
        group = self.routes.groups.get(entry.service)
        if is_signed(authorization):
            assert authorization is not None
            head = signed_head(
                authorization,
                request.method,
                request.target,
                request.hmap,
                time.time(),
                self.max_skew_s,
            )
            if isinstance(head, SignatureRefusal):
                raise unauthorized(entry.service, head.detail)
            keys = [entry.key, group.key if group is not None else None]
            if not any(k is not None and signature_matches(k, head) for k in keys):
                has_key = any(k is not None for k in keys)
                raise unauthorized(entry.service, signature_refusal(has_key).detail)
            return head.content_md5
        token = presented_token(authorization)
        if token is None:
            raise unauthorized(entry.service, "missing Authorization header with the service token")
        digests = [entry.digest]
        if group is not None:
            digests.append(group.digest)
        if not any(token_matches(token, d) for d in digests):
            raise unauthorized(entry.service, "the token does not match this service")
        return None

    async def _do(
        self,
        request: Request,
        entry: ServiceRoute,
        queue: QueueRoute,
        where: Address,
        op: protocol.Operation,
        streams: Streams,
        content_md5: bytes | None = None,
    ) -> None:
        name, which = entry.service, where.which
        if isinstance(op, protocol.Put):
            limit = min(self.max_body_bytes, max_payload(queue, which))
            try:
                data = await read_body(request.body, limit)
            except BodyTooLarge:
                raise Problem(
                    413,
                    f"the payload exceeds the {which} queue's limit of {limit} bytes "
                    "(queue.source/sink.max_payload_size_kb)",
                    service=name,
                ) from None
            except ClientGone:
                return
            if content_md5 is not None and not body_matches(content_md5, (data,)):
                raise unauthorized(name, md5_refusal().detail)
            try:
                index, rid = await streams.put(
                    name,
                    which,
                    data,
                    op.tags,
                    limits(queue, which),
                    path=where.path or "",
                    priority=op.priority and which == INPUT,
                )
            except QueueFull as e:
                raise Problem(429, str(e), service=name, headers={"Retry-After": "1"}) from e
            self.metrics.queue_puts.inc((name, which))
            if which == INPUT and not entry.endpoints and entry.wakeable:
                self._wake(name)
            _answer(request, 200, str(index).encode(), [(REQUEST_ID, rid.encode())])
        elif isinstance(op, protocol.Get):
            items = await self._get(streams, name, which, op)
            self.metrics.queue_gets.inc((name, which), len(items))
            accept = request.hmap.get(b"accept", b"")
            if frames.PROTOBUF in accept:
                body, kind = frames.encode_list(items), frames.PROTOBUF
            else:
                body, kind = frames.encode_json(items), b"application/json"
            _answer(request, 200, body, [(b"content-type", kind)])
        elif isinstance(op, protocol.Attributes):
            attrs = await streams.attributes(name, which)
            _json(request, _attributes(name, which, queue, attrs))
        elif isinstance(op, protocol.Search):
            found = await streams.range(name, which, op.index, 1)
            if not found or found[0].index != op.index:
                raise Problem(404, f"no entry with index {op.index} in the {which} queue")
            _json(request, await _search(streams, name, which, found[0]))
        elif isinstance(op, protocol.Delete):
            n = await streams.delete_indexes(name, which, op.indexes)
            if n == 0:
                raise Problem(
                    404, f"none of the indexes {list(op.indexes)} is in the {which} queue"
                )
            _answer(request, 200, b"OK", [(b"content-type", b"text/plain")])
        elif isinstance(op, protocol.Truncate):
            await streams.truncate(name, which, op.index)
            _answer(request, 200, b"OK", [(b"content-type", b"text/plain")])
        elif isinstance(op, protocol.Commit):
            gid = request.hmap.get(GID, DEFAULT_GID.encode()).decode()
            uid = request.hmap.get(UID, b"").decode()
            n = await streams.ack(name, which, gid, op.indexes)
            event = self.commits.get((name, which, gid, uid))
            if event is not None:
                event.set()
            if n == 0:
                raise Problem(
                    404, f"none of the indexes {list(op.indexes)} is in the {which} queue"
                )
            _answer(request, 200, b"OK", [(b"content-type", b"text/plain")])
        elif isinstance(op, protocol.Watch):
            await self._watch(request, streams, name, which, op)

    async def _get(
        self, streams: Streams, name: str, which: str, op: protocol.Get
    ) -> list[frames.Item]:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + op.timeout_s
        after: bytes | None = None  # where the wait for new entries starts
        taken = False  # read and deleted in one step (see Streams.take)
        while True:
            if op.request_id is not None:
                one = await streams.by_request_id(name, which, op.request_id)
                found = [one] if one is not None else []
            elif op.auto_delete and not op.tags:
                found = await streams.take(name, which, op.index, op.length)
                taken = True
            else:
                # With a tag filter, read ahead for the entries it leaves out.
                count = op.length * 4 + 16 if op.tags else op.length
                found = [
                    e
                    for e in await streams.range(name, which, op.index, count)
                    if all(e.tags.get(k) == v for k, v in op.tags.items())
                ][: op.length]
            left = deadline - loop.time()
            if found or left <= 0:
                break
            if after is None:
                # Read the newest id, then look once more: what came in between is seen.
                after = await streams.last_id(name, which)
                continue
            after, _ = await streams.wait_after(name, which, after, left)
        if op.auto_delete and found and not taken:
            await streams.delete(name, which, found)
        return [e.item() for e in found]

    def _wake(self, name: str) -> None:
        """A put to a service at zero asks for a replica once (not once per put)."""
        if self.wake is None or name in self._waking:
            return
        task = asyncio.create_task(self._ask(name))
        self._waking[name] = task

    async def _ask(self, name: str) -> None:
        assert self.wake is not None
        try:
            await self.wake(name)
        except Exception as e:
            log.warning("waking %s for its queued work failed: %s", name, e)
        finally:
            await asyncio.sleep(1.0)  # puts in the next second ride on this wake-up
            self._waking.pop(name, None)

    async def _watch(
        self, request: Request, streams: Streams, name: str, which: str, op: protocol.Watch
    ) -> None:
        key = request.hmap.get(b"sec-websocket-key")
        transport = request.conn.transport
        if key is None or transport is None:
            raise Problem(400, "a watch is a WebSocket: send Sec-WebSocket-Key")
        gid = request.hmap.get(GID, DEFAULT_GID.encode()).decode()
        uid = request.hmap.get(UID, b"").decode() or str(uuid.uuid4())
        start = "0" if op.index <= 1 else f"{op.index - 1}-0"
        await streams.ensure_group(name, which, gid, start)
        request.conn.write(websocket.handshake(key))
        sock = websocket.take_over(cast(Any, transport))
        wake = self.commits.setdefault((name, which, gid, uid), asyncio.Event())
        try:
            await self._push(sock, streams, name, which, gid, uid, op, wake)
        except QueueUnavailable as e:
            log.warning("watch of %s/%s ended: %s", name, which, e)
        finally:
            self.commits.pop((name, which, gid, uid), None)
            sock.close()

    async def _push(
        self,
        sock: websocket.Socket,
        streams: Streams,
        name: str,
        which: str,
        gid: str,
        uid: str,
        op: protocol.Watch,
        wake: asyncio.Event,
    ) -> None:
        def send(entries: list[Entry]) -> list[Entry]:
            sent = [e for e in entries if all(e.tags.get(k) == v for k, v in op.tags.items())]
            for e in sent:
                sock.send(frames.encode_frame(e.item(index_only=op.index_only)))
            self.metrics.queue_gets.inc((name, which), len(sent))
            return sent

        async def commit(entries: list[Entry]) -> None:
            if op.auto_commit and entries:
                await streams.ack(name, which, gid, [e.index for e in entries])

        # What this consumer held when it last went away comes first.
        await commit(
            send(await streams.read_group(name, which, gid, uid, op.window, None, own_pending=True))
        )
        closed = asyncio.ensure_future(sock.closed.wait())
        try:
            while not sock.closed.is_set():
                held = 0
                if not op.auto_commit:
                    held = sum(
                        1
                        for p in await streams.pending(name, which, gid, 10_000)
                        if p.consumer == uid
                    )
                stale = [
                    p.index
                    for p in await streams.pending(name, which, gid, op.window)
                    if p.consumer != uid and p.idle_ms >= self.claim_idle_s * 1000
                ]
                free = op.window - held
                if free > 0 and stale:
                    await commit(send(await streams.claim(name, which, gid, uid, stale[:free])))
                    continue
                if free <= 0:
                    wake.clear()
                    waiter = asyncio.ensure_future(wake.wait())
                    await asyncio.wait(
                        {waiter, closed}, timeout=1.0, return_when=asyncio.FIRST_COMPLETED
                    )
                    waiter.cancel()
                    continue
                read = asyncio.ensure_future(streams.read_group(name, which, gid, uid, free, 1.0))
                await asyncio.wait({read, closed}, return_when=asyncio.FIRST_COMPLETED)
                if not read.done():
                    read.cancel()
                    with contextlib.suppress(asyncio.CancelledError, QueueUnavailable):
                        await read
                    break
                await commit(send(read.result()))
        finally:
            closed.cancel()


def _answer(request: Request, status: int, body: bytes, headers: list[tuple[bytes, bytes]]) -> None:
    request.conn.write_response(status, [*headers, (b"cache-control", b"no-store")], body)


def _json(request: Request, doc: Any) -> None:
    _answer(request, 200, json.dumps(doc).encode(), [(b"content-type", b"application/json")])


def _attributes(name: str, which: str, queue: QueueRoute, attrs: dict[str, Any]) -> dict[str, str]:
    """EAS's attribute names; every value a string, as its queue service answers."""
    out = {
        "meta.name": f"{name}/sink" if which != INPUT else name,
        "stream.length": str(attrs["length"]),
        "stream.maxLength": str(limits(queue, which).max_length),
        "stream.approxMaxLength": str(limits(queue, which).max_length),
        "stream.maxPayloadBytes": str(max_payload(queue, which)),
        "consumers.count": str(len(attrs["consumers"])),
        "consumers.list": json.dumps(attrs["consumers"]),
    }
    if attrs["first"] is not None:
        out["stream.firstEntry"] = str(attrs["first"])
    if attrs["last"] is not None:
        out["stream.lastEntry"] = str(attrs["last"])
    if which == INPUT:
        out["window"] = str(queue.window)
    return out


async def _search(streams: Streams, name: str, which: str, entry: Entry) -> dict[str, Any]:
    """Where one entry stands: still waiting, or held by a consumer (which, how often)."""
    from gateway.queue.streams import REPLICAS_GROUP

    doc: dict[str, Any] = {"index": entry.index, "requestId": entry.request_id, "tags": entry.tags}
    held = await streams.pending_of(name, which, REPLICAS_GROUP, entry.index)
    if held is None:
        doc["status"] = "Queued"
    else:
        doc.update(
            status="Processing",
            consumer=held.consumer,
            deliveries=held.deliveries,
            idleMs=held.idle_ms,
        )
    return doc
