"""Pull progress on the Kubernetes runtime: read from the tail of the ``model-pull`` log of
the pods that pull (again every ``progress_seconds`` while they do) or load (once), never of
the others, against the API stand-in."""

from __future__ import annotations

import pytest

from contract.progress import Progress, log_line
from controlplane.runtime.kubernetes.runtime import KubernetesRuntime
from controlplane.runtime.kubernetes.settings import KubernetesSettings
from testing import k8s_server as ks
from testing.k8s_server import ApiStandIn
from testing.waiting import wait_until_async
from tests.kubernetes.conftest import Recorder
from tests.kubernetes.test_runtime import NAME, OBJECT, want

PULLING = Progress("pulling", 1, 4, 1_000, 4_000, rate=500.0, eta_s=6.0)
PULLED = Progress("pulled", 4, 4, 4_000, 4_000, rate=500.0, eta_s=0.0)


@pytest.fixture
def k8s_settings(k8s_settings: KubernetesSettings) -> KubernetesSettings:
    """The shared settings, with progress read every 0.2 s."""
    return k8s_settings.model_copy(update={"progress_seconds": 0.2})


def log_reads(k8s: ApiStandIn) -> list[str]:
    return [path.split("/")[-2] for method, path in k8s.requests if "/log?" in path]


async def test_only_pulling_and_loading_pods_are_read(
    runtime: KubernetesRuntime, k8s: ApiStandIn
) -> None:
    await runtime.apply(want(instance=3))
    pulling, loading, ready = k8s.sync_pods(OBJECT)
    k8s.set_pod_status(pulling, ks.status_pulling())
    k8s.set_log(pulling, "model-pull", f"openeas: fetching\n{log_line(PULLING)}\n")
    k8s.set_pod_status(loading, ks.status_starting())
    k8s.set_log(loading, "model-pull", f"{log_line(PULLING)}\n{log_line(PULLED)}\n")
    k8s.set_pod_status(ready, ks.status_ready())

    seen = await runtime.observe(NAME)
    assert [(r.state, r.progress) for r in seen.replicas] == [
        ("Pending", PULLING),
        ("Pending", Progress("loading", 4, 4, 4_000, 4_000, rate=500.0, eta_s=0.0)),
        ("Running", None),
    ]
    assert sorted(log_reads(k8s)) == sorted([pulling, loading])

    await runtime.observe(NAME)  # the loading pod's report is kept: only the pull is read
    assert sorted(log_reads(k8s)) == sorted([pulling, loading, pulling])

    for pod in (pulling, loading):
        k8s.set_pod_status(pod, ks.status_ready())
    seen = await runtime.observe(NAME)
    assert [r.progress for r in seen.replicas] == [None, None, None]
    assert len(log_reads(k8s)) == 3  # ready pods cost no read


async def test_a_pulling_pod_is_looked_at_again_until_it_is_pulled(
    runtime: KubernetesRuntime, k8s: ApiStandIn, notified: Recorder
) -> None:
    await runtime.apply(want())
    [pod] = k8s.sync_pods(OBJECT)
    k8s.set_pod_status(pod, ks.status_pulling())  # no log yet: the container just started
    assert (await runtime.observe(NAME)).replicas[0].progress is None

    # Nothing in the pod changes while it pulls: the runtime asks for a look itself.
    before = len(notified.names)
    await wait_until_async(lambda: len(notified.names) > before, 5)
    k8s.set_log(pod, "model-pull", log_line(PULLING) + "\n")
    assert (await runtime.observe(NAME)).replicas[0].progress == PULLING

    k8s.set_pod_status(pod, ks.status_ready())
    reads = len(log_reads(k8s))
    assert (await runtime.observe(NAME)).replicas[0].progress is None
    assert len(log_reads(k8s)) == reads  # serving: its log is read no more
