"""The chart's Role grants exactly what the Kubernetes runtime uses, nothing more, nothing less.

What it uses is recorded, not listed by hand: the runtime runs a service's whole life
(create, observe, scale, logs, list, delete, both watches) through the unmodified
``kubernetes`` client against the API stand-in, and each HTTP request is turned into the
authorization attributes the API server checks (its RequestInfo rules: verb from method and
path, ``watch=true`` → watch, ``pods/log`` subresource). A server-side apply that creates
its object is authorized as a ``create`` as well as a ``patch`` (the API server checks both),
so those count too. A spy on ``KubeClient`` makes sure the scenario reached every method
that talks to the API: a new call in the client fails this test until the scenario uses it.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from controlplane.model.spec import StoredSpec
from controlplane.model.states import ServiceState
from controlplane.reconcile.desired import desired
from controlplane.runtime.base import DesiredReplicaSet
from controlplane.runtime.kubernetes.client import KubeClient
from controlplane.runtime.kubernetes.events import kube_event
from controlplane.runtime.kubernetes.logs import KubernetesLogs
from controlplane.runtime.kubernetes.runtime import KubernetesRuntime
from controlplane.runtime.kubernetes.settings import KubernetesSettings
from controlplane.store.tables import EventRow
from testing import k8s_server as ks
from testing.waiting import wait_until_async
from tests.deploy.chart import ROOT, VALUE_SETS, Obj, find, render
from tests.kubernetes.conftest import INSTALLATION, RESOURCE_GROUPS

SERVING = "openeas-serving"
NAME, OBJECT, UID = "triton_test", "triton-test", "6f3c7a52-8d0e-4c1b-9a55-0b7f3e1d2a44"
Attribute = tuple[str, str, str]  # (apiGroup, resource[/subresource], verb)
_PATH = re.compile(
    r"^/(?:api/v1|apis/(?P<group>[^/]+)/[^/]+)/namespaces/(?P<ns>[^/]+)/(?P<resource>[^/]+)"
    r"(?:/(?P<name>[^/]+))?(?:/(?P<sub>[^/]+))?/?$"
)
_VERBS = {"POST": "create", "PUT": "update", "PATCH": "patch"}


class AuditedStandIn(ks.ApiStandIn):
    """The stand-in, noting which apply requests found no object (they create it)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        self.created: list[tuple[str, str, str]] = []  # (apiGroup, resource, name)

    def handle(
        self, method: str, path: str, query: dict[str, str], headers: Any, body: bytes
    ) -> tuple[int, Any, str]:
        m = _PATH.match(path)
        applied = m if method == "PATCH" and m and m["name"] else None
        if applied and not self.get(applied["resource"], applied["name"], applied["ns"]):
            self.created.append((applied["group"] or "", applied["resource"], applied["name"]))
        return super().handle(method, path, query, headers, body)


class SpyClient(KubeClient):
    """Records which of the client's API methods the runtime called."""

    called: set[str]

    def __init__(self, settings: KubernetesSettings) -> None:
        super().__init__(settings)
        self.called = set()
        for name in API_METHODS:
            setattr(self, name, self._spy(name, getattr(self, name)))

    def _spy(self, name: str, method: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            self.called.add(name)
            return method(*args, **kwargs)

        return call


# Every public KubeClient method that sends requests (the rest close connections).
API_METHODS = {
    name
    for name, member in inspect.getmembers(KubeClient, inspect.isfunction)
    if not name.startswith("_")
} - {"abort_streams", "close"}


def authorization(method: str, target: str) -> Attribute:
    """The (apiGroup, resource, verb) the API server authorizes a request as."""
    parts = urlsplit(target)
    m = _PATH.match(parts.path)
    assert m, f"a request outside a namespaced resource: {method} {target}"
    assert m["ns"] == SERVING, f"a request outside the serving namespace: {target}"
    group = m["group"] or ""
    resource = m["resource"] + (f"/{m['sub']}" if m["sub"] else "")
    if method == "GET":
        watching = parse_qs(parts.query).get("watch") == ["true"]
        verb = "get" if m["name"] else ("watch" if watching else "list")
    elif method == "DELETE":
        verb = "delete" if m["name"] else "deletecollection"
    else:
        verb = _VERBS[method]
    return group, resource, verb


def want(generation: int = 1, instance: int = 1) -> DesiredReplicaSet:
    spec = {
        "name": NAME,
        "processor": "triton",
        "processor_params": ["--model-repository=oss://bucket/models", "--allow-http=true"],
        "metadata": {"instance": instance, "gpu": 1, "resource": "eas-r-a10"},
    }
    return desired(
        ServiceState(NAME, UID, generation, StoredSpec.model_validate(spec), False, False)
    )


async def _until(check: Callable[[], object], timeout: float = 15.0) -> None:
    await wait_until_async(check, timeout)


@pytest.fixture
def api() -> Any:
    server = AuditedStandIn(namespaces=(SERVING,)).start()
    yield server
    server.stop()


async def run_a_service_through_its_life(
    api: AuditedStandIn, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *, cache: bool = False
) -> SpyClient:
    for name in ("KUBECONFIG", "KUBERNETES_SERVICE_HOST"):
        monkeypatch.delenv(name, raising=False)
    settings = KubernetesSettings(
        namespace=SERVING,
        kubeconfig=str(api.write_kubeconfig(tmp_path / "kubeconfig")),
        resource_groups=RESOURCE_GROUPS,  # type: ignore[arg-type]
        request_timeout_seconds=5,
        model_cache_url="http://openeas-model-cache.openeas.svc:8090" if cache else "",
        model_cache_token="cache-token-for-tests" if cache else "",  # type: ignore[arg-type]
    )
    client = SpyClient(settings)
    runtime = KubernetesRuntime(settings, lambda _service: None, client=client)
    assert await runtime.claim(INSTALLATION) is None  # records the installation (ConfigMap)
    await runtime.warn("OrphansKept", "a warning for the operator")  # an Event
    try:
        await runtime.apply(want())  # creates the Deployment, Service and budget
        [pod] = api.sync_pods(OBJECT)
        api.set_pod_status(pod, ks.status_ready())
        assert (await runtime.observe(NAME)).replicas[0].state == "Running"
        await runtime.apply(want(generation=2, instance=2))  # changes them
        api.set_log(pod, "processor", "serving\n")
        assert await runtime.logs(NAME, 0, 10) == "serving\n"
        logs = KubernetesLogs(settings, client=client)  # eascmd logs --previous, -f
        api.set_previous_log(pod, "processor", "crashed\n")
        assert await logs.logs(NAME, 0, 10, previous=True) == "crashed\n"
        follow = logs.follow(NAME, 0, 10)
        assert await anext(follow) == "serving\n"
        await follow.aclose()  # type: ignore[attr-defined]
        assert await runtime.services() == {NAME}
        api.set_pod_cpu(pod, "250m")
        assert await runtime.cpu_cores(NAME) == [0.25]  # the autoscaler's cpu metric
        assert await runtime.delete(NAME) is False  # pods still terminating
        api.remove_pods()
        await _until(lambda: client.called >= API_METHODS)  # both watches connected
        assert await runtime.delete(NAME) is True
    finally:
        await runtime.close()
    return client


@pytest.mark.parametrize("cache", [False, True], ids=["plain", "model cache"])
async def test_the_role_grants_exactly_what_the_runtime_calls(
    api: AuditedStandIn, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cache: bool
) -> None:
    client = await run_a_service_through_its_life(api, tmp_path, monkeypatch, cache=cache)
    assert client.called == API_METHODS, "extend the scenario to the client's new calls"

    # The first applies created the objects: authorized as create as well as patch.
    assert (
        sorted(api.created)
        == [
            ("", "secrets", "openeas-model-cache"),  # the cache's token for pull init containers
            ("", "services", OBJECT),
            ("apps", "deployments", OBJECT),
            ("policy", "poddisruptionbudgets", OBJECT),
        ][0 if cache else 1 :]
    )
    # The leader's event mirror (runtime/kubernetes/events.py), in the same namespace.
    mirror = KubeClient(KubernetesSettings(kubeconfig=str(tmp_path / "kubeconfig")))
    try:
        row = EventRow(type="Normal", reason="Scaled", message="scaled 1→2")
        row.created_at = datetime.now(UTC)
        assert mirror.create(kube_event(SERVING, NAME, 1, row, "cp-0"))
    finally:
        mirror.close()
    used = {authorization(method, target) for method, target in list(api.requests)}
    used |= {(group, resource, "create") for group, resource, _ in api.created}

    values = VALUE_SETS["gpu resource groups"]  # serving namespace of its own
    objects = render({**values, "modelCache": {"enabled": True}} if cache else values)
    role = find(objects, "Role", "openeas-runtime")
    assert role["metadata"]["namespace"] == SERVING
    granted = {
        (group, resource, verb)
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }
    assert granted == used, (
        f"granted but never used: {sorted(granted - used)}; "
        f"used but not granted: {sorted(used - granted)}"
    )


def test_operations_doc_lists_the_roles_rules() -> None:
    role = find(render({}), "Role", "openeas-runtime")
    text = (ROOT / "docs" / "operations.md").read_text()
    for rule in role["rules"]:
        for resource in rule["resources"]:
            assert f"{resource}: {', '.join(rule['verbs'])}" in text


def test_the_role_is_bound_to_the_control_planes_account_only() -> None:
    objects = render(VALUE_SETS["gpu resource groups"])
    binding = find(objects, "RoleBinding", "openeas-runtime")
    assert binding["metadata"]["namespace"] == SERVING
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "Role",
        "name": "openeas-runtime",
    }
    account = find(objects, "ServiceAccount", "openeas-controlplane")
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "openeas-controlplane", "namespace": "openeas"}
    ]
    assert account["metadata"]["namespace"] == "openeas"
    pods: list[Obj] = [
        o["spec"]["template"]["spec"] for o in objects if o["kind"] in ("Deployment", "Job")
    ]
    users = [p for p in pods if p.get("serviceAccountName") == "openeas-controlplane"]
    assert len(users) == 1  # the control plane; the gateway and the Job get no API token
    kinds = {o["kind"] for o in objects}
    assert kinds.isdisjoint({"ClusterRole", "ClusterRoleBinding"})


def test_rbac_can_be_left_to_the_operator() -> None:
    objects = render(
        {"rbac": {"create": False}, "serviceAccount": {"create": False, "name": "eas"}}
    )
    kinds = {o["kind"] for o in objects}
    assert kinds.isdisjoint({"Role", "RoleBinding", "ServiceAccount"})
    pod = find(objects, "Deployment", "openeas-controlplane")["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == "eas"
