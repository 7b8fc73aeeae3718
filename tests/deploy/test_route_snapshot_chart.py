"""The shared route snapshot in the chart: the control plane is told which ConfigMap to keep
and where, the gateway pods mount that ConfigMap read-only where their setting points, and
the Role in the release namespace grants exactly what the publisher's requests need
(recorded against the API stand-in, as tests/deploy/test_rbac.py does for the runtime)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from controlplane.runtime.kubernetes.route_snapshot import KEY, RouteSnapshotPublisher
from controlplane.runtime.kubernetes.settings import KubernetesSettings
from controlplane.store.db import make_engine, make_sessions
from controlplane.store.sealing import TokenSealer
from controlplane.store.services import Services
from tests.controlplane.conftest import seed_spec
from tests.deploy.chart import NAMESPACE, Obj, container, find, render
from tests.deploy.test_rbac import _PATH, _VERBS, AuditedStandIn

CP, GW, ROUTES = "openeas-controlplane", "openeas-gateway", "openeas-routes"


def env(c: Obj) -> dict[str, str]:
    return {e["name"]: e.get("value", "") for e in c.get("env", [])}


def test_the_gateway_mounts_what_the_control_plane_writes() -> None:
    objects = render()
    cp = env(container(objects, "Deployment", CP, "controlplane"))
    assert cp["OPENEAS_K8S_ROUTE_SNAPSHOT_CONFIGMAP"] == ROUTES
    assert cp["OPENEAS_K8S_ROUTE_SNAPSHOT_NAMESPACE"] == NAMESPACE
    gateway = container(objects, "Deployment", GW, "gateway")
    shared = Path(env(gateway)["OPENEAS_GATEWAY_ROUTE_SNAPSHOT_SHARED"])
    assert shared.name == KEY
    (mount,) = [m for m in gateway["volumeMounts"] if m["mountPath"] == str(shared.parent)]
    assert mount["readOnly"] is True
    pod = find(objects, "Deployment", GW)["spec"]["template"]["spec"]
    (volume,) = [v for v in pod["volumes"] if v["name"] == mount["name"]]
    assert volume["configMap"] == {"name": ROUTES, "optional": True}


def test_it_can_be_turned_off() -> None:
    objects = render({"gateway": {"sharedRouteSnapshot": False}})
    assert "OPENEAS_K8S_ROUTE_SNAPSHOT_CONFIGMAP" not in env(
        container(objects, "Deployment", CP, "controlplane")
    )
    assert "OPENEAS_GATEWAY_ROUTE_SNAPSHOT_SHARED" not in env(
        container(objects, "Deployment", GW, "gateway")
    )
    assert not [o for o in objects if o["metadata"]["name"] == ROUTES]


@pytest.fixture
def api() -> Any:
    server = AuditedStandIn(namespaces=("openeas-serving", NAMESPACE)).start()
    yield server
    server.stop()


def test_the_role_grants_exactly_what_the_publisher_calls(
    api: AuditedStandIn, database_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("KUBECONFIG", "KUBERNETES_SERVICE_HOST"):
        monkeypatch.delenv(name, raising=False)
    settings = KubernetesSettings(
        kubeconfig=str(api.write_kubeconfig(tmp_path / "kubeconfig")),
        route_snapshot_configmap=ROUTES,
        route_snapshot_namespace=NAMESPACE,
    )
    engine = make_engine(database_url)
    sessions = make_sessions(engine)
    services = Services(sessions, "local", TokenSealer(["sealing-key-for-tests-0123"]))
    publisher = RouteSnapshotPublisher(sessions, "local", 600_000, settings)
    services.create(seed_spec(name="first"))
    assert publisher.publish_once()  # creates it
    services.create(seed_spec(name="second"))
    assert publisher.publish_once()  # changes it
    engine.dispose()

    used: set[tuple[str, str, str]] = set()
    for method, target in api.requests:
        m = _PATH.match(target.split("?")[0])
        assert m is not None and m["ns"] == NAMESPACE and m["name"] == ROUTES, target
        used.add((m["resource"], m["name"], _VERBS.get(method, method.lower())))
    used |= {(resource, name, "create") for _, resource, name in api.created}

    role = find(render(), "Role", ROUTES)
    assert role["metadata"]["namespace"] == NAMESPACE
    granted = {
        (resource, name, verb)
        for rule in role["rules"]
        for resource in rule["resources"]
        for name in rule.get("resourceNames", [ROUTES])  # create: any name
        for verb in rule["verbs"]
    }
    assert used == granted
    objects = render()
    binding = find(objects, "RoleBinding", ROUTES)
    assert binding["roleRef"]["name"] == ROUTES
    account = find(objects, "Deployment", CP)["spec"]["template"]["spec"]["serviceAccountName"]
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": account, "namespace": NAMESPACE}
    ]
