"""The serving namespace the chart makes is fenced: the NetworkPolicy is evaluated, as a CNI
would, against the labels of the pods it must admit or refuse — replicas as the Kubernetes
runtime really labels them (``desired_objects``), the gateway and control plane as the chart
renders them — and the namespace enforces Pod Security ``restricted``, which the replicas'
pod spec satisfies."""

from __future__ import annotations

import ipaddress
from typing import Any

import pytest

from controlplane.desired import ServiceState, desired
from controlplane.runtime.kubernetes.manifests import desired_objects
from controlplane.runtime.kubernetes.settings import KubernetesSettings
from controlplane.spec import StoredSpec
from tests.deploy.chart import NAMESPACE, Obj, find, render

SERVING = "openeas-serving"
POLICY = "openeas-replicas"


def replica_pod(gpu: int = 1, **settings_: Any) -> Obj:
    """The pod template of a service's Deployment, from the runtime's own manifests."""
    spec = {
        "name": "triton_test",
        "processor": "triton",
        "processor_params": ["--model-repository=oss://bucket/models"],
        "metadata": {"instance": 2, "cpu": 4, "gpu": gpu, "memory": 10000},
    }
    state = ServiceState("triton_test", "u1", 1, StoredSpec.model_validate(spec), False, False)
    settings = KubernetesSettings(namespace=SERVING, kubeconfig="/nonexistent", **settings_)
    deployment = desired_objects(desired(state), settings)[0]
    return deployment["spec"]["template"]  # type: ignore[no-any-return]


def selects(selector: Obj, labels: dict[str, str]) -> bool:
    assert set(selector) <= {"matchLabels"}, selector  # what the chart uses
    return all(labels.get(k) == v for k, v in (selector.get("matchLabels") or {}).items())


def admits(policy: Obj, source_ns: str, source: dict[str, str], target: Obj, port: int) -> bool:
    """Ingress to ``target`` (a pod template) on ``port`` from a pod labelled ``source`` in
    ``source_ns`` (namespaces carry their automatic kubernetes.io/metadata.name label)."""
    assert selects(policy["spec"]["podSelector"], target["metadata"]["labels"])
    named = {
        p["name"]: p["containerPort"] for c in target["spec"]["containers"] for p in c["ports"]
    }
    ns_labels = {"kubernetes.io/metadata.name": source_ns}
    for rule in policy["spec"]["ingress"]:
        if port not in {named.get(p["port"], p["port"]) for p in rule["ports"]}:
            continue
        for peer in rule["from"]:
            in_ns = (
                selects(peer["namespaceSelector"], ns_labels)
                if "namespaceSelector" in peer
                else source_ns == policy["metadata"]["namespace"]
            )
            if in_ns and selects(peer.get("podSelector", {}), source):
                return True
    return False


@pytest.fixture(scope="module")
def chart() -> list[Obj]:
    return render({})


def pod_labels(objects: list[Obj], name: str) -> dict[str, str]:
    kind = "StatefulSet" if name.endswith("postgresql") else "Deployment"
    return find(objects, kind, name)["spec"]["template"]["metadata"]["labels"]  # type: ignore[no-any-return]


@pytest.mark.parametrize("gpu", [0, 1])
def test_replica_ports_only_from_the_gateway_and_the_control_plane(
    chart: list[Obj], gpu: int
) -> None:
    policy = find(chart, "NetworkPolicy", POLICY)
    assert policy["metadata"]["namespace"] == SERVING
    replica = replica_pod(gpu)
    gateway = pod_labels(chart, "openeas-gateway")
    controlplane = pod_labels(chart, "openeas-controlplane")
    database = pod_labels(chart, "openeas-postgresql")
    for port in (8000, 8001):  # HTTP and gRPC
        assert admits(policy, NAMESPACE, gateway, replica, port)
        assert admits(policy, NAMESPACE, controlplane, replica, port)
        assert not admits(policy, NAMESPACE, database, replica, port)
        assert not admits(policy, "monitoring", {}, replica, port)
        assert not admits(policy, "tenant-apps", gateway, replica, port)  # look-alike labels
        assert not admits(policy, SERVING, replica["metadata"]["labels"], replica, port)
    # metrics: the control plane (the autoscaler's queue time) and the monitoring namespace
    assert admits(policy, NAMESPACE, controlplane, replica, 8002)
    assert admits(policy, "monitoring", {"app": "prometheus"}, replica, 8002)
    assert not admits(policy, NAMESPACE, gateway, replica, 8002)
    assert not admits(policy, "tenant-apps", {}, replica, 8002)


def test_replicas_cannot_reach_the_cloud_metadata_service(chart: list[Obj]) -> None:
    egress = find(chart, "NetworkPolicy", POLICY)["spec"]["egress"]
    assert "Egress" in find(chart, "NetworkPolicy", POLICY)["spec"]["policyTypes"]
    blocks = [p["ipBlock"] for rule in egress for p in rule["to"] if "ipBlock" in p]
    denied: set[str] = set()
    for block in blocks:
        network = ipaddress.ip_network(block["cidr"])
        for cidr in block.get("except", []):
            assert ipaddress.ip_network(cidr).subnet_of(network)  # type: ignore[arg-type]
            denied.add(cidr)
    assert {"169.254.169.254/32", "100.100.100.200/32", "fd00:ec2::254/128"} <= denied
    for address in ("169.254.169.254", "100.100.100.200", "fd00:ec2::254"):
        allowed = [
            b
            for b in blocks
            if ipaddress.ip_address(address) in ipaddress.ip_network(b["cidr"])
            and not any(
                ipaddress.ip_address(address) in ipaddress.ip_network(c)
                for c in b.get("except", [])
            )
        ]
        assert allowed == [], address


def test_metrics_namespaces_and_the_switch(chart: list[Obj]) -> None:
    objects = render({"serving": {"networkPolicy": {"enabled": True, "metricsNamespaces": []}}})
    policy = find(objects, "NetworkPolicy", POLICY)
    assert not admits(policy, "monitoring", {}, replica_pod(), 8002)
    off = render({"serving": {"networkPolicy": {"enabled": False}}})
    assert not [o for o in off if o["kind"] == "NetworkPolicy"]


def test_the_serving_namespace_is_restricted_and_kept(chart: list[Obj]) -> None:
    namespace = find(chart, "Namespace", SERVING)
    labels = namespace["metadata"]["labels"]
    for mode in ("enforce", "audit", "warn"):
        assert labels[f"pod-security.kubernetes.io/{mode}"] == "restricted"
    assert namespace["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    control = find(chart, "Deployment", "openeas-controlplane")["spec"]["template"]["spec"]
    env = {e["name"]: e.get("value") for e in control["containers"][0]["env"]}
    assert env["OPENEAS_K8S_NAMESPACE"] == SERVING
    assert find(chart, "Job", "openeas-secrets")["metadata"]["namespace"] == NAMESPACE  # apart
    plain = render({"serving": {"podSecurity": ""}})
    assert (
        "pod-security.kubernetes.io/enforce"
        not in find(plain, "Namespace", SERVING)["metadata"]["labels"]
    )


ALLOWED_VOLUMES = {"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "projected"}
ALLOWED_VOLUMES |= {"persistentVolumeClaim", "secret"}


@pytest.mark.parametrize("gpu", [0, 1])
def test_replicas_meet_pod_security_restricted(gpu: int) -> None:
    check_restricted(replica_pod(gpu)["spec"])


def check_restricted(spec: dict[str, Any]) -> None:
    """The checks of the `restricted` profile (Kubernetes Pod Security Standards)."""
    assert spec["securityContext"]["runAsNonRoot"] is True
    assert spec["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault"
    assert not {"hostNetwork", "hostPID", "hostIPC"} & set(spec)
    for volume in spec.get("volumes", []):
        assert set(volume) - {"name"} <= ALLOWED_VOLUMES, volume
    for c in spec["containers"] + spec.get("initContainers", []):
        context = c["securityContext"]
        assert context["allowPrivilegeEscalation"] is False
        assert context["capabilities"]["drop"] == ["ALL"]
        assert not context.get("capabilities", {}).get("add")
        assert not context.get("privileged")
        assert all("hostPort" not in p for p in c.get("ports", []))
