"""The control plane's ``/metrics``: the exposition (pure, as a table), what the reconciler
and the autoscaler count (the reconciler's harness, SQLite and PostgreSQL), and ``openeas
up``'s public ``/metrics`` carrying the control plane's series beside the gateway's (a real
``openeas up`` process, read over HTTP)."""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest

from controlplane.elasticity.scaling_loop import Autoscaling
from controlplane.metrics import NAMES, ControlPlaneMetrics, Probe, ServiceRow, by_status
from testing.waiting import WaitTimeout, wait_until
from tests.controlplane.conftest import seed_spec
from tests.controlplane.test_autoscaling import report
from tests.controlplane.test_reconciler import Harness, harness  # noqa: F401  (fixture)
from tests.fixtures_triton import free_port
from tests.tasks import stop

BIN = Path(sys.executable).parent


def value(text: str, series: str) -> float:
    """The value of exactly ``series`` (name and labels as exposed) in ``text``."""
    found = re.search(rf"^{re.escape(series)} (\S+)$", text, re.M)
    assert found is not None, f"{series} not in:\n{text}"
    return float(found.group(1))


@pytest.mark.parametrize(
    ("statuses", "expected"),
    [
        ([], {}),
        (["Running", "Running", "Failed"], {"Running": 2, "Failed": 1}),
        (["Stopped"], {"Stopped": 1}),
    ],
)
def test_services_by_status_show_every_status(
    statuses: list[str], expected: dict[str, int]
) -> None:
    rows = [ServiceRow(f"s{i}", s, 1, 1) for i, s in enumerate(statuses)]
    counts = by_status(rows)
    for (status,), n in counts.items():
        assert n == expected.get(status, 0)
    assert {"Creating", "Running", "Failed", "Stopped"} <= {k[0] for k in counts}


async def test_a_scrape_reads_the_probe_and_names_everything_with_the_prefix() -> None:
    m = ControlPlaneMetrics()

    async def rows() -> list[ServiceRow]:
        return [ServiceRow("a", "Running", 3, 2), ServiceRow("b", "Waiting", 1, 0)]

    async def version() -> int:
        return 42

    m.probe = Probe(rows, version, lambda: True, lambda: 5)
    m.decided("a", 2, 3, "Autoscaled")
    m.decided("a", 0, 1, "Woken")
    m.reconcile_duration.observe(("ok",), 0.03)
    text = (await m.render()).decode()
    assert value(text, "openeas_controlplane_leader") == 1
    assert value(text, "openeas_controlplane_reconcile_queue_depth") == 5
    assert value(text, 'openeas_controlplane_services{status="Running"}') == 1
    assert value(text, 'openeas_controlplane_services{status="Failed"}') == 0
    assert value(text, 'openeas_controlplane_service_replicas{service="a",state="desired"}') == 3
    assert value(text, 'openeas_controlplane_service_replicas{service="a",state="running"}') == 2
    assert value(text, "openeas_controlplane_route_table_version") == 42
    decisions = "openeas_controlplane_autoscaler_decisions_total"
    assert value(text, f'{decisions}{{service="a",direction="up",reason="Autoscaled"}}') == 1
    assert value(text, f'{decisions}{{service="a",direction="up",reason="Woken"}}') == 1
    reconcile = "openeas_controlplane_reconcile_duration_seconds"
    assert value(text, f'{reconcile}_bucket{{result="ok",le="0.05"}}') == 1
    assert value(text, f'{reconcile}_bucket{{result="ok",le="0.025"}}') == 0
    assert value(text, f'{reconcile}_count{{result="ok"}}') == 1
    for line in text.splitlines():
        name = line.split()[2] if line.startswith("#") else re.split(r"[{ ]", line)[0]
        assert name.startswith("openeas_controlplane_"), line
        if not line.startswith("#"):
            assert name in NAMES, line


async def test_a_database_away_leaves_the_counted_series_and_counts_the_failure() -> None:
    m = ControlPlaneMetrics()

    async def broken() -> list[ServiceRow]:
        raise OSError("connection refused")

    m.probe = Probe(services=broken)
    m.decided("a", 3, 1, "Autoscaled")
    text = (await m.render()).decode()
    assert value(text, "openeas_controlplane_scrape_errors_total") == 1
    assert value(text, "openeas_controlplane_leader") == 0  # no reconciler in this process
    assert "openeas_controlplane_services{" not in text
    decisions = "openeas_controlplane_autoscaler_decisions_total"
    assert value(text, f'{decisions}{{service="a",direction="down",reason="Autoscaled"}}') == 1


AUTO = {
    "min": 1,
    "max": 4,
    "scaleStrategies": [{"metricName": "concurrency", "threshold": 2}],
    "behavior": {"scaleDown": {"stabilizationWindowSeconds": 1}},
}


@pytest.fixture
async def counted(
    harness: Harness,  # noqa: F811
) -> AsyncIterator[tuple[Harness, Autoscaling, ControlPlaneMetrics]]:
    metrics = ControlPlaneMetrics()
    scaling = Autoscaling(harness.sessions, harness.services, tick_s=0.1, metrics=metrics)
    reconciler = harness.make_reconciler(lease_ttl=1.0, autoscaling=scaling, metrics=metrics)
    metrics.probe.leading = lambda: reconciler.is_leader
    metrics.probe.queue_depth = lambda: reconciler.queue_depth
    task = asyncio.create_task(reconciler.run())
    await harness.until(lambda: reconciler.is_leader)
    yield harness, scaling, metrics
    await stop(task)


async def test_the_leader_counts_reconciles_and_autoscaler_decisions(
    counted: tuple[Harness, Autoscaling, ControlPlaneMetrics],
) -> None:
    h, scaling, metrics = counted
    h.services.create(seed_spec(autoscaler=AUTO))
    scaling.signals.receive(report("gw", triton_test=(50, 7.4)))
    await h.until(lambda: h.row().spec.metadata.instance == 4)
    # Counted once the write came back (the row may show it a moment before).
    await h.until(lambda: ("triton_test", "up", "Autoscaled") in metrics.decisions.values)
    text = (await metrics.render()).decode()
    assert value(text, "openeas_controlplane_leader") == 1
    decisions = "openeas_controlplane_autoscaler_decisions_total"
    labels = '{service="triton_test",direction="up",reason="Autoscaled"}'
    assert value(text, decisions + labels) == 1
    reconciled = metrics.reconcile_duration.hist
    # The create, then the scale's new generation.
    await h.until(lambda: sum(reconciled.get(("ok",), ([0], [0.0]))[0]) >= 2)
    # A retry may be counted (the scale and a status write racing: optimistic locking);
    # never an error.
    assert ("error",) not in reconciled


@pytest.fixture
def up(tmp_path: Path) -> Iterator[str]:
    """``openeas up`` as a process (no service: no Triton needed); its public URL."""
    port = free_port()
    env = {
        **os.environ,
        "HOME": str(tmp_path / "home"),
        "OPENEAS_DATA_DIR": str(tmp_path / "data"),
    }
    env = {k: v for k, v in env.items() if not k.startswith(("EAS_", "OPENEAS_ADMIN"))}
    log = (tmp_path / "up.log").open("w")
    proc = subprocess.Popen(
        [str(BIN / "openeas"), "up", "--port", str(port), "--grpc-port", "0", "--no-profile"],
        cwd=tmp_path,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"

    def ready() -> bool:
        try:
            return httpx.get(url + "/readyz", timeout=1).status_code == 200
        except httpx.TransportError:
            return False

    try:
        try:
            wait_until(ready, 60, interval=0.1, what="openeas up answers /readyz")
        except WaitTimeout as e:
            raise AssertionError((tmp_path / "up.log").read_text()[-3000:]) from e
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def test_openeas_up_serves_both_planes_series_on_one_public_metrics(
    up: str, tmp_path: Path
) -> None:
    token = (tmp_path / "data" / "admin_token").read_text().strip()
    auth = {"Authorization": f"Bearer {token}"}
    assert httpx.get(f"{up}/api/v2/services", headers=auth).status_code == 200
    assert httpx.get(f"{up}/api/v2/services/local/nothing_here", headers=auth).status_code == 404

    def scraped() -> str:
        r = httpx.get(f"{up}/metrics")
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("text/plain; version=0.0.4")
        return r.text

    wait_until(lambda: value(scraped(), "openeas_controlplane_leader") == 1, 10, what="up leads")
    text = scraped()
    assert "# TYPE openeas_gateway_requests_total counter" in text
    assert "openeas_gateway_control_plane_up " in text
    api = "openeas_controlplane_api_request_duration_seconds_count"
    # By route template, never the concrete path (a name a caller chose).
    assert value(text, f'{api}{{route="/api/v2/services",method="GET",code="200"}}') == 1
    one = "/api/v2/services/{cluster}/{name}"
    assert value(text, f'{api}{{route="{one}",method="GET",code="404"}}') == 1
    assert "nothing_here" not in text
    assert value(text, 'openeas_controlplane_services{status="Running"}') == 0
    assert value(text, "openeas_controlplane_route_table_version") >= 0
