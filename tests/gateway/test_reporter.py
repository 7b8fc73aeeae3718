"""The gateway's load report: what one process counts (fake clock) and what it pushes to
the control plane with its route-reader token — only services with traffic, once more when they
go quiet, nothing when idle."""

from __future__ import annotations

import asyncio
import contextlib
import time
import urllib.request
from collections.abc import Iterator

import pytest
from aiohttp import web

from contract.wire import SIGNALS_PATH, LoadReport
from gateway.reporter import LoadReporter
from gateway.routing.limits import Activity, InFlight
from tests.gateway.conftest import GatewayFactory
from tests.gateway.harness import SERVICE, TOKEN, Echo, LoopThread, route, table


class Clock:
    def __init__(self) -> None:
        self.now = 10.0

    def __call__(self) -> float:
        return self.now


def test_collect_counts_requests_and_mean_in_flight() -> None:
    clock = Clock()
    activity = Activity()
    reporter = LoadReporter("http://cp", "admin", activity, clock=clock)
    a, b = InFlight(clock=clock), InFlight(clock=clock)
    assert reporter.collect() is None  # idle: nothing to send

    for inf, name in ((a, "a"), (a, "a"), (b, "b")):
        assert inf.try_enter()
        if not inf.active:
            activity.touch(name, inf)
    clock.now += 0.5
    a.leave()
    b.leave()
    clock.now += 0.5  # over 1 s: a had 2 in flight for 0.5 s, then 1; b had 1 for 0.5 s
    got = reporter.collect()
    assert got is not None and got.interval_s == pytest.approx(1.0)
    # object: the expected side holds pytest.approx where the floats are
    loads: dict[str, tuple[int, object]] = {
        s.service: (s.requests, s.concurrency) for s in got.services
    }
    assert loads == {"a": (2, pytest.approx(1.5)), "b": (1, pytest.approx(0.5))}

    clock.now += 1.0  # a's last request still runs: reported again; b went quiet: a zero
    got = reporter.collect()
    assert got is not None
    loads = {s.service: (s.requests, s.concurrency) for s in got.services}
    assert loads == {"a": (0, pytest.approx(1.0)), "b": (0, 0.0)}
    a.leave()
    clock.now += 1.0
    got = reporter.collect()
    assert got is not None and {s.service: s.requests for s in got.services} == {"a": 0}
    clock.now += 1.0
    assert reporter.collect() is not None  # a's quiet zero
    assert reporter.collect() is None


class Receiver:
    def __init__(self) -> None:
        self.reports: list[tuple[str, LoadReport]] = []
        self.runner: web.AppRunner | None = None
        self.url = ""

    async def handle(self, request: web.Request) -> web.Response:
        body = LoadReport.model_validate_json(await request.read())
        self.reports.append((request.headers.get("Authorization", ""), body))
        return web.Response(status=204)

    async def start(self) -> None:
        app = web.Application()
        app.router.add_post(SIGNALS_PATH, self.handle)
        self.runner = web.AppRunner(app, access_log=None)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        self.url = f"http://127.0.0.1:{self.runner.addresses[0][1]}"


@pytest.fixture
def receiver(lt: LoopThread) -> Iterator[Receiver]:
    r = Receiver()
    lt.run(r.start())
    yield r
    assert r.runner is not None
    lt.run(r.runner.cleanup())


def until(check: object, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():  # type: ignore[operator]
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.02)


def test_gateway_pushes_its_load_with_its_routes_token(
    make_gateway: GatewayFactory, echo: Echo, receiver: Receiver
) -> None:
    gw = make_gateway(
        table(route([echo.url])),
        routes_token="routes-secret",
        controlplane_url=receiver.url,
        report_interval_s=0.1,
    )
    for _ in range(5):
        req = urllib.request.Request(
            f"{gw.url}/api/predict/{SERVICE}/v2/health/ready", headers={"Authorization": TOKEN}
        )
        with urllib.request.urlopen(req) as resp:
            assert resp.status == 200

    def counted() -> int:
        return sum(s.requests for _, r in receiver.reports for s in r.services)

    until(lambda: counted() == 5)
    until(lambda: receiver.reports[-1][1].services[0].requests == 0)  # went quiet
    auth, last = receiver.reports[-1]
    assert auth == "Bearer routes-secret" and last.services[0].service == SERVICE
    quiet = len(receiver.reports)
    time.sleep(0.4)  # four intervals with no traffic: nothing is sent
    assert len(receiver.reports) == quiet


class Counting(LoadReporter):
    """Counts its wake-ups: each one is a :meth:`collect`."""

    wakes = 0

    def collect(self) -> LoadReport | None:
        self.wakes += 1
        return super().collect()


def test_an_idle_reporter_sleeps_until_a_request_comes(lt: LoopThread, receiver: Receiver) -> None:
    activity = Activity()
    reporter = Counting(receiver.url, "routes-secret", activity, interval_s=0.05)
    task = lt.call(lambda: lt.loop.create_task(reporter.run()))
    try:
        time.sleep(0.3)  # six intervals with no traffic at all
        assert reporter.wakes == 0 and receiver.reports == []

        def one_request() -> None:
            in_flight = InFlight()
            assert in_flight.try_enter()
            activity.touch(SERVICE, in_flight)
            in_flight.leave()

        lt.call(one_request)
        until(lambda: any(s.requests == 1 for _, r in receiver.reports for s in r.services))
        first = next(r for _, r in receiver.reports if r.services[0].requests)
        assert first.interval_s < 0.5  # from the request, not from the start of the idle spell
        until(lambda: receiver.reports[-1][1].services[0].requests == 0)  # its quiet zero
        woke, sent = reporter.wakes, len(receiver.reports)
        time.sleep(0.3)
        assert (reporter.wakes, len(receiver.reports)) == (woke, sent)
    finally:
        lt.call(task.cancel)


def test_a_request_while_an_idle_reporter_stops_is_not_disturbed() -> None:
    async def scenario() -> None:
        activity = Activity()
        reporter = LoadReporter("http://127.0.0.1:9", "routes-secret", activity, interval_s=0.05)
        task = asyncio.create_task(reporter.run())
        await asyncio.sleep(0.05)  # idle: it waits for traffic
        task.cancel()  # shutting down; the request below comes before the task runs again
        in_flight = InFlight()
        assert in_flight.try_enter()
        activity.touch(SERVICE, in_flight)
        with contextlib.suppress(asyncio.CancelledError):
            await task

    asyncio.run(scenario())
