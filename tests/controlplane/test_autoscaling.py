"""Gateway load reports summed per reporter (pure, fake clock), and the leader's autoscaler
loop scaling a service through the reconciler and an in-memory runtime, on each database."""

from __future__ import annotations

import asyncio
from typing import Any

from contract.wire import LoadReport, ServiceLoad
from controlplane.elasticity.load_reports import LoadReports
from controlplane.elasticity.scaling_loop import Autoscaling
from tests.controlplane.conftest import seed_spec
from tests.controlplane.test_reconciler import Harness, harness  # noqa: F401  (fixture)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def report(reporter: str, interval: float = 1.0, **loads: tuple[int, float]) -> LoadReport:
    services = [ServiceLoad(service=s, requests=r, concurrency=c) for s, (r, c) in loads.items()]
    return LoadReport(reporter=reporter, interval_s=interval, services=services)


def test_signals_sum_reporters_and_expire_silent_ones() -> None:
    clock = Clock()
    signals = LoadReports(clock=clock)
    woken: list[list[str]] = []
    signals.listeners.append(woken.append)
    signals.receive(report("gw-a", a=(100, 2.0), b=(5, 0.5)))
    signals.receive(report("gw-b", interval=2.0, a=(100, 1.5)))
    load = signals.load("a")
    assert (load.qps, load.concurrency, load.reporters) == (150.0, 3.5, 2)
    assert woken == [["a", "b"], ["a"]]
    assert signals.load("quiet").reporters == 0

    clock.now += 3.5  # gw-a silent for more than 3 intervals; gw-b (2 s) still counts
    assert signals.load("a").qps == 50.0
    signals.receive(report("gw-b", interval=2.0, a=(0, 0.0)))  # went quiet
    assert signals.load("a").reporters == 0 and "a" not in signals.active()
    clock.now += 10
    assert signals.load("b").reporters == 0 and signals.active() == set()


AUTO = {
    "min": 1,
    "max": 4,
    "scaleStrategies": [{"metricName": "concurrency", "threshold": 2}],
    "behavior": {"scaleDown": {"stabilizationWindowSeconds": 1}},
}


def decisions(h: Harness) -> list[str]:
    return [
        e.message for e in h.services.events("local", "triton_test") if e.reason == "Autoscaled"
    ]


def instances(h: Harness) -> Any:
    return h.row().spec.metadata.instance


async def test_scales_up_on_load_and_down_after_the_window(
    leader: tuple[Harness, Autoscaling],
) -> None:
    h, scaling = leader
    h.services.create(seed_spec(autoscaler=AUTO))
    scaling.signals.receive(report("gw", triton_test=(50, 7.4)))
    await h.until(lambda: instances(h) == 4)
    assert decisions(h) == ["scaled 1→4: concurrency 7.4 > 2 × 1"]
    assert h.runtime is not None
    await h.until(
        lambda: h.runtime is not None and len(h.runtime.replicas.get("triton_test", [])) == 4
    )
    status = scaling.status("triton_test")
    assert status is not None and status["Metrics"]["concurrency"] == 7.4
    assert status["LastDecision"].startswith("scaled 1→4")

    # Same load again: 4 replicas asked for already count; no second decision.
    scaling.signals.receive(report("gw", triton_test=(50, 7.4)))
    await asyncio.sleep(0.3)
    assert len(decisions(h)) == 1

    scaling.signals.receive(report("gw", triton_test=(0, 0.0)))  # the load stops
    await h.until(lambda: instances(h) == 1, timeout=5)
    assert decisions(h)[-1] == "scaled 4→1: concurrency 0.0 < 2 × 4"


async def test_stopped_and_plain_services_are_left_alone(
    leader: tuple[Harness, Autoscaling],
) -> None:
    h, scaling = leader
    h.services.create(seed_spec(name="plain"))
    h.services.create(seed_spec(autoscaler=AUTO))
    h.services.set_stopped("local", "triton_test", True)
    scaling.signals.receive(report("gw", plain=(500, 9.0), triton_test=(500, 9.0)))
    await asyncio.sleep(0.5)
    assert instances(h) == 1 and h.services.get("local", "plain").spec.metadata.instance == 1
    h.services.set_stopped("local", "triton_test", False)
    scaling.signals.receive(report("gw", triton_test=(500, 9.0)))
    await h.until(lambda: instances(h) == 4)
