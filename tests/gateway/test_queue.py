"""Async services end to end through a real gateway and a real Redis (127.0.0.1:6379, a key
prefix of its own per test), driven by EAS's own ``eas_prediction.QueueClient`` unchanged;
replicas are small aiohttp servers that count what they are handed at once."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import hmac
import json
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from email.utils import format_datetime
from typing import Any

import pytest
import redis
import urllib3
from aiohttp import web
from eas_prediction.exception import PredictException
from eas_prediction.queue_client import QueueClient

from contract.wire import QueueRoute, Route, RouteTable, token_digest
from gateway.route_source import ControlPlaneRouteSource
from testing.waiting import wait_until
from tests.gateway.conftest import GatewayFactory
from tests.gateway.harness import TOKEN, FakeControlPlane, LoopThread

REDIS_URL = "redis://127.0.0.1:6379/0"
SVC = "asy"


@pytest.fixture
def prefix() -> Iterator[str]:
    p = f"test-{uuid.uuid4().hex[:12]}:"
    yield p
    r = redis.Redis.from_url(REDIS_URL)
    keys = list(r.scan_iter(match=f"{p}*", count=1000))
    if keys:
        r.delete(*keys)
    r.close()


@dataclass
class Replica:
    """A processor: answers ``{"path", "echo"}`` after ``delay_s``; counts concurrency."""

    delay_s: float = 0.0
    port: int = 0
    now: int = 0
    most: int = 0
    seen: list[tuple[str, bytes]] = field(default_factory=list)
    runner: web.AppRunner | None = None
    status: int = 200
    gone: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def handle(self, request: web.Request) -> web.Response:
        body = await request.read()
        self.seen.append((request.path, body))
        self.now += 1
        self.most = max(self.most, self.now)
        try:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.gone.wait(), self.delay_s)
            if self.gone.is_set():  # killed mid-request: the connection just breaks
                assert request.transport is not None
                request.transport.abort()
                raise ConnectionResetError("replica killed")
        finally:
            self.now -= 1
        doc = {"path": request.path, "echo": body.decode()}
        return web.json_response(doc, status=self.status)

    async def start(self) -> None:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self.handle)
        self.runner = web.AppRunner(app, handle_signals=False)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", self.port)
        await site.start()
        if not self.port:
            self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]

    async def stop(self) -> None:
        self.gone.set()
        if self.runner is not None:
            await self.runner.cleanup()


def table(
    endpoints: list[str],
    *,
    version: int = 1,
    window: int = 2,
    source_max: int = 1000,
    sink_max: int = 1000,
    payload: int = 1024 * 1024,
    max_delivery: int = 3,
    wakeable: bool = False,
) -> RouteTable:
    queue = QueueRoute(
        source_max_length=source_max,
        source_max_payload_bytes=payload,
        sink_max_length=sink_max,
        sink_max_payload_bytes=payload,
        max_delivery=max_delivery,
        window=window,
        default_path="/default",
    )
    route = Route(
        service=SVC,
        token_sha256=token_digest(TOKEN),
        endpoints=endpoints,
        timeout_ms=5000,
        status="Running" if endpoints else "Stopped",
        queue=queue,
        wakeable=wakeable,
    )
    return RouteTable(version=version, routes=[route])


def tags_of(item: Any) -> dict[str, str]:
    # The SDK's generated module reads the tags map as a list of key/value entries.
    return {e.key: e.value for e in item.tags}


def client(hostport: str, name: str, token: str = TOKEN) -> QueueClient:
    c = QueueClient(hostport, name)
    c.set_token(token)
    c.set_retry_count(0)
    c.init()
    return c


def start_replica(lt: LoopThread, delay_s: float = 0.0) -> Replica:
    replica = Replica(delay_s=delay_s)
    lt.run(replica.start())
    return replica


def gateway(
    make_gateway: GatewayFactory,
    routes: RouteTable,
    prefix: str,
    claim_idle_s: float = 30,
    **kw: Any,
) -> Any:
    return make_gateway(
        routes, redis_url=REDIS_URL, queue_prefix=prefix, queue_claim_idle_s=claim_idle_s, **kw
    )


def drain(sink: QueueClient, n: int, deadline_s: float = 20.0) -> list[Any]:
    """Read ``n`` results from the sink (watching it, committing each)."""
    out: list[Any] = []
    end = time.monotonic() + deadline_s
    while len(out) < n and time.monotonic() < end:
        out += sink.get(length=100, timeout="1s")
    return out


def test_sink_put_then_get_by_request_id_and_index(
    make_gateway: GatewayFactory, prefix: str
) -> None:
    gw = gateway(make_gateway, table([]), prefix)
    sink = client(gw.hostport, f"{SVC}/sink")
    index, request_id = sink.put(b"abc", tags={"k": "v"})
    assert int(index) >= 1 and request_id
    got = sink.get(request_id=request_id, auto_delete=False)
    assert [(g.data, g.index, tags_of(g)) for g in got] == [(b"abc", int(index), {"k": "v"})]
    index2, _ = sink.put(b"def")
    got = sink.get(index=index2)
    assert [g.data for g in got] == [b"def"]
    assert sink.get(index=index2, timeout="0s") == []  # auto_delete took it
    attrs = sink.attributes()
    assert attrs["stream.length"] == "1"
    assert attrs["stream.lastEntry"] == str(index)
    assert int(attrs["stream.maxPayloadBytes"]) == 1024 * 1024
    sink.truncate(int(attrs["stream.lastEntry"]) + 1)
    assert sink.attributes()["stream.length"] == "0"


def test_get_long_polls_until_the_answer_comes(make_gateway: GatewayFactory, prefix: str) -> None:
    gw = gateway(make_gateway, table([]), prefix)
    sink = client(gw.hostport, f"{SVC}/sink")
    sink2 = client(gw.hostport, f"{SVC}/sink")
    import threading

    def later() -> None:
        time.sleep(0.5)
        sink2.put(b"late")

    threading.Thread(target=later).start()
    started = time.monotonic()
    got = sink.get(index=0, timeout="3s")
    assert [g.data for g in got] == [b"late"]
    assert 0.3 < time.monotonic() - started < 2.5


def test_input_put_is_answered_in_the_sink_by_the_replica(
    make_gateway: GatewayFactory, lt: LoopThread, prefix: str
) -> None:
    replica = start_replica(lt)
    try:
        gw = gateway(make_gateway, table([replica.url]), prefix)
        q = client(gw.hostport, SVC)
        infer = client(gw.hostport, SVC)
        infer.path_suffix = "v2/models/m/infer"
        sink = client(gw.hostport, f"{SVC}/sink")
        _, rid1 = q.put(b"bare", tags={"user": "u1"})
        _, rid2 = infer.put(b'{"inputs": []}')
        got = {}
        for rid in (rid1, rid2):
            found = sink.get(request_id=rid, timeout="5s")
            assert len(found) == 1, rid
            got[rid] = found[0]
        assert json.loads(got[rid1].data) == {"path": "/default", "echo": "bare"}
        assert json.loads(got[rid2].data)["path"] == "/v2/models/m/infer"
        assert tags_of(got[rid1])["status"] == "200"
        assert tags_of(got[rid1])["requestId"] == rid1
        assert tags_of(got[rid1])["user"] == "u1"
        assert q.attributes()["stream.length"] == "0"  # answered: gone from the input
    finally:
        lt.run(replica.stop())


def test_each_replica_holds_at_most_its_window(
    make_gateway: GatewayFactory, lt: LoopThread, prefix: str
) -> None:
    replica = start_replica(lt, delay_s=0.3)
    try:
        gw = gateway(make_gateway, table([replica.url], window=2), prefix)
        q = client(gw.hostport, SVC)
        sink = client(gw.hostport, f"{SVC}/sink")
        for i in range(8):
            q.put(str(i).encode())
        results = drain(sink, 8)
        assert sorted(json.loads(r.data)["echo"] for r in results) == [str(i) for i in range(8)]
        assert replica.most == 2
    finally:
        lt.run(replica.stop())


def test_a_put_is_queued_with_no_replica_and_served_when_one_comes(
    make_gateway: GatewayFactory, lt: LoopThread, prefix: str
) -> None:
    gw = gateway(make_gateway, table([]), prefix)
    q = client(gw.hostport, SVC)
    sink = client(gw.hostport, f"{SVC}/sink")
    _, rid = q.put(b"early")
    assert q.attributes()["stream.length"] == "1"
    replica = start_replica(lt)
    try:
        gw.publish(table([replica.url], version=2))
        found = sink.get(request_id=rid, timeout="5s")
        assert json.loads(found[0].data)["echo"] == "early"
    finally:
        lt.run(replica.stop())


def test_a_dead_replicas_messages_go_to_another_and_are_answered_once(
    make_gateway: GatewayFactory, lt: LoopThread, prefix: str
) -> None:
    slow = start_replica(lt, delay_s=30.0)  # takes its window and never answers in time
    fast = start_replica(lt)
    try:
        gw = gateway(make_gateway, table([slow.url], window=3), prefix)
        q = client(gw.hostport, SVC)
        sink = client(gw.hostport, f"{SVC}/sink")
        rids = [q.put(f"m{i}".encode())[1] for i in range(10)]
        deadline = time.monotonic() + 5
        while len(slow.seen) < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(slow.seen) == 3
        # The slow replica dies: it leaves the route table, another replica is ready.
        gw.publish(table([fast.url], version=2, window=3))
        lt.run(slow.stop())
        results = drain(sink, 10)
        assert sorted(tags_of(r)["requestId"] for r in results) == sorted(rids)
        assert sink.attributes()["stream.length"] == "0"  # nothing answered twice
        assert q.attributes()["stream.length"] == "0"
    finally:
        lt.run(fast.stop())


def test_full_queue_is_429_and_too_large_is_413(make_gateway: GatewayFactory, prefix: str) -> None:
    gw = gateway(make_gateway, table([], source_max=2, payload=1024), prefix)
    q = client(gw.hostport, SVC)
    q.put(b"1")
    q.put(b"2")
    with pytest.raises(PredictException) as full:
        q.put(b"3")
    assert full.value.code == 429
    assert b"maximum of 2" in full.value.message
    with pytest.raises(PredictException) as large:
        q.put(b"x" * 2048)
    assert large.value.code == 413


def test_search_delete_and_unknown_index(make_gateway: GatewayFactory, prefix: str) -> None:
    gw = gateway(make_gateway, table([]), prefix)
    q = client(gw.hostport, SVC)
    index, rid = q.put(b"x")
    found = q.search(int(index))
    assert found["index"] == int(index) and found["requestId"] == rid
    assert found["status"] == "Queued"
    assert q.search(int(index) + 100) == {}  # 404 to the client
    assert q.delete(int(index)) == "OK"
    assert q.attributes()["stream.length"] == "0"
    http = urllib3.PoolManager()
    resp = http.request(
        "DELETE",
        f"{gw.url}/api/predict/{SVC}?_indexes_={index}",
        headers={"Authorization": TOKEN},
    )
    assert resp.status == 404


def test_token_is_required_raw_or_bearer(make_gateway: GatewayFactory, prefix: str) -> None:
    gw = gateway(make_gateway, table([]), prefix)
    http = urllib3.PoolManager()
    url = f"{gw.url}/api/predict/{SVC}/sink?_attrs_=true"
    assert http.request("GET", url).status == 401
    assert http.request("GET", url, headers={"Authorization": "wrong" * 4}).status == 401
    ok = http.request("GET", url, headers={"Authorization": f"Bearer {TOKEN}"})
    assert ok.status == 200 and json.loads(ok.data)["stream.length"] == "0"


def test_bad_query_names_the_parameter(make_gateway: GatewayFactory, prefix: str) -> None:
    gw = gateway(make_gateway, table([]), prefix)
    http = urllib3.PoolManager()
    resp = http.request(
        "GET", f"{gw.url}/api/predict/{SVC}?_length_=lots", headers={"Authorization": TOKEN}
    )
    assert resp.status == 400
    assert "_length_" in json.loads(resp.data)["detail"]


def test_without_redis_an_async_service_answers_503(make_gateway: GatewayFactory) -> None:
    gw = make_gateway(table([]))
    http = urllib3.PoolManager()
    resp = http.request(
        "POST", f"{gw.url}/api/predict/{SVC}", body=b"x", headers={"Authorization": TOKEN}
    )
    assert resp.status == 503
    assert "OPENEAS_REDIS_URL" in json.loads(resp.data)["detail"]


def test_watch_with_auto_commit(make_gateway: GatewayFactory, prefix: str) -> None:
    gw = gateway(make_gateway, table([]), prefix)
    sink = client(gw.hostport, f"{SVC}/sink")
    for x in range(10):
        sink.put(str(x).encode())
    watcher = sink.watch(0, 5, auto_commit=True)
    seen = []
    for x in watcher.run():
        seen.append(int(x.data.decode()))
        if len(seen) == 10:
            break
    watcher.close()
    assert seen == list(range(10))
    assert sink.attributes()["stream.length"] == "0"


def test_watch_with_manual_commit_keeps_the_window(
    make_gateway: GatewayFactory, prefix: str
) -> None:
    gw = gateway(make_gateway, table([]), prefix)
    sink = client(gw.hostport, f"{SVC}/sink")
    for x in range(6):
        sink.put(str(x).encode())
    watcher = sink.watch(0, 2, auto_commit=False)
    seen = []
    for x in watcher.run():
        seen.append(int(x.data.decode()))
        pending = json.loads(sink.attributes()["consumers.list"])
        assert all(c["pending"] <= 2 for c in pending)
        sink.commit(x.index)
        if len(seen) == 6:
            break
    watcher.close()
    assert seen == list(range(6))
    assert sink.attributes()["stream.length"] == "0"


def test_a_replica_dead_but_still_listed_loses_its_messages_to_the_others(
    make_gateway: GatewayFactory, lt: LoopThread, prefix: str
) -> None:
    dying = start_replica(lt, delay_s=30.0)
    alive = start_replica(lt, delay_s=0.05)
    try:
        gw = gateway(make_gateway, table([dying.url, alive.url], window=3), prefix)
        q = client(gw.hostport, SVC)
        sink = client(gw.hostport, f"{SVC}/sink")
        rids = [q.put(f"m{i}".encode())[1] for i in range(20)]
        deadline = time.monotonic() + 5
        while len(dying.seen) < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
        lt.run(dying.stop())  # its calls break and its port refuses; the table still lists it
        results = drain(sink, 20)
        assert sorted(tags_of(r)["requestId"] for r in results) == sorted(rids)
        time.sleep(0.5)
        assert sink.attributes()["stream.length"] == "0"  # nothing answered twice
        assert q.attributes()["stream.length"] == "0"
    finally:
        lt.run(alive.stop())


def test_queue_metrics(make_gateway: GatewayFactory, lt: LoopThread, prefix: str) -> None:
    replica = start_replica(lt)
    try:
        gw = gateway(make_gateway, table([replica.url]), prefix)
        q = client(gw.hostport, SVC)
        sink = client(gw.hostport, f"{SVC}/sink")
        for i in range(3):
            q.put(str(i).encode())
        assert len(drain(sink, 3)) == 3
        time.sleep(2.5)  # a consumer turn reads the lengths
        text = urllib3.PoolManager().request("GET", f"{gw.url}/metrics").data.decode()
        assert f'openeas_gateway_queue_puts_total{{service="{SVC}",queue="input"}} 3' in text
        assert f'openeas_gateway_queue_gets_total{{service="{SVC}",queue="sink"}} 3' in text
        assert f'openeas_gateway_queue_answered_total{{service="{SVC}"}} 3' in text
        assert f'openeas_gateway_queue_length{{service="{SVC}",queue="input"}} 0' in text
    finally:
        lt.run(replica.stop())


def test_a_put_wakes_a_service_at_zero_and_is_answered_at_once(
    make_gateway: GatewayFactory, lt: LoopThread, prefix: str
) -> None:
    admin = "admin-" + "a" * 26
    cp = FakeControlPlane(admin, table([], wakeable=True))
    lt.run(cp.start())
    try:
        source = ControlPlaneRouteSource(cp.url, admin, wait_s=2.0, backoff_max_s=0.2)
        gw = make_gateway(
            source=source,
            controlplane_url=cp.url,
            routes_token=admin,
            report_interval_s=0,
            redis_url=REDIS_URL,
            queue_prefix=prefix,
        )
        q = client(gw.hostport, SVC)
        started = time.monotonic()
        for i in range(3):
            q.put(str(i).encode())
        assert time.monotonic() - started < 2  # answered at once, not held
        deadline = time.monotonic() + 5
        while not cp.wakes and time.monotonic() < deadline:
            time.sleep(0.05)
        assert cp.wakes == [SVC]  # one wake-up for the three puts
        assert q.attributes()["stream.length"] == "3"
    finally:
        lt.run(cp.stop())


def test_a_priority_put_is_served_before_the_others(
    make_gateway: GatewayFactory, lt: LoopThread, prefix: str
) -> None:
    replica = start_replica(lt, delay_s=0.3)
    try:
        gw = gateway(make_gateway, table([replica.url], window=1), prefix)
        q = client(gw.hostport, SVC)
        sink = client(gw.hostport, f"{SVC}/sink")
        for i in range(4):
            q.put(f"n{i}".encode())
        q.put(b"p", tags={"_priority_": "1"})
        assert len(drain(sink, 5)) == 5
        assert [body for _, body in replica.seen] == [b"n0", b"p", b"n1", b"n2", b"n3"]
    finally:
        lt.run(replica.stop())


def test_a_watcher_that_left_has_its_items_pushed_to_another(
    make_gateway: GatewayFactory, prefix: str
) -> None:
    gw = gateway(make_gateway, table([]), prefix, claim_idle_s=0.5)
    sink = client(gw.hostport, f"{SVC}/sink")
    for x in range(4):
        sink.put(str(x).encode())
    first = QueueClient(gw.hostport, f"{SVC}/sink")
    first.set_token(TOKEN)
    first.init(uid="first")
    watcher = first.watch(0, 2, auto_commit=False)
    held = []
    for x in watcher.run():
        held.append(int(x.data.decode()))
        if len(held) == 2:
            break
    watcher.close()  # gone without committing the two it holds
    second = QueueClient(gw.hostport, f"{SVC}/sink")
    second.set_token(TOKEN)
    second.init(uid="second")
    watcher = second.watch(0, 4, auto_commit=True)
    seen = []
    for x in watcher.run():
        seen.append(int(x.data.decode()))
        if len(seen) == 4:
            break
    watcher.close()
    assert held == [0, 1] and sorted(seen) == [0, 1, 2, 3]
    time.sleep(0.3)
    assert sink.attributes()["stream.length"] == "0"


def signed(path: str, body: bytes, key: str, *, md5_of: bytes | None = None) -> dict[str, str]:
    """EAS's signature headers for a POST of ``body`` to ``path``, made with ``key``
    (``md5_of``: declare another body's MD5, as a tampered call would)."""
    md5 = hashlib.md5(body if md5_of is None else md5_of).hexdigest()
    date = format_datetime(datetime.now(UTC), usegmt=True)
    to_sign = f"POST\n{md5}\napplication/octet-stream\n{date}\n{path}"
    mac = hmac.new(key.encode(), to_sign.encode(), hashlib.sha1).digest()
    return {
        "Authorization": "EAS " + base64.b64encode(mac).decode(),
        "Content-MD5": md5,
        "Content-Type": "application/octet-stream",
        "Date": date,
    }


def test_a_signed_put_is_queued_and_a_tampered_one_refused(
    make_gateway: GatewayFactory, prefix: str
) -> None:
    routes = table([])
    keyed = routes.routes[0].model_copy(update={"token": TOKEN})  # what signatures use
    gw = gateway(make_gateway, routes.model_copy(update={"routes": [keyed]}), prefix)
    http = urllib3.PoolManager()
    path = f"/api/predict/{SVC}"
    ok = http.request("POST", gw.url + path, body=b"job", headers=signed(path, b"job", TOKEN))
    assert ok.status == 200, ok.data
    assert ok.headers["X-Eas-Queueservice-Request-Id"]
    assert client(gw.hostport, SVC).attributes()["stream.length"] == "1"
    tampered = signed(path, b"job", TOKEN, md5_of=b"another job")
    refused = http.request("POST", gw.url + path, body=b"job", headers=tampered)
    assert refused.status == 401
    assert "Content-MD5" in json.loads(refused.data)["detail"]
    wrong = http.request("POST", gw.url + path, body=b"job", headers=signed(path, b"job", "x"))
    assert wrong.status == 401
    assert client(gw.hostport, SVC).attributes()["stream.length"] == "1"  # neither queued


def test_concurrent_gets_never_get_one_entry_twice(
    make_gateway: GatewayFactory, prefix: str
) -> None:
    import concurrent.futures

    gw = gateway(make_gateway, table([]), prefix)
    sink = client(gw.hostport, f"{SVC}/sink")
    for x in range(60):
        sink.put(str(x).encode())

    def drain_one(_: int) -> list[int]:
        c = client(gw.hostport, f"{SVC}/sink")
        out: list[int] = []
        while got := c.get(length=2, timeout="0s"):
            out += [int(g.data.decode()) for g in got]
        return out

    with concurrent.futures.ThreadPoolExecutor(6) as pool:
        parts = list(pool.map(drain_one, range(6)))
    everything = [x for part in parts for x in part]
    assert sorted(everything) == list(range(60))  # each once


def test_closing_the_consumers_stops_every_consumer_and_a_later_table_starts_none(
    make_gateway: GatewayFactory, lt: LoopThread, prefix: str
) -> None:
    replica = start_replica(lt)
    try:
        gw = gateway(make_gateway, table([replica.url]), prefix)
        consumers = gw.runner.gateway.consumers
        assert consumers is not None
        wait_until(lambda: len(consumers.running) == 1, 5)
        tasks = [r.task for r in consumers.running.values()]
        lt.run(consumers.close())
        gw.publish(table([replica.url], version=2))  # a route change after the close
        time.sleep(0.1)
        assert consumers.running == {}
        assert all(t.done() for t in tasks)
    finally:
        lt.run(replica.stop())
