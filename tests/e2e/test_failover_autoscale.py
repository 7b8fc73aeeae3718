"""The autoscaler survives its leader: two ``openeas controlplane`` processes on PostgreSQL
with the Kubernetes runtime against the API stand-in and its kubelet (as in
:mod:`tests.e2e.test_k8s_outage`), the leader SIGKILLed, then load reported to the survivor
the way a gateway reports it (``POST /internal/v1/signals`` with the routes token; 421 until
it leads). The survivor takes the lease within the lease plus 1 s, decides a scale-up on that
load, writes it (event ``Autoscaled``), its reconciler rolls the Deployment to the new count,
and its ``/metrics`` shows it leading and the decision counted. Prints the times measured."""

from __future__ import annotations

import re
import signal
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from testing.waiting import wait_until
from tests.e2e.test_k8s_outage import (
    LEASE_S,
    ROUTES,
    SERVICE,
    SPEC,
    Api,
    Cluster,
    Lease,
    pg_url,  # noqa: F401  (fixture)
)

pytestmark = pytest.mark.slow

AUTOSCALED = {
    **SPEC,
    "metadata": {**SPEC["metadata"], "instance": 1},
    "autoscaler": {
        "min": 1,
        "max": 3,
        "scaleStrategies": [{"metricName": "concurrency", "threshold": 2}],
    },
}


@pytest.fixture
def cluster(tmp_path: Path, pg_url: str) -> Iterator[Cluster]:  # noqa: F811
    c = Cluster(tmp_path, pg_url)
    try:
        yield c
    finally:
        c.stop()


def report(url: str, concurrency: float, reporter: str) -> int:
    """One gateway's load report for the service; the status code it got."""
    body = {
        "reporter": reporter,
        "interval_s": 0.2,
        "services": [{"service": SERVICE, "requests": 50, "concurrency": concurrency}],
    }
    try:
        r = httpx.post(
            url + "/internal/v1/signals",
            json=body,
            headers={"Authorization": f"Bearer {ROUTES}"},
            timeout=2,
        )
    except httpx.TransportError:
        return 0
    return r.status_code


def deployment_replicas(cluster: Cluster) -> int | None:
    for obj in cluster.api.list("deployments"):
        if obj["metadata"]["name"].replace("-", "_") == SERVICE:
            return int(obj["spec"]["replicas"])
    return None


def events(api: Api) -> list[dict[str, Any]]:
    r = api.http.get(f"/api/v2/services/local/{SERVICE}/events")
    assert r.status_code == 200, r.text
    found: list[dict[str, Any]] = r.json()["Events"]
    return found


def test_a_scaling_decision_is_made_by_the_survivor_after_the_leader_is_killed(
    cluster: Cluster,
    pg_url: str,  # noqa: F811
) -> None:
    cluster.migrate()
    planes = [cluster.controlplane(), cluster.controlplane()]
    lease = Lease(pg_url)
    wait_until(lambda: lease.holder()[0] in {p.popen.pid for p in planes}, 10, what="one leads")
    pid, left = lease.holder()
    leader = next(p for p in planes if p.popen.pid == pid)
    survivor = next(p for p in planes if p is not leader)
    api = Api(survivor.url)
    api.create(AUTOSCALED)
    wait_until(lambda: deployment_replicas(cluster) == 1, 30, what="the Deployment, 1 replica")
    assert report(survivor.url, 5.0, "gw-a") == 421  # it does not lead yet

    pid, left = lease.holder()
    leader.popen.send_signal(signal.SIGKILL)
    killed = time.monotonic()
    reporter = "gw-" + uuid.uuid4().hex[:8]
    accepted_at: list[float] = []

    def survivor_takes_load() -> bool:
        # A gateway reports every interval; this one, every 50 ms, to see the takeover.
        if report(survivor.url, 5.0, reporter) == 204:
            accepted_at.append(time.monotonic())
            return True
        return False

    wait_until(survivor_takes_load, LEASE_S * 3, interval=0.05, what="the survivor leads")
    takeover = accepted_at[0] - killed
    decided: list[float] = []

    def scaled() -> bool:
        report(survivor.url, 5.0, reporter)  # the load goes on
        if any(e["Reason"] == "Autoscaled" for e in events(api)):
            decided.append(time.monotonic())
            return True
        return False

    wait_until(scaled, 30, interval=0.1, what="the survivor's autoscaler decides")
    decision = decided[0] - killed
    print(
        f"leader SIGKILLed with {left:.2f} s of its {LEASE_S} s lease left; the survivor "
        f"accepted load {takeover:.2f} s and decided {decision:.2f} s after the kill"
    )
    assert takeover <= LEASE_S + 1.0
    assert decision <= LEASE_S + 1.0 + 1.0  # and at most one autoscaler tick (1 s) more
    (event,) = [e for e in events(api) if e["Reason"] == "Autoscaled"]
    assert "scaled 1→3" in event["Message"]
    # The survivor's reconciler follows its own decision into the cluster.
    wait_until(lambda: deployment_replicas(cluster) == 3, 30, what="the Deployment rolls to 3")

    metrics = httpx.get(survivor.url + "/metrics").text
    assert re.search(r"^openeas_controlplane_leader 1$", metrics, re.M)
    decisions = (
        "openeas_controlplane_autoscaler_decisions_total"
        f'{{service="{SERVICE}",direction="up",reason="Autoscaled"}} 1'
    )
    assert decisions in metrics
    lease.engine.dispose()
