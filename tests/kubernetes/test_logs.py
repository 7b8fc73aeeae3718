"""Replica logs on Kubernetes through the API stand-in: ``previous`` (the container's run
before its last restart, the API's ``previous=true``) and ``follow`` (``follow=true``, the
text streamed as the container writes it), as ``eascmd logs --previous`` and ``-f`` read
them through the control plane."""

from __future__ import annotations

import asyncio

import pytest

from controlplane.runtime.kubernetes.logs import KubernetesLogs
from controlplane.runtime.kubernetes.runtime import KubernetesRuntime
from controlplane.runtime.kubernetes.settings import KubernetesSettings
from testing import k8s_server as ks
from testing.k8s_server import ApiStandIn
from tests.kubernetes.test_runtime import NAME, started, want


async def test_previous_is_the_run_before_the_restart(
    runtime: KubernetesRuntime,
    k8s: ApiStandIn,
    k8s_settings: KubernetesSettings,
) -> None:
    [pod] = await started(runtime, k8s, want())
    k8s.set_pod_status(pod, ks.status_ready())
    k8s.set_log(pod, "processor", "serving again\n")
    logs = KubernetesLogs(k8s_settings)
    with pytest.raises(FileNotFoundError, match="no previous run"):
        await logs.logs(NAME, 0, 10, previous=True)  # it never restarted
    k8s.set_previous_log(pod, "processor", "loading\nSegmentation fault\n")
    assert await logs.logs(NAME, 0, 1, previous=True) == "Segmentation fault\n"
    assert await logs.logs(NAME, 0, 10) == "serving again\n"
    assert ("GET", f"/api/v1/namespaces/openeas-serving/pods/{pod}/log") in {
        (m, p.split("?")[0]) for m, p in k8s.requests
    }


async def test_follow_streams_what_the_container_writes_until_the_caller_stops(
    runtime: KubernetesRuntime,
    k8s: ApiStandIn,
    k8s_settings: KubernetesSettings,
) -> None:
    [pod] = await started(runtime, k8s, want())
    k8s.set_pod_status(pod, ks.status_ready())
    k8s.set_log(pod, "processor", "one\ntwo\n")
    follow = KubernetesLogs(k8s_settings).follow(NAME, 0, 1)
    text = await asyncio.wait_for(anext(follow), 10)
    assert text == "two\n"
    k8s.append_log(pod, "processor", "three")
    assert await asyncio.wait_for(anext(follow), 10) == "three\n"
    k8s.append_log(pod, "processor", "four")
    assert await asyncio.wait_for(anext(follow), 10) == "four\n"
    await asyncio.wait_for(follow.aclose(), 10)  # type: ignore[attr-defined]  # stream closed


async def test_follow_ends_with_the_pod(
    runtime: KubernetesRuntime,
    k8s: ApiStandIn,
    k8s_settings: KubernetesSettings,
) -> None:
    [pod] = await started(runtime, k8s, want())
    k8s.set_pod_status(pod, ks.status_ready())
    k8s.set_log(pod, "processor", "last words\n")
    follow = KubernetesLogs(k8s_settings).follow(NAME, 0, 10)
    assert await asyncio.wait_for(anext(follow), 10) == "last words\n"
    k8s.remove_pod(pod)
    rest = [chunk async for chunk in follow]
    assert rest == []
