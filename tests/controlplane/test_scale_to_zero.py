"""Scale to zero in the control plane, on each database: the leader's autoscaler takes an idle
``min: 0`` service to zero after its grace period (status and route say so), a wake-up
scales it to ``scaleUpActivationReplicas`` at once through the autoscaler's write, the grace
period counts from the wake-up, and the first ready replica leaves a ``ColdStart`` event.
Only services whose autoscaler allows zero are woken. The phase breakdown is a table."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any, ParamSpec, TypeVar

import pytest
from fastapi.testclient import TestClient

from contract.progress import Progress
from contract.wire import WAKE_PATH
from controlplane.api.app import create_app
from controlplane.elasticity.coldstart import ColdStart, breakdown, phase_of
from controlplane.elasticity.scaling_loop import Autoscaling, NotWakeable
from controlplane.model.states import ServiceState
from controlplane.runtime.base import ReplicaStatus
from controlplane.settings import Settings
from controlplane.store import route_feed
from controlplane.store.db import make_engine, make_sessions
from controlplane.store.sealing import TokenSealer
from controlplane.store.services import Services
from tests.controlplane.conftest import seed_spec
from tests.controlplane.test_autoscaling import report
from tests.controlplane.test_reconciler import Harness, harness  # noqa: F401  (fixture)
from tests.tasks import stop


def to_zero(grace: int = 1, activation: int = 1, window: int = 0) -> dict[str, Any]:
    return {
        "min": 0,
        "max": 3,
        "scaleStrategies": [{"metricName": "qps", "threshold": 100}],
        "behavior": {
            "scaleDown": {"stabilizationWindowSeconds": window},
            "onZero": {
                "scaleDownGracePeriodSeconds": grace,
                "scaleUpActivationReplicas": activation,
            },
        },
    }


P = ParamSpec("P")
R = TypeVar("R")


def held(call: Callable[P, R], done: threading.Event, go_on: threading.Event) -> Callable[P, R]:
    """``call``, which then sets ``done`` and waits (5 s at most) for ``go_on``."""

    def holding(*args: P.args, **kwargs: P.kwargs) -> R:
        result = call(*args, **kwargs)
        done.set()
        go_on.wait(5)
        return result

    return holding


def instances(h: Harness, name: str = "triton_test") -> Any:
    return h.row(name).spec.metadata.instance


def route(h: Harness, name: str = "triton_test") -> Any:
    table = route_feed.table(h.sessions, "local", 1000)
    return next(r for r in table.routes if r.service == name)


def events(h: Harness, reason: str) -> list[str]:
    return [e.message for e in h.services.events("local", "triton_test") if e.reason == reason]


async def test_idle_service_goes_to_zero_and_a_wake_up_brings_it_back(
    leader: tuple[Harness, Autoscaling],
) -> None:
    h, scaling = leader
    # The scale-down window keeps the activation count (the grace period is zero's own).
    h.services.create(seed_spec(autoscaler=to_zero(grace=1, activation=2, window=60)))
    assert instances(h) == 1  # starts awake
    assert route(h).wakeable

    await h.until(lambda: instances(h) == 0, timeout=10)
    await h.until(lambda: h.row().status == "ScaledToZero")
    row = h.row()
    assert (row.reason, row.message) == ("ScaledToZero", "scaled to zero, wakes on request")
    assert row.total_instances == 0
    to_zero_event = events(h, "Autoscaled")[-1]
    assert to_zero_event.startswith("scaled 1→0: no request for ")
    assert to_zero_event.endswith(" s (grace period 1 s)")
    assert route(h).wakeable and route(h).endpoints == []
    runtime = h.runtime
    assert runtime is not None and runtime.replicas["triton_test"] == []

    assert await scaling.wake("triton_test") == 2
    assert instances(h) == 2
    assert events(h, "Woken") == ["scaled 0→2: woken by a request"]
    await h.until(lambda: len(runtime.replicas.get("triton_test", [])) == 2)
    assert await scaling.wake("triton_test") == 2  # a second gateway: nothing more written
    assert events(h, "Woken") == ["scaled 0→2: woken by a request"]

    runtime.set_all("triton_test", "Running")
    await h.until(lambda: h.row().status == "Running")
    await h.until(lambda: len(events(h, "ColdStart")) == 1)
    (cold,) = events(h, "ColdStart")
    assert "(woken by a request)" in cold
    for phase in ("decision", "process/pod start", "model pull", "Triton load", "warm-up"):
        assert f"{phase} " in cold, cold


def state_of(h: Harness, name: str = "triton_test") -> ServiceState:
    row = h.row(name)
    return ServiceState(row.name, row.uid, row.generation, row.spec, row.stopped, row.deleting)


async def test_a_read_of_the_wake_up_during_its_write_does_not_scale_it_back(
    harness: Harness,  # noqa: F811
) -> None:
    """The reconciler may read a wake-up's write before the wake-up has seen it done: a tick
    deciding on that read (with the history from before zero) scaled 2→1 at once."""
    h = harness
    h.services.create(seed_spec(autoscaler=to_zero(grace=1, activation=2, window=60)))
    assert h.services.autoscale("local", "triton_test", 1, 0, "to zero", "Autoscaled")
    scaling = Autoscaling(h.sessions, h.services, tick_s=0.05)
    scaling.observe(state_of(h))
    loop = asyncio.create_task(scaling.run())

    written, go_on = threading.Event(), threading.Event()
    # A spy: the wake-up's write, held until the test lets it go on.
    h.services.autoscale = held(h.services.autoscale, written, go_on)  # type: ignore[method-assign]
    try:
        waking = asyncio.create_task(scaling.wake("triton_test"))
        assert await asyncio.to_thread(written.wait, 5)
        scaling.observe(state_of(h))  # the reconciler reads the 2 the wake-up wrote
        await asyncio.sleep(0.3)  # ticks that could decide on that read
        go_on.set()
        assert await waking == 2
        await asyncio.sleep(0.3)  # and ticks after it
        assert instances(h) == 2
        assert events(h, "Autoscaled") == ["to zero"]
    finally:
        go_on.set()
        await stop(loop)


async def test_the_grace_period_counts_from_the_wake_up_and_requests(
    leader: tuple[Harness, Autoscaling],
) -> None:
    h, scaling = leader
    h.services.create(seed_spec(autoscaler=to_zero(grace=2), metadata={"instance": 0}))
    await h.until(lambda: h.row().status == "ScaledToZero")
    loop = asyncio.get_running_loop()
    await scaling.wake("triton_test")
    runtime = h.runtime
    assert runtime is not None  # made when the reconciler began to lead
    await h.until(lambda: len(runtime.replicas.get("triton_test", [])) == 1)
    # Waking is not idle: a replica slower to start than the grace period is kept.
    await asyncio.sleep(2.5)
    assert instances(h) == 1
    assert h.runtime is not None
    h.runtime.set_all("triton_test", "Running")
    await h.until(lambda: len(events(h, "ColdStart")) == 1)
    woken = loop.time()
    for _ in range(3):  # requests keep it up past the grace period
        await asyncio.sleep(0.8)
        scaling.signals.receive(report("gw", triton_test=(10, 0.5)))
    scaling.signals.receive(report("gw", triton_test=(0, 0.0)))
    quiet = loop.time()
    assert instances(h) == 1
    await h.until(lambda: instances(h) == 0, timeout=10)
    down = loop.time()
    assert down - woken > 2.4 and down - quiet >= 1.5  # 2 s from the last request, not before


async def test_load_reported_at_zero_wakes_it_too(leader: tuple[Harness, Autoscaling]) -> None:
    h, scaling = leader
    h.services.create(seed_spec(autoscaler=to_zero(), metadata={"instance": 0}))
    await h.until(lambda: h.row().status == "ScaledToZero")
    scaling.signals.receive(report("gw", triton_test=(250, 2.0)))
    await h.until(lambda: instances(h) == 3)
    assert events(h, "Autoscaled")[-1] == "scaled 0→3: woken by load: qps 250.0 > 100 × 1"


async def test_only_services_that_scale_to_zero_are_woken(
    leader: tuple[Harness, Autoscaling],
) -> None:
    h, scaling = leader
    h.services.create(seed_spec(name="plain", metadata={"instance": 0}))
    min_one = {**to_zero(), "min": 1}
    del min_one["behavior"]["onZero"]
    h.services.create(seed_spec(name="min_one", autoscaler=min_one))
    h.services.create(seed_spec(name="stopped", autoscaler=to_zero(grace=600)))
    h.services.set_stopped("local", "stopped", True)
    for name, why in (
        ("plain", "no autoscaler with min 0"),
        ("min_one", "does not scale to zero"),
        ("stopped", "is stopped"),
        ("nosuch", "no autoscaler with min 0"),
    ):
        with pytest.raises(NotWakeable, match=why):
            await scaling.wake(name)
    await h.until(lambda: h.row("stopped").status == "Stopped")
    assert not route(h, "plain").wakeable and not route(h, "stopped").wakeable
    assert [instances(h, n) for n in ("plain", "min_one", "stopped")] == [0, 1, 1]


def test_wake_endpoint_needs_a_gateway_credential_and_a_leader(settings: Settings) -> None:
    scoped = settings.model_copy(update={"routes_token": "routes-reader-token-0123456789"})
    engine = make_engine(scoped.sqlalchemy_url)
    sessions = make_sessions(engine)
    services = Services(sessions, scoped.cluster_id, TokenSealer(["sealing-key-for-tests-0123"]))
    scaling = Autoscaling(sessions, services)
    reader = {"Authorization": "Bearer routes-reader-token-0123456789"}
    body = {"service": "triton_test"}
    with TestClient(create_app(scoped, engine, autoscaling=scaling)) as c:
        admin = {"Authorization": f"Bearer {scoped.admin_token}"}
        spec = seed_spec(autoscaler=to_zero(grace=600), metadata={"instance": 0})
        assert c.post("/api/v2/services", json=spec, headers=admin).status_code == 200
        assert c.post(WAKE_PATH, json=body).status_code == 401
        wrong = {"Authorization": "Bearer not-the-routes-token-0123456"}
        assert c.post(WAKE_PATH, json=body, headers=wrong).status_code == 401
        r = c.post(WAKE_PATH, json=body, headers=reader)
        assert r.status_code == 421 and "does not lead" in r.json()["detail"]
        assert services.get("local", "triton_test").spec.metadata.instance == 0  # untouched
        scaling.signals.leading = True  # as while its reconciler leads
        assert c.post(WAKE_PATH, json={"service": ""}, headers=reader).status_code == 422
        r = c.post(WAKE_PATH, json=body, headers=reader)
        assert r.status_code == 200 and r.json() == {"service": "triton_test", "instances": 1}
        assert services.get("local", "triton_test").spec.metadata.instance == 1
        plain = seed_spec(name="plain", metadata={"instance": 0})
        assert c.post("/api/v2/services", json=plain, headers=admin).status_code == 200
        r = c.post(WAKE_PATH, json={"service": "plain"}, headers=reader)
        assert r.status_code == 409 and "min 0" in r.json()["detail"]
    engine.dispose()


def replica(state: str = "Pending", reason: str = "", phase: str | None = None) -> ReplicaStatus:
    progress = Progress(phase, 1, 1, 10, 10) if phase else None  # type: ignore[arg-type]
    return ReplicaStatus("r-0", "t", state, reason=reason, progress=progress)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("status", "phase"),
    [
        (replica("Running"), "ready"),
        (replica(reason="ContainerCreating"), "start"),
        (replica(reason="Unschedulable"), "start"),
        (replica(reason="ProcessStarting"), "start"),  # local: tritonserver not launched yet
        (replica(reason="ProcessStarting", phase="pulling"), "pull"),
        (replica(reason="PodInitializing"), "pull"),
        (replica(reason="Starting", phase="pulling"), "pull"),
        (replica(reason="Starting", phase="loading"), "load"),
        (replica(reason="Starting", phase="pulled"), "load"),
        (replica(reason="Starting", phase="warming up"), "warm-up"),
        (replica(reason="Starting", phase="warmed up"), "warm-up"),
        (replica(reason="Starting"), "load"),
        (replica(reason="NotReady"), "load"),
    ],
)
def test_phase_of_a_replica(status: ReplicaStatus, phase: str) -> None:
    assert phase_of(status) == phase


@pytest.mark.parametrize(
    ("marks", "expected"),
    [
        # local runtime, oss:// repository: spawned, pulled, loaded, ready
        (
            [("load", 10.2), ("pull", 10.5), ("load", 13.5), ("ready", 20.0)],
            {"decision": 0.1, "start": 0.5, "pull": 3.0, "load": 6.5, "warm-up": 0.0},
        ),
        # local runtime, local repository, the replica ringing when it launched tritonserver
        (
            [("start", 10.05), ("load", 10.4), ("ready", 15.4)],
            {"decision": 0.1, "start": 0.4, "pull": 0.0, "load": 5.0, "warm-up": 0.0},
        ),
        # local runtime, oss:// repository, ringing: spawned, pulled, loaded, ready
        (
            [("start", 10.05), ("pull", 10.3), ("load", 13.3), ("ready", 20.0)],
            {"decision": 0.1, "start": 0.3, "pull": 3.0, "load": 6.7, "warm-up": 0.0},
        ),
        # local runtime, local repository, a replica that does not ring
        (
            [("load", 10.2), ("ready", 15.2)],
            {"decision": 0.1, "start": 0.2, "pull": 0.0, "load": 5.0, "warm-up": 0.0},
        ),
        # Kubernetes: scheduled and created, the init container pulls, then Triton loads
        (
            [("start", 10.1), ("pull", 14.1), ("load", 20.1), ("ready", 30.1)],
            {"decision": 0.1, "start": 4.1, "pull": 6.0, "load": 10.0, "warm-up": 0.0},
        ),
        # with warm-up replayed before ready
        (
            [("load", 10.1), ("warm-up", 15.1), ("ready", 17.1)],
            {"decision": 0.1, "start": 0.1, "pull": 0.0, "load": 5.0, "warm-up": 2.0},
        ),
        # ready at the first look (a fast replica)
        ([("ready", 12.1)], {"decision": 0.1, "start": 2.1, "pull": 0, "load": 0, "warm-up": 0}),
    ],
)
def test_cold_start_breakdown(marks: list[tuple[str, float]], expected: dict[str, float]) -> None:
    spent = breakdown(9.9, 10.0, marks)
    assert spent == pytest.approx(expected)


def test_cold_start_follows_the_first_replica_to_be_ready() -> None:
    cold = ColdStart(requested=0.0, decided=0.5, trigger="woken by a request")
    a = ReplicaStatus("a", "t", "Pending", reason="Starting")
    b = ReplicaStatus("b", "t", "Pending", reason="ContainerCreating")
    assert cold.observe([a, b], 1.0) is None
    assert cold.observe([a, ReplicaStatus("b", "t", "Running")], 4.0) == (
        "cold start 4.00 s (woken by a request): decision 0.50 s, process/pod start 3.50 s, "
        "model pull 0.00 s, Triton load 0.00 s, warm-up 0.00 s"
    )
