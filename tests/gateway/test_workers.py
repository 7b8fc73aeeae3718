"""Workers of one gateway show one aggregated /metrics (gateway.workers): two gateways in
one loop stand for two forked workers sharing a socket directory."""

from __future__ import annotations

import re
from pathlib import Path

from gateway.workers import WorkerPeers
from tests.gateway.conftest import GatewayFactory
from tests.gateway.harness import SERVICE, Echo, route, table
from tests.gateway.test_proxy import call

REQUESTS = re.compile(rb'openeas_gateway_requests_total\{service="svc",code="200"\} (\d+)')


def total(body: bytes) -> int:
    m = REQUESTS.search(body)
    return int(m.group(1)) if m else 0


def test_metrics_of_two_workers_add_up_on_every_scrape(
    make_gateway: GatewayFactory, echo: Echo, tmp_path: Path
) -> None:
    routes = table(route([echo.url]))
    a = make_gateway(routes, peers=WorkerPeers(tmp_path, 0))
    b = make_gateway(routes, peers=WorkerPeers(tmp_path, 1))
    sent = 0
    for through_a, through_b in ((3, 0), (0, 5), (2, 4)):
        for gw, n in ((a, through_a), (b, through_b)):
            for _ in range(n):
                assert call(gw, f"/api/predict/{SERVICE}/v2", method="POST", body=b"x")[0] == 200
        sent += through_a + through_b
        for gw in (a, b, a, b):  # whichever worker the kernel hands the scrape to
            status, _, body = call(gw, "/metrics", token=None)
            assert status == 200
            assert total(body) == sent
            count = b'openeas_gateway_request_duration_seconds_count{service="svc"} %d' % sent
            assert count in body


def test_a_worker_that_is_gone_is_left_out(
    make_gateway: GatewayFactory, echo: Echo, tmp_path: Path
) -> None:
    a = make_gateway(table(route([echo.url])), peers=WorkerPeers(tmp_path, 0))
    (tmp_path / "1.sock").touch()  # a worker that died without cleaning up
    assert call(a, f"/api/predict/{SERVICE}/v2", method="POST", body=b"x")[0] == 200
    status, _, body = call(a, "/metrics", token=None)
    assert status == 200 and total(body) == 1
