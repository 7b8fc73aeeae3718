"""The kubernetes runtime against the API stand-in, through the unmodified ``kubernetes``
client: a service walks Waiting → Running → Failed paths, scales, stops, is deleted (only
gone when its pods are), and a resync of an unchanged spec writes nothing. Conflicts are
re-read and retried, API errors arrive as temporary/permanent, and the watch notifies on
changes, relisting after ``410 Gone``."""

from __future__ import annotations

import asyncio
import base64
from collections.abc import Awaitable, Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from pydantic import SecretStr

from controlplane.model.spec import StoredSpec
from controlplane.model.states import ServiceState
from controlplane.reconcile import status as status_mod
from controlplane.reconcile.desired import desired
from controlplane.runtime.base import (
    DesiredReplicaSet,
    PermanentRuntimeError,
    ReplicaSummary,
    TemporaryRuntimeError,
)
from controlplane.runtime.kubernetes.client import DEPLOYMENT, SERVICE, KubeClient
from controlplane.runtime.kubernetes.manifests import HASH_ANNOTATION, SERVICE_LABEL
from controlplane.runtime.kubernetes.runtime import KubernetesRuntime
from controlplane.runtime.kubernetes.settings import KubernetesSettings
from testing import k8s_server as ks
from testing.k8s_server import ApiStandIn
from testing.waiting import wait_until_async
from tests.kubernetes.conftest import INSTALLATION, Recorder, claimed

NAME, OBJECT, UID = "triton_test", "triton-test", "0b6f2a0e-5d7c-4a59-9d0e-7d7f3f8c1a11"


def want(
    generation: int = 1, *, stopped: bool = False, deleting: bool = False, **metadata: Any
) -> DesiredReplicaSet:
    spec = {
        "name": NAME,
        "processor": "triton",
        "processor_params": [
            "--model-repository=oss://triton-model-repo/models",
            "--allow-http=true",
        ],
        "metadata": {"instance": 1, "cpu": 4, "gpu": 1, "memory": 10000, **metadata},
    }
    return desired(
        ServiceState(NAME, UID, generation, StoredSpec.model_validate(spec), stopped, deleting)
    )


async def until(check: Callable[[], Awaitable[object] | object], timeout: float = 15.0) -> None:
    await wait_until_async(check, timeout)


async def service_status(rt: KubernetesRuntime, d: DesiredReplicaSet, previous: str = "") -> Any:
    return status_mod.compute(d, await rt.observe(NAME), deleting=False, previous=previous)


async def started(rt: KubernetesRuntime, k8s: ApiStandIn, d: DesiredReplicaSet) -> list[str]:
    await rt.apply(d)
    return k8s.sync_pods(OBJECT)


# -- life cycle ---------------------------------------------------------------------------------


async def test_a_service_walks_from_waiting_to_running(
    runtime: KubernetesRuntime, k8s: ApiStandIn, notified: Recorder
) -> None:
    d = want()
    await runtime.apply(d)
    assert {w[:2] for w in k8s.writes} == {
        ("create", "configmaps"),  # the installation's record, by claim()
        ("patch", "deployments"),
        ("patch", "services"),
        ("patch", "poddisruptionbudgets"),
    }
    deployment = k8s.get("deployments", OBJECT)
    assert deployment is not None and deployment["spec"]["replicas"] == 1
    assert k8s.get("services", OBJECT) is not None
    assert k8s.get("poddisruptionbudgets", OBJECT) is not None
    await until(lambda: NAME in notified.names)  # the watch saw the new Deployment

    assert (await service_status(runtime, d)).status == "Waiting"  # no pod yet
    [pod] = k8s.sync_pods(OBJECT)
    seen = (await runtime.observe(NAME)).replicas
    assert [(r.name, r.state, r.template_hash) for r in seen] == [(pod, "Pending", d.template_hash)]

    notified.names.clear()
    k8s.set_pod_status(pod, ks.status_starting())
    await until(lambda: NAME in notified.names)  # the pod watch
    assert (await service_status(runtime, d)).status == "Waiting"

    k8s.set_pod_status(pod, ks.status_ready())
    [replica] = (await runtime.observe(NAME)).replicas
    assert replica.state == "Running"
    assert replica.endpoint is not None and replica.endpoint.startswith("http://10.244.0.")
    assert replica.endpoint.endswith(":8000")
    status = await service_status(runtime, d)
    assert (status.status, status.running, status.pending) == ("Running", 1, 0)


@pytest.mark.parametrize(
    ("pod_status", "state", "reason", "in_message", "service", "permanent"),
    [
        (ks.status_unschedulable(), "Pending", "Unschedulable", "Insufficient nvidia.com/gpu",
         "Waiting", False),
        (ks.status_image_pull_backoff(), "CrashLoopBackOff", "ImagePullBackOff",
         "Back-off pulling image", "Waiting", False),
        (ks.status_init_failed(exit_code=3), "Failed", "ModelPullFailed",
         "openeas: model pull failed: bucket", "Failed", True),
        (ks.status_init_failed(exit_code=75, message="openeas: model pull failed: timed out"),
         "CrashLoopBackOff", "ModelPullFailed", "timed out", "Failed", False),
        (ks.status_crash_loop(), "CrashLoopBackOff", "CrashLoopBackOff",
         "error: creating server", "Failed", False),
        (ks.status_crash_loop(exit_code=2, message="openeas: processor_params: bad"),
         "Failed", "CrashLoopBackOff", "processor_params", "Failed", True),
        (ks.status_oom_killed(), "CrashLoopBackOff", "OOMKilled",
         "limit 10000Mi); raise metadata.memory", "Waiting", False),
    ],
)  # fmt: skip
async def test_pod_trouble_reaches_the_status_with_its_reason(
    runtime: KubernetesRuntime,
    k8s: ApiStandIn,
    pod_status: dict[str, Any],
    state: str,
    reason: str,
    in_message: str,
    service: str,
    permanent: bool,
) -> None:
    d = want()
    [pod] = await started(runtime, k8s, d)
    k8s.set_pod_status(pod, pod_status)
    [replica] = (await runtime.observe(NAME)).replicas
    assert (replica.state, replica.reason, replica.permanent) == (state, reason, permanent)
    assert in_message in replica.message
    status = await service_status(runtime, d)
    assert status.status == service
    assert status.reason == reason and in_message in status.message


async def test_scale_stop_and_start_again(runtime: KubernetesRuntime, k8s: ApiStandIn) -> None:
    d1 = want()
    [first] = await started(runtime, k8s, d1)
    k8s.set_pod_status(first, ks.status_ready())

    d2 = want(generation=2, instance=3)
    assert d2.template_hash == d1.template_hash  # scaling is not a rollout
    await runtime.apply(d2)
    deployment = k8s.get("deployments", OBJECT)
    assert deployment is not None and deployment["spec"]["replicas"] == 3
    pods = k8s.sync_pods(OBJECT)
    assert len(pods) == 3 and first in pods  # the ready replica stays
    status = await service_status(runtime, d2, previous="Running")
    assert (status.total, status.running, status.pending) == (3, 1, 2)

    stopped = want(generation=3, instance=3, stopped=True)
    await runtime.apply(stopped)
    deployment = k8s.get("deployments", OBJECT)
    assert deployment is not None and deployment["spec"]["replicas"] == 0
    assert k8s.get("services", OBJECT) is not None  # the Service stays for a restart
    k8s.sync_pods(OBJECT)
    assert (await service_status(runtime, stopped)).status == "Stopped"

    await runtime.apply(want(generation=4, instance=3))
    assert len(k8s.sync_pods(OBJECT)) == 3


async def test_a_params_change_rolls_out_and_old_replicas_count_until_gone(
    runtime: KubernetesRuntime, k8s: ApiStandIn
) -> None:
    d1 = want()
    [old] = await started(runtime, k8s, d1)
    k8s.set_pod_status(old, ks.status_ready())
    d2 = want(generation=2, cpu=8)
    await runtime.apply(d2)
    [new] = k8s.sync_pods(OBJECT)  # maxSurge 1, maxUnavailable 0: the old pod stays
    assert new != old
    during = {r.name: (r.template_hash, r.state) for r in (await runtime.observe(NAME)).replicas}
    assert during == {old: (d1.template_hash, "Running"), new: (d2.template_hash, "Pending")}
    deployment = k8s.get("deployments", OBJECT)
    assert deployment is not None
    assert {
        k: deployment["status"][k] for k in ("replicas", "updatedReplicas", "readyReplicas")
    } == {
        "replicas": 2,
        "updatedReplicas": 1,
        "readyReplicas": 1,
    }
    assert k8s.sync_pods(OBJECT) == [new]  # not ready yet: nothing changes
    assert k8s.get("pods", old) is not None
    k8s.set_pod_status(new, ks.status_ready())
    assert k8s.sync_pods(OBJECT) == [new] and k8s.get("pods", old) is None
    [replica] = (await runtime.observe(NAME)).replicas
    assert replica.template_hash == d2.template_hash
    assert (await service_status(runtime, d2, previous="Running")).status == "Running"


async def test_delete_is_done_only_when_every_object_is_gone(
    runtime: KubernetesRuntime, k8s: ApiStandIn
) -> None:
    [pod] = await started(runtime, k8s, want())
    k8s.set_pod_status(pod, ks.status_ready())
    assert await runtime.services() == {NAME}

    assert await runtime.delete(NAME) is False  # the pod is still shutting down
    assert k8s.get("deployments", OBJECT) is None and k8s.get("services", OBJECT) is None
    assert k8s.get("poddisruptionbudgets", OBJECT) is None
    writes = k8s.write_count()
    assert await runtime.delete(NAME) is False
    assert k8s.write_count() == writes  # nothing left to ask for
    # The garbage collector deleted the Deployment's pod (Background): it is terminating.
    [pod_left] = k8s.list("pods")
    assert pod_left["metadata"]["name"] == pod and pod_left["metadata"]["deletionTimestamp"]
    k8s.remove_pods(f"{SERVICE_LABEL}={NAME}")  # the kubelet finishes it
    assert await runtime.delete(NAME) is True
    assert await runtime.services() == set()
    assert await runtime.delete(NAME) is True  # idempotent


async def test_a_resync_of_an_unchanged_spec_writes_nothing(
    runtime: KubernetesRuntime, k8s: ApiStandIn
) -> None:
    d = want()
    [pod] = await started(runtime, k8s, d)
    k8s.set_pod_status(pod, ks.status_ready())  # status and defaults changed server-side
    writes = k8s.write_count()
    for _ in range(3):
        await runtime.apply(d)
        await runtime.observe(NAME)
    assert k8s.write_count() == writes


async def test_a_hand_scaled_deployment_is_set_back(
    runtime: KubernetesRuntime, k8s: ApiStandIn
) -> None:
    d = want()
    await runtime.apply(d)
    # `kubectl scale --replicas=5`, through the same API with another field manager
    scaled = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": OBJECT},
        "spec": {"replicas": 5},
    }
    runtime._client.apply(scaled, field_manager="kubectl")
    deployment = k8s.get("deployments", OBJECT)
    assert deployment is not None and deployment["spec"]["replicas"] == 5
    writes = k8s.write_count()
    await runtime.apply(d)
    deployment = k8s.get("deployments", OBJECT)
    assert deployment is not None and deployment["spec"]["replicas"] == 1
    assert k8s.write_count() == writes + 1


async def test_fields_no_longer_applied_are_removed(
    runtime: KubernetesRuntime, k8s: ApiStandIn
) -> None:
    await runtime.apply(want(resource="eas-r-a10"))
    deployment = k8s.get("deployments", OBJECT)
    assert deployment is not None
    pod_spec = deployment["spec"]["template"]["spec"]
    assert pod_spec["nodeSelector"] == {"openeas.io/pool": "a10"}
    await runtime.apply(want(generation=2, gpu=0))
    deployment = k8s.get("deployments", OBJECT)
    assert deployment is not None
    pod_spec = deployment["spec"]["template"]["spec"]
    assert "nodeSelector" not in pod_spec and "tolerations" not in pod_spec
    assert "nvidia.com/gpu" not in pod_spec["containers"][0]["resources"]["limits"]


# -- conflicts and errors -----------------------------------------------------------------------


async def test_a_conflict_is_re_read_and_retried(
    runtime: KubernetesRuntime, k8s: ApiStandIn
) -> None:
    await runtime.apply(want())
    k8s.touch_before_next_write("deployments", OBJECT)
    await runtime.apply(want(generation=2, instance=2))
    patches = [p for m, p in k8s.requests if m == "PATCH" and "/deployments/" in p]
    assert len(patches) == 3  # create, the 409, the retry
    deployment = k8s.get("deployments", OBJECT)
    assert deployment is not None and deployment["spec"]["replicas"] == 2
    # the other writer's change survives: apply only touches what it owns
    assert "example.com/touched" in deployment["metadata"]["annotations"]


async def test_an_object_that_keeps_changing_is_a_temporary_error(
    runtime: KubernetesRuntime, k8s: ApiStandIn
) -> None:
    await runtime.apply(want())
    k8s.touch_before_next_write("deployments", OBJECT, times=99)
    with pytest.raises(TemporaryRuntimeError, match="kept changing"):
        await runtime.apply(want(generation=2, instance=2))


@pytest.mark.parametrize(
    ("code", "error", "reason"),
    [
        (500, TemporaryRuntimeError, ""),
        (429, TemporaryRuntimeError, ""),
        (403, PermanentRuntimeError, "Forbidden"),
    ],
)
async def test_api_errors_arrive_as_temporary_or_permanent(
    runtime: KubernetesRuntime, k8s: ApiStandIn, code: int, error: type[Exception], reason: str
) -> None:
    k8s.fail_next("PATCH", "deployments", code)
    with pytest.raises(error) as caught:
        await runtime.apply(want())
    assert "injected fault" in str(caught.value)
    if isinstance(caught.value, PermanentRuntimeError):
        assert caught.value.reason == reason
    await runtime.apply(want())  # the next try goes through


async def test_a_missing_namespace_is_a_permanent_error(
    k8s_settings: KubernetesSettings, notified: Recorder
) -> None:
    settings = k8s_settings.model_copy(update={"namespace": "nowhere"})
    rt = KubernetesRuntime(settings, notified)
    try:
        with pytest.raises(PermanentRuntimeError, match='namespaces "nowhere" not found'):
            await rt.claim(INSTALLATION)  # its first write: the installation's record
    finally:
        await rt.close()


async def test_an_unreachable_api_server_is_a_temporary_error(
    runtime: KubernetesRuntime, k8s: ApiStandIn
) -> None:
    k8s.stop()
    with pytest.raises(TemporaryRuntimeError, match="unreachable"):
        await runtime.apply(want())


async def test_an_unknown_resource_group_fails_without_writing(
    runtime: KubernetesRuntime, k8s: ApiStandIn
) -> None:
    before = k8s.write_count()
    with pytest.raises(PermanentRuntimeError) as caught:
        await runtime.apply(want(resource="eas-r-nope"))
    assert caught.value.reason == "UnknownResourceGroup"
    assert "eas-r-a10, eas-r-cpu" in caught.value.message
    assert k8s.write_count() == before


async def test_an_object_of_someone_else_is_left_alone(
    runtime: KubernetesRuntime, k8s: ApiStandIn
) -> None:
    foreign = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": OBJECT, "labels": {"app": "theirs"}},
        "spec": {"selector": {"app": "theirs"}, "ports": [{"port": 80}]},
    }
    runtime._client.apply(foreign, field_manager="someone")
    with pytest.raises(PermanentRuntimeError) as caught:
        await runtime.apply(want())
    assert caught.value.reason == "NameTaken"
    service = k8s.get("services", OBJECT)
    assert service is not None and service["metadata"]["labels"] == {"app": "theirs"}


# -- watch ---------------------------------------------------------------------------------------


async def test_after_410_gone_the_watch_relists_and_still_notifies(
    runtime: KubernetesRuntime, k8s: ApiStandIn, notified: Recorder
) -> None:
    [pod] = await started(runtime, k8s, want())
    await until(lambda: NAME in notified.names)
    pod_watcher = next(w for w in runtime._watchers if w.kind.kind == "Pod")
    relists = pod_watcher.relists
    notified.names.clear()
    # The change happens while no watch is open and is compacted away: only a relist sees it.
    k8s.expire_watches(change=lambda: k8s.set_pod_status(pod, ks.status_ready()))
    await until(lambda: NAME in notified.names)
    await until(lambda: pod_watcher.relists > relists)
    expired = [p for m, p in k8s.requests if "watch=" in p and "/pods" in p]
    assert len(expired) >= 2  # watched, then watched again from the old version (410)
    [replica] = (await runtime.observe(NAME)).replicas
    assert replica.state == "Running"


async def test_close_stops_the_watch_threads(
    k8s_settings: KubernetesSettings, notified: Recorder
) -> None:
    rt = await claimed(KubernetesRuntime(k8s_settings, notified))
    await rt.services()  # starts watching
    watchers = list(rt._watchers)
    assert watchers and all(w.is_alive() for w in watchers)
    await asyncio.wait_for(rt.close(), timeout=5)
    assert not any(w.is_alive() for w in watchers)


# -- logs ----------------------------------------------------------------------------------------


async def test_logs_of_a_replica_or_of_its_model_pull(
    runtime: KubernetesRuntime, k8s: ApiStandIn
) -> None:
    [pod] = await started(runtime, k8s, want())
    k8s.set_pod_status(pod, ks.status_init_failed())
    k8s.set_log(pod, "model-pull", "pulling\nopeneas: model pull failed: no bucket\n")
    assert await runtime.logs(NAME, 0, 1) == "openeas: model pull failed: no bucket\n"

    k8s.set_pod_status(pod, ks.status_ready())
    k8s.set_log(pod, "processor", "one\ntwo\nthree\n")
    assert await runtime.logs(NAME, 0, 2) == "two\nthree\n"
    assert await runtime.logs(NAME, None, 1) == "three\n"
    with pytest.raises(FileNotFoundError):
        await runtime.logs(NAME, 1, 10)


async def test_a_gpu_service_rolls_one_replica_at_a_time_without_a_spare_gpu(
    runtime: KubernetesRuntime, k8s: ApiStandIn
) -> None:
    """Two GPU instances on a pool with no free GPU: maxSurge 0, maxUnavailable 1. Each step
    first takes an old replica away (freeing its GPU), and never runs more pods than
    instances; the other old replica serves until a new one is ready."""
    d1 = want(instance=2)
    old = await started(runtime, k8s, d1)
    for pod in old:
        k8s.set_pod_status(pod, ks.status_ready())
    await runtime.apply(want(generation=2, instance=2, cpu=8))
    seen: list[tuple[int, int]] = []  # (pods, ready) after each controller step
    for _ in range(6):
        current = k8s.sync_pods(OBJECT)
        pods = k8s.list("pods")
        seen.append((len(pods), sum(_ready(p) for p in pods)))
        for pod in current:
            k8s.set_pod_status(pod, ks.status_ready())
    assert all(total <= 2 for total, _ in seen), seen  # no surge pod waiting for a GPU
    assert all(ready >= 1 for _, ready in seen), seen  # never below one serving replica
    assert seen[0] == (2, 1)  # one old replica out, its successor Pending in its place
    assert {p["metadata"]["name"] for p in k8s.list("pods")}.isdisjoint(old)
    assert seen[-1] == (2, 2)


def _ready(pod: dict[str, Any]) -> bool:
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


async def test_an_orphaned_budget_is_found_and_deleted(
    runtime: KubernetesRuntime, k8s: ApiStandIn, k8s_settings: KubernetesSettings
) -> None:
    """A service deleted halfway (say, the control plane died) may leave only its budget:
    the bulk listing still reports it, so the reconciler deletes it as an orphan."""
    await runtime.apply(want())
    client = KubeClient(k8s_settings)
    client.delete(DEPLOYMENT, OBJECT)
    client.delete(SERVICE, OBJECT)
    client.close()
    assert await runtime.services() == {NAME}
    assert await runtime.delete(NAME) is True
    assert k8s.get("poddisruptionbudgets", OBJECT) is None


async def test_summary_lists_every_service_in_one_call_per_kind(
    runtime: KubernetesRuntime, k8s: ApiStandIn
) -> None:
    d = want()
    await runtime.apply(d)
    assert await runtime.summary() == {NAME: ReplicaSummary(1, 0, frozenset({d.template_hash}))}
    [pod] = k8s.sync_pods(OBJECT)
    k8s.set_pod_status(pod, ks.status_ready())
    assert await runtime.summary() == {NAME: ReplicaSummary(1, 1, frozenset({d.template_hash}))}
    stopped = want(stopped=True)
    await runtime.apply(stopped)
    assert (await runtime.summary())[NAME] == ReplicaSummary(0, 1, frozenset())


async def test_delete_leaves_other_services_alone(
    runtime: KubernetesRuntime, k8s: ApiStandIn
) -> None:
    await runtime.apply(want())
    other = desired(
        ServiceState(
            "other_svc",
            "u2",
            1,
            StoredSpec.model_validate({**_spec_of(want()), "name": "other_svc"}),
            False,
            False,
        )
    )
    await runtime.apply(other)
    assert await runtime.services() == {NAME, "other_svc"}
    await runtime.delete(NAME)
    remaining = k8s.get("deployments", "other-svc")
    assert remaining is not None and HASH_ANNOTATION in remaining["metadata"]["annotations"]
    assert await runtime.services() == {"other_svc"}


def _spec_of(d: DesiredReplicaSet) -> dict[str, Any]:
    return {
        "name": d.service,
        "processor": d.processor,
        "processor_params": list(d.params),
        "metadata": {"cpu": 1, "gpu": 0, "memory": 2000},
    }


async def test_a_bad_kubeconfig_is_a_clear_permanent_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    with pytest.raises(PermanentRuntimeError) as caught:
        KubernetesRuntime(KubernetesSettings(kubeconfig=str(tmp_path / "none")), Recorder())
    assert caught.value.reason == "KubernetesConfig"
    assert "kubeconfig" in caught.value.message


async def test_logs_skip_finished_pods_like_observe(
    runtime: KubernetesRuntime, k8s: ApiStandIn
) -> None:
    await runtime.apply(want(instance=2))
    first, second = k8s.sync_pods(OBJECT)
    k8s.set_pod_status(first, {"phase": "Failed", "reason": "Evicted"})
    k8s.set_pod_status(second, ks.status_ready())
    k8s.set_log(second, "processor", "serving\n")
    [replica] = (await runtime.observe(NAME)).replicas
    assert replica.name == second
    assert await runtime.logs(NAME, 0, 5) == "serving\n"


async def test_the_model_cache_token_is_kept_for_pull_init_containers(
    k8s_settings: KubernetesSettings, k8s: ApiStandIn, notified: Recorder
) -> None:
    """Pods can only read Secrets of their own namespace: the runtime keeps the cache's
    token there, and sets it back when it changed (a rotated token, a hand edit)."""

    def stored() -> bytes:
        secret = k8s.get("secrets", "openeas-model-cache")
        assert secret is not None
        return base64.b64decode(secret["data"]["token"])

    cached = k8s_settings.model_copy(
        update={"model_cache_url": "http://cache:8090", "model_cache_token": SecretStr("t1")}
    )
    rt = await claimed(KubernetesRuntime(cached, notified))
    try:
        await rt.apply(want())
        assert stored() == b"t1"
    finally:
        await rt.close()
    rotated = cached.model_copy(update={"model_cache_token": SecretStr("t2")})
    rt = await claimed(KubernetesRuntime(rotated, notified))
    try:
        await rt.apply(want())
        assert stored() == b"t2"
    finally:
        await rt.close()


async def test_retired_replicas_are_replaced_and_others_left_alone(
    runtime: KubernetesRuntime, k8s: ApiStandIn
) -> None:
    first, second = await started(runtime, k8s, want(instance=2))
    uids = {}
    for pod in (first, second):
        k8s.set_pod_status(pod, ks.status_ready())
        found = k8s.get("pods", pod)
        assert found is not None
        uids[pod] = found["metadata"]["uid"]
    await runtime.apply(replace(want(generation=2, instance=2), retire=frozenset({first})))
    going = k8s.get("pods", first)
    assert going is not None and going["metadata"].get("deletionTimestamp")
    assert k8s.remove_pod(first)  # the kubelet finishes it
    assert len(k8s.sync_pods(OBJECT)) == 2
    kept = k8s.get("pods", second)
    assert kept is not None and kept["metadata"]["uid"] == uids[second]  # left alone
    # (The stand-in names a new pod after the lowest free index, here the retired one's;
    # a ReplicaSet's pod names are random, so a retired name does not come back.)
    new = k8s.get("pods", first)
    assert new is not None and new["metadata"]["uid"] != uids[first]
