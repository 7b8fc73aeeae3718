"""The serving namespace the chart makes is fenced: the NetworkPolicy is evaluated, as a CNI
would, against the labels of the pods it must admit or refuse — replicas as the Kubernetes
runtime really labels them (``desired_objects``), the gateway and control plane as the chart
renders them — and the namespace enforces Pod Security ``restricted``, which the replicas'
pod spec satisfies."""

from __future__ import annotations

import ipaddress
from typing import Any

import pytest

from controlplane.model.spec import StoredSpec
from controlplane.model.states import ServiceState
from controlplane.reconcile.desired import desired
from controlplane.runtime.kubernetes.manifests import desired_objects
from controlplane.runtime.kubernetes.settings import KubernetesSettings
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
    blocks = [p["ipBlock"] for rule in egress for p in rule.get("to", []) if "ipBlock" in p]
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


def matches(selector: Obj, labels: dict[str, str]) -> bool:
    """A label selector, matchExpressions (In, NotIn) included, as the API evaluates it."""
    if not all(labels.get(k) == v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    for e in selector.get("matchExpressions") or []:
        inside = labels.get(e["key"]) in e["values"]
        if (e["operator"] == "In") != inside:
            return False
    return True


def peer_matches(
    peer: Obj, policy_ns: str, ns: str, labels: dict[str, str] | None, ip: str
) -> bool:
    """A NetworkPolicy peer against a pod (``labels``, in ``ns``, at ``ip``) or, with
    ``labels`` None, an address outside the cluster. ipBlock is matched against pod
    addresses too, as Calico does (the stricter reading)."""
    if "ipBlock" in peer:
        block = peer["ipBlock"]
        address = ipaddress.ip_address(ip)
        return address in ipaddress.ip_network(block["cidr"]) and not any(
            address in ipaddress.ip_network(c) for c in block.get("except", [])
        )
    if labels is None:
        return False
    ns_labels = {"kubernetes.io/metadata.name": ns}
    if "namespaceSelector" in peer:
        if not matches(peer["namespaceSelector"], ns_labels):
            return False
    elif ns != policy_ns:
        return False
    return matches(peer.get("podSelector", {}), labels)


def allows(
    rules: list[Obj], key: str, policy_ns: str, ns: str, labels: dict[str, str] | None,
    ip: str, port: int, protocol: str = "TCP", named: dict[str, int] | None = None,
) -> bool:  # fmt: skip
    """Some rule (egress ``to`` / ingress ``from``) admits that peer on ``port``."""
    for rule in rules:
        ports = rule.get("ports")
        if ports is not None and not any(
            (named or {}).get(p["port"], p["port"]) == port and p.get("protocol", "TCP") == protocol
            for p in ports
        ):
            continue
        peers = rule.get(key)
        if peers is None or any(peer_matches(p, policy_ns, ns, labels, ip) for p in peers):
            return True
    return False


POD_IP, OSS_IP, NODE_IP = "10.244.3.7", "100.118.28.1", "10.0.0.5"


@pytest.mark.parametrize("cache", [False, True])
def test_replicas_reach_dns_oss_and_the_cache_never_the_release_namespace(cache: bool) -> None:
    objects = render({"modelCache": {"enabled": cache}})
    policy = find(objects, "NetworkPolicy", POLICY)
    egress = policy["spec"]["egress"]

    def to(ns: str, labels: dict[str, str] | None, ip: str, port: int, proto: str = "TCP") -> bool:
        return allows(egress, "to", SERVING, ns, labels, ip, port, proto)

    assert to("kube-system", {"k8s-app": "kube-dns"}, POD_IP, 53, "UDP")
    assert to("kube-system", {"k8s-app": "kube-dns"}, POD_IP, 53, "TCP")
    assert to("", None, "169.254.20.10", 53, "UDP")  # a node-local DNS cache
    assert to("", None, OSS_IP, 443)  # OSS (internal endpoints are 100.x)
    assert to("", None, "47.96.1.1", 80)  # OSS, public
    for name in ("openeas-controlplane", "openeas-gateway", "openeas-postgresql"):
        labels = pod_labels(objects, name)
        for port in (8080, 5432, 8001):
            assert not to(NAMESPACE, labels, POD_IP, port), name
    assert not to("other-team", {"app": "redis"}, POD_IP, 6379)
    assert not to("", None, "169.254.169.254", 80)
    assert not to("", None, NODE_IP, 10250)  # the kubelet's API
    cache_pod = {"app.kubernetes.io/name": "openeas", "app.kubernetes.io/instance": "openeas",
                 "app.kubernetes.io/component": "model-cache"}  # fmt: skip
    assert to(NAMESPACE, cache_pod, POD_IP, 8090) == cache


def test_extra_egress_and_cluster_cidrs_are_the_operators() -> None:
    rule = {"to": [{"ipBlock": {"cidr": "10.9.0.0/16"}}], "ports": [{"port": 5432}]}
    objects = render(
        {"serving": {"networkPolicy": {"enabled": True, "clusterCIDRs": ["10.244.0.0/16"],
                                       "extraEgress": [rule]}}}
    )  # fmt: skip
    egress = find(objects, "NetworkPolicy", POLICY)["spec"]["egress"]
    assert allows(egress, "to", SERVING, "", None, "10.9.1.1", 5432)  # opened
    assert allows(egress, "to", SERVING, "", None, "192.168.1.1", 443)  # no longer fenced
    assert not allows(egress, "to", SERVING, NAMESPACE, {}, "10.244.1.1", 8080)


def test_the_release_namespace_admits_replicas_nowhere_but_the_gateway() -> None:
    objects = render({})
    replica = replica_pod()["metadata"]["labels"]
    prometheus = ("monitoring", {"app": "prometheus"})
    ingress_nginx = ("ingress-nginx", {"app.kubernetes.io/name": "ingress-nginx"})

    def reaches(target: str, port: int, ns: str, labels: dict[str, str] | None, ip: str) -> bool:
        kind = "StatefulSet" if target.endswith("postgresql") else "Deployment"
        pod = find(objects, kind, target)["spec"]["template"]
        policies = [
            p for p in objects
            if p["kind"] == "NetworkPolicy" and p["metadata"]["namespace"] == NAMESPACE
            and matches(p["spec"]["podSelector"], pod["metadata"]["labels"])
        ]  # fmt: skip
        assert policies, f"no policy selects {target}"
        named = {
            p["name"]: p["containerPort"]
            for c in pod["spec"]["containers"]
            for p in c.get("ports", [])
        }
        return any(
            allows(p["spec"]["ingress"], "from", NAMESPACE, ns, labels, ip, port, named=named)
            for p in policies
        )

    cp, gw, db = "openeas-controlplane", "openeas-gateway", "openeas-postgresql"
    assert reaches(gw, 8080, SERVING, replica, POD_IP)  # with a token, as anyone
    assert reaches(gw, 8080, "", None, "203.0.113.9")  # a load balancer's client
    assert not reaches(cp, 8080, SERVING, replica, POD_IP)
    assert reaches(cp, 8080, NAMESPACE, pod_labels(objects, gw), POD_IP)
    assert reaches(cp, 8080, *prometheus, POD_IP)
    assert reaches(cp, 8080, *ingress_nginx, POD_IP)
    assert not reaches(db, 5432, SERVING, replica, POD_IP)
    assert not reaches(db, 5432, NAMESPACE, pod_labels(objects, gw), POD_IP)
    assert reaches(db, 5432, NAMESPACE, pod_labels(objects, cp), POD_IP)
    migrate = find(objects, "Job", "openeas-migrate")["spec"]["template"]["metadata"]["labels"]
    assert reaches(db, 5432, NAMESPACE, migrate, POD_IP)
    off = render({"serving": {"platformNetworkPolicy": False}})
    mine = {"openeas-gateway", "openeas-controlplane", "openeas-postgresql"}
    assert not [p for p in off if p["kind"] == "NetworkPolicy" and p["metadata"]["name"] in mine]


def test_metrics_namespaces_and_the_switch(chart: list[Obj]) -> None:
    objects = render({"serving": {"networkPolicy": {"enabled": True, "metricsNamespaces": []}}})
    policy = find(objects, "NetworkPolicy", POLICY)
    assert not admits(policy, "monitoring", {}, replica_pod(), 8002)
    off = render({"serving": {"networkPolicy": {"enabled": False}}})
    assert not [
        o for o in off if o["kind"] == "NetworkPolicy" and o["metadata"]["namespace"] == SERVING
    ]


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
