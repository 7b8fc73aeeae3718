"""The autoscaler on the kubernetes runtime: its decision is the stored instance count, so
the Deployment's replicas follow it — against the API stand-in, through the reconciler."""

from __future__ import annotations

import asyncio
from typing import Any

from controlplane.elasticity.scaling_loop import Autoscaling
from controlplane.model.states import ServiceState
from controlplane.reconcile.desired import desired
from controlplane.reconcile.reconciler import Reconciler
from controlplane.runtime.base import DesiredReplicaSet, Notify
from controlplane.runtime.kubernetes.runtime import KubernetesRuntime
from controlplane.runtime.kubernetes.settings import KubernetesSettings
from testing import k8s_server as ks
from testing.k8s_server import ApiStandIn
from tests.controlplane.conftest import seed_spec
from tests.controlplane.test_autoscaling import report
from tests.controlplane.test_reconciler import Harness, harness  # noqa: F401  (fixture)
from tests.kubernetes.conftest import claimed
from tests.tasks import stop

NAME = "triton_test"
AUTO = {
    "min": 1,
    "max": 4,
    "scaleStrategies": [{"metricName": "qps", "threshold": 100}],
    "behavior": {"scaleDown": {"stabilizationWindowSeconds": 1}},
}


def leading_on_kubernetes(
    h: Harness, k8s_settings: KubernetesSettings
) -> tuple[Autoscaling, asyncio.Task[None]]:
    """A reconciler with autoscaling, on the Kubernetes runtime against the stand-in."""
    scaling = Autoscaling(h.sessions, h.services, tick_s=0.1)

    def factory(notify: Notify) -> KubernetesRuntime:
        return KubernetesRuntime(k8s_settings, notify)

    reconciler = Reconciler(
        h.sessions, factory, "local", poll_seconds=0.05, lease_ttl=1.0, autoscaling=scaling
    )
    return scaling, asyncio.create_task(reconciler.run())


def deployment_replicas(k8s: ApiStandIn) -> Any:
    d = k8s.get("deployments", "triton-test")
    return d and d["spec"]["replicas"]


def state_of(h: Harness) -> ServiceState:
    row = h.row()
    return ServiceState(row.name, row.uid, row.generation, row.spec, row.stopped, row.deleting)


def want_of(h: Harness) -> DesiredReplicaSet:
    return desired(state_of(h))


async def test_deployment_replicas_follow_the_autoscaler(
    harness: Harness,  # noqa: F811
    k8s: ApiStandIn,
    k8s_settings: KubernetesSettings,
) -> None:
    h = harness
    scaling, task = leading_on_kubernetes(h, k8s_settings)
    try:
        h.services.create(seed_spec(autoscaler=AUTO, metadata={"instance": 1, "cpu": 2}))

        await h.until(lambda: deployment_replicas(k8s) == 1)
        for pod in k8s.sync_pods("triton-test"):
            k8s.set_pod_status(pod, ks.status_ready())
        await h.until(lambda: h.row().running_instances == 1)

        scaling.signals.receive(report("gw", triton_test=(330, 1.0)))
        await h.until(lambda: deployment_replicas(k8s) == 4)
        await h.until(lambda: h.row().total_instances == 4)
        scaling.signals.receive(report("gw", triton_test=(0, 0.0)))
        await h.until(lambda: deployment_replicas(k8s) == 1)
        messages = [e.message for e in h.services.events("local", "triton_test")]
        assert "scaled 1→4: qps 330.0 > 100 × 1" in messages
        assert "scaled 4→1: qps 0.0 < 100 × 4" in messages
    finally:
        await stop(task)


async def test_cpu_comes_from_the_metrics_api(
    harness: Harness,  # noqa: F811
    k8s: ApiStandIn,
    k8s_settings: KubernetesSettings,
) -> None:
    h = harness
    scaling = Autoscaling(h.sessions, h.services, tick_s=0.1)
    runtime = await claimed(KubernetesRuntime(k8s_settings, lambda _: None))
    auto = {**AUTO, "scaleStrategies": [{"metricName": "cpu", "threshold": 50}]}
    h.services.create(seed_spec(autoscaler=auto, metadata={"instance": 1, "cpu": 2}))
    await runtime.apply(want_of(h))
    [pod] = k8s.sync_pods("triton-test")
    k8s.set_pod_status(pod, ks.status_ready())
    k8s.set_pod_cpu(pod, "1800m")  # 90 % of 2 cores
    task = asyncio.create_task(scaling.run(runtime))
    try:
        await h.until(lambda: scaling.signals.leading)
        scaling.observe(state_of(h))
        scaling.replicas(NAME, await runtime.observe(NAME))  # one ready; a second asked for
        await h.until(lambda: h.row().spec.metadata.instance == 2)
        assert "scaled 1→2: cpu 90.0 > 50" in [e.message for e in h.services.events("local", NAME)]

        await asyncio.sleep(0.3)  # the same 90 % of the one ready replica asks for no more
        assert h.row().spec.metadata.instance == 2
        k8s.metrics_api = False  # no metrics-server: no value, no decision, no crash
        scaling.observe(state_of(h))
        await h.until(
            lambda: "cpu" not in (scaling.status(NAME) or {"Metrics": {"cpu": 1}})["Metrics"]
        )
        assert h.row().spec.metadata.instance == 2
    finally:
        await stop(task)
        await runtime.close()


async def test_deployment_goes_to_zero_and_back_on_a_wake_up(
    harness: Harness,  # noqa: F811
    k8s: ApiStandIn,
    k8s_settings: KubernetesSettings,
) -> None:
    h = harness
    scaling, task = leading_on_kubernetes(h, k8s_settings)
    auto = {**AUTO, "min": 0, "behavior": {"onZero": {"scaleDownGracePeriodSeconds": 1}}}
    try:
        h.services.create(seed_spec(autoscaler=auto, metadata={"instance": 1, "cpu": 2}))

        await h.until(lambda: deployment_replicas(k8s) == 1)
        for pod in k8s.sync_pods("triton-test"):
            k8s.set_pod_status(pod, ks.status_ready())

        await h.until(lambda: deployment_replicas(k8s) == 0)  # a second without requests
        assert k8s.sync_pods("triton-test") == []
        await h.until(lambda: h.row().status == "ScaledToZero")
        assert k8s.get("deployments", "triton-test") is not None  # kept, at 0

        await h.until(lambda: scaling.signals.leading)
        assert await scaling.wake(NAME) == 1
        await h.until(lambda: deployment_replicas(k8s) == 1)
        for pod in k8s.sync_pods("triton-test"):
            k8s.set_pod_status(pod, ks.status_ready())
        await h.until(lambda: h.row().status == "Running")
        events = h.services.events("local", NAME)
        assert [e.message for e in events if e.reason == "Woken"] == [
            "scaled 0→1: woken by a request"
        ]
        await h.until(
            lambda: any(e.reason == "ColdStart" for e in h.services.events("local", NAME))
        )
    finally:
        await stop(task)
