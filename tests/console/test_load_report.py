"""The gateway's load report carries what the console charts: answers, 5xx and a latency
histogram per busy service since its last report — differences of the gateway's own
Prometheus metrics, so the request path does no extra work."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import httpx

from contract.wire import LoadReport
from controlplane.api.app import create_app
from controlplane.elasticity.scaling_loop import Autoscaling
from controlplane.settings import Settings
from controlplane.store.db import make_engine, make_sessions
from controlplane.store.sealing import from_settings
from controlplane.store.services import Services
from gateway.metrics import GatewayMetrics
from gateway.reporter import LoadReporter
from gateway.routing.limits import Activity, InFlight
from testing.waiting import wait_until
from tests.controlplane.conftest import ADMIN, LiveServer, seed_spec
from tests.gateway.conftest import GatewayFactory
from tests.gateway.harness import SERVICE, TOKEN, Echo, route, table

ROUTES = "routes-token-for-console-tests"


def answer(metrics: GatewayMetrics, service: str, code: int, seconds: float) -> None:
    """What the proxy records when it answers a request."""
    metrics.requests.inc((service, str(code)))
    metrics.duration.observe((service,), seconds)


def test_each_report_carries_the_answers_since_the_last() -> None:
    metrics = GatewayMetrics()
    activity = Activity()
    reporter = LoadReporter("http://cp", "token", activity, metrics=metrics)
    svc = InFlight()

    def traffic(*answers: tuple[int, float]) -> LoadReport:
        for code, seconds in answers:
            assert svc.try_enter()
            if not svc.active:
                activity.touch("svc", svc)
            svc.leave()
            answer(metrics, "svc", code, seconds)
        got = reporter.collect()
        assert got is not None
        return got

    first = traffic((200, 0.003), (200, 0.004), (503, 0.0002))
    assert first.latency_bounds_s == list(metrics.duration.buckets)
    (load,) = first.services
    assert (load.requests, load.completed, load.errors) == (3, 3, 1)
    assert sum(load.latency) == 3 and len(load.latency) == len(first.latency_bounds_s) + 1
    assert load.latency[first.latency_bounds_s.index(0.005)] == 2  # both in (2.5, 5] ms

    (load,) = traffic((500, 0.2), (200, 0.2)).services  # only what is new
    assert (load.completed, load.errors, sum(load.latency)) == (2, 1, 2)
    assert metrics.requests.errors == {"svc": 2}  # 5xx only, by service


def test_without_metrics_the_report_is_what_older_gateways_sent() -> None:
    activity = Activity()
    svc = InFlight()
    assert svc.try_enter()
    activity.touch("svc", svc)
    got = LoadReporter("http://cp", "token", activity).collect()
    assert got is not None and got.latency_bounds_s == []
    assert got.model_dump(exclude_defaults=True)["services"] == [
        {"service": "svc", "requests": 1, "concurrency": got.services[0].concurrency}
    ]


def test_a_gateways_traffic_becomes_the_service_charts(
    make_gateway: GatewayFactory, echo: Echo, tmp_path: Path, database_url: str
) -> None:
    """A real gateway reports to a real control plane; the metrics API shows its traffic."""
    settings = Settings(
        data_dir=tmp_path, database_url=database_url, admin_token=ADMIN, routes_token=ROUTES
    )
    engine = make_engine(settings.sqlalchemy_url)
    sessions = make_sessions(engine)
    sealer = from_settings(settings.secret_key, settings.data_dir)
    scaling = Autoscaling(sessions, Services(sessions, settings.cluster_id, sealer))
    scaling.signals.leading = True  # as while its reconciler leads
    cp = LiveServer(create_app(settings, engine, autoscaling=scaling))
    admin = {"Authorization": f"Bearer {ADMIN}"}
    try:
        spec = seed_spec(name=SERVICE, metadata={"instance": 0})
        assert httpx.post(cp.url + "/api/v2/services", json=spec, headers=admin).is_success
        gw = make_gateway(
            table(route([echo.url])),
            controlplane_url=cp.url,
            admin_token=ADMIN,
            report_interval_s=0.1,
        )
        with httpx.Client(base_url=f"{gw.url}/api/predict/{SERVICE}") as c:
            for path in ["/v2/health/ready"] * 8 + ["/status/503", "/status/500"]:
                c.get(path, headers={"Authorization": TOKEN})

        def charted() -> dict[str, Any] | None:
            url = f"{cp.url}/api/v2/services/local/{SERVICE}/metrics?window=20"
            points = httpx.get(url, headers=admin).json()["Points"]
            seconds = time.time() - points[-1]["Time"]
            total = sum(p["RequestsPerSecond"] for p in points[:-1]) * 10
            total += points[-1]["RequestsPerSecond"] * max(1.0, seconds)
            errors = sum(p["ErrorsPerSecond"] for p in points[:-1]) * 10
            errors += points[-1]["ErrorsPerSecond"] * max(1.0, seconds)
            latest = [p for p in points if p["LatencyP50Ms"] is not None]
            ok = round(total) == 10 and round(errors) == 2 and latest
            return latest[-1] if ok else None

        point = wait_until(charted, 15, what="the gateway's requests in the metrics")
        assert 0 < point["LatencyP50Ms"] <= point["LatencyP99Ms"] < 1000
    finally:
        cp.stop()
        engine.dispose()
