"""The chart, rendered by Helm's engine for each value set: lint-clean for the Kubernetes
versions we support, every object valid under kubernetes-validate's strict schemas, the
pieces an install depends on in place (hooks, probes, secrets by reference), and the values
schema refusing bad input with a message that names the key."""

from __future__ import annotations

import base64
from typing import Any

import helm_python as helm
import kubernetes_validate
import pytest

from tests.deploy.chart import (
    CHART,
    NAMESPACE,
    VALUE_SETS,
    Obj,
    container,
    find,
    install_dry_run,
    notes,
    render,
)

KUBE_VERSIONS = ["1.29.0", "1.33.0"]  # the oldest supported (Chart.yaml) and a current one
CP, GW = "openeas-controlplane", "openeas-gateway"


@pytest.fixture(scope="module")
def rendered() -> dict[str, list[Obj]]:
    return {case: render(values) for case, values in VALUE_SETS.items()}


@pytest.mark.parametrize("version", KUBE_VERSIONS)
@pytest.mark.parametrize("case", VALUE_SETS)
def test_lint_is_clean(case: str, version: str) -> None:
    report = helm.lint(CHART, VALUE_SETS[case], strict=True, kube_version=f"v{version}")
    findings = [m for m in report["messages"] if m["severity"] >= 2]  # 2 warning, 3 error
    assert findings == [] and report["errors"] == []


@pytest.mark.parametrize("version", KUBE_VERSIONS)
@pytest.mark.parametrize("case", VALUE_SETS)
def test_every_object_validates_strictly(
    case: str, version: str, rendered: dict[str, list[Obj]]
) -> None:
    for obj in rendered[case]:
        assert kubernetes_validate.validate(obj, version, strict=True)


def test_install_dry_run_passes_helms_install_checks() -> None:
    release = install_dry_run(VALUE_SETS["external database"])
    assert release["status"] in ("pending-install", "deployed")
    assert f"svc/{CP}" in release["notes"]


# -- what an install depends on -----------------------------------------------------------------


def test_defaults_bring_a_trial_database_and_create_the_schema_in_the_pod(
    rendered: dict[str, list[Obj]],
) -> None:
    objects = rendered["defaults"]
    find(objects, "StatefulSet", "openeas-postgresql")
    migrate = container(objects, "Deployment", CP, "migrate")
    assert migrate["args"] == ["migrate"]
    # No database exists before the first install's objects: the Job runs on upgrades only.
    job = find(objects, "Job", "openeas-migrate")
    assert job["metadata"]["annotations"]["helm.sh/hook"] == "pre-upgrade"


@pytest.mark.parametrize("case", ["external database", "existing secrets"])
def test_an_external_database_is_migrated_by_a_pre_install_and_pre_upgrade_hook(
    case: str, rendered: dict[str, list[Obj]]
) -> None:
    objects = rendered[case]
    job = find(objects, "Job", "openeas-migrate")
    assert job["metadata"]["annotations"]["helm.sh/hook"] == "pre-install,pre-upgrade"
    pod = job["spec"]["template"]["spec"]
    assert pod["containers"][0]["args"] == ["migrate"]
    assert pod["restartPolicy"] == "Never" and pod["automountServiceAccountToken"] is False
    assert not [
        o for o in objects if o["kind"] == "StatefulSet" and "redis" not in o["metadata"]["name"]
    ]
    assert "initContainers" not in find(objects, "Deployment", CP)["spec"]["template"]["spec"]
    url = _env(pod["containers"][0])["OPENEAS_DATABASE_URL"]["valueFrom"]["secretKeyRef"]
    if case == "existing secrets":
        assert url == {"name": "openeas-db", "key": "url"}
    else:
        # The release's Secret does not exist yet when pre-install hooks run: the Job reads a
        # hook Secret made just before it (lower weight) and deleted after.
        secret = find(objects, "Secret", url["name"])
        annotations = secret["metadata"]["annotations"]
        assert annotations["helm.sh/hook"] == "pre-install,pre-upgrade"
        assert int(annotations["helm.sh/hook-weight"]) < int(
            job["metadata"]["annotations"]["helm.sh/hook-weight"]
        )
        assert "hook-succeeded" in annotations["helm.sh/hook-delete-policy"]


def test_probes_use_the_servers_health_paths(rendered: dict[str, list[Obj]]) -> None:
    objects = rendered["defaults"]
    cp = container(objects, "Deployment", CP, "controlplane")
    assert cp["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert cp["livenessProbe"]["httpGet"]["path"] == "/healthz"
    gw = container(objects, "Deployment", GW, "gateway")
    from gateway.settings import GatewaySettings

    health = GatewaySettings().health_path
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert gw[probe]["httpGet"] == {"path": health, "port": "http"}


def test_the_control_plane_runs_the_kubernetes_runtime_with_a_standby(
    rendered: dict[str, list[Obj]],
) -> None:
    deployment = find(rendered["defaults"], "Deployment", CP)
    assert deployment["spec"]["replicas"] == 2  # one leads, the other takes over
    env = _env(container(rendered["defaults"], "Deployment", CP, "controlplane"))
    assert env["OPENEAS_RUNTIME"]["value"] == "kubernetes"
    # default: a namespace of their own, apart from the database and the admin token
    assert env["OPENEAS_K8S_NAMESPACE"]["value"] == "openeas-serving"


def test_the_gateway_serves_grpc_beside_http_and_replicas_let_it_in(
    rendered: dict[str, list[Obj]],
) -> None:
    objects = rendered["defaults"]
    gw = container(objects, "Deployment", GW, "gateway")
    assert {"name": "grpc", "containerPort": 8001, "protocol": "TCP"} in gw["ports"]
    assert _env(gw)["OPENEAS_GATEWAY_GRPC_PORT"]["value"] == "8001"
    ports = {p["name"]: p for p in find(objects, "Service", GW)["spec"]["ports"]}
    assert (ports["grpc"]["port"], ports["grpc"]["targetPort"]) == (8001, "grpc")
    policy = find(objects, "NetworkPolicy", "openeas-replicas")
    assert {"port": "grpc", "protocol": "TCP"} in policy["spec"]["ingress"][0]["ports"]
    assert "tritonclient.grpc" in notes(VALUE_SETS["defaults"])

    off = render({**VALUE_SETS["defaults"], "gateway": {"grpc": {"enabled": False, "port": 1}}})
    gw = container(off, "Deployment", GW, "gateway")
    assert [p["name"] for p in gw["ports"]] == ["http"]
    assert "OPENEAS_GATEWAY_GRPC_PORT" not in _env(gw)
    assert [p["name"] for p in find(off, "Service", GW)["spec"]["ports"]] == ["http"]


def test_the_gateway_has_no_kubernetes_api_token(rendered: dict[str, list[Obj]]) -> None:
    pod = find(rendered["defaults"], "Deployment", GW)["spec"]["template"]["spec"]
    assert pod["automountServiceAccountToken"] is False


@pytest.mark.parametrize("case", VALUE_SETS)
def test_pods_run_as_non_root_on_a_read_only_filesystem(
    case: str, rendered: dict[str, list[Obj]]
) -> None:
    for obj in rendered[case]:
        if obj["kind"] not in ("Deployment", "StatefulSet", "Job"):
            continue
        pod = obj["spec"]["template"]["spec"]
        assert pod["securityContext"]["runAsNonRoot"] is True
        for c in pod.get("initContainers", []) + pod["containers"]:
            assert c["securityContext"]["readOnlyRootFilesystem"] is True
            assert c["securityContext"]["capabilities"] == {"drop": ["ALL"]}


@pytest.mark.parametrize("case", VALUE_SETS)
def test_secrets_reach_pods_only_by_reference(case: str, rendered: dict[str, list[Obj]]) -> None:
    """No secret value (token, password, URL with credentials, OSS key) is written into a
    pod spec: each comes from a Secret through secretKeyRef."""
    objects = rendered[case]
    secret_values = {
        base64.b64decode(v).decode()
        for o in objects
        if o["kind"] == "Secret"
        for v in (o.get("data") or {}).values()
    }
    for obj in objects:
        if obj["kind"] == "Secret":
            continue
        text = repr(obj)
        assert not [s for s in secret_values if s in text], obj["metadata"]["name"]
    for name in ("OPENEAS_ADMIN_TOKEN", "OPENEAS_DATABASE_URL", "PGPASSWORD"):
        for obj in objects:
            for env in _all_env(obj):
                if env["name"] == name and "value" in env:
                    assert name == "OPENEAS_DATABASE_URL" and "@" in env["value"]
                    assert ":" not in env["value"].split("@")[0].split("//")[1]  # no password


ADMIN = "admin-token=openeas/admin-token"
PLATFORM = ["routes-token=openeas/routes-token", "secret-key=openeas/secret-key"]
PASSWORD = "postgresql-password=openeas-postgresql/password"


def test_helm_template_draws_no_random_value() -> None:
    """What GitOps tools apply is what was rendered: two renders are the same, so a sync
    never replaces the admin token or the database password (the hook Job draws them once
    in the cluster: tests/kubernetes/test_secrets_cli.py)."""
    assert render({}) == render({})
    assert not [o for o in render({}) if o["kind"] == "Secret"]


@pytest.mark.parametrize(
    ("values", "keys"),
    [
        ({}, [ADMIN, *PLATFORM, PASSWORD]),
        ({"auth": {"adminToken": "x" * 20}}, [*PLATFORM, PASSWORD]),
        (VALUE_SETS["external database"], PLATFORM),
        (VALUE_SETS["existing secrets"], None),
    ],
)
def test_a_hook_job_generates_only_what_nobody_gave(values: Obj, keys: list[str] | None) -> None:
    objects = render(values)
    jobs = [o for o in objects if o["kind"] == "Job" and o["metadata"]["name"] == "openeas-secrets"]
    if keys is None:
        assert jobs == [] and not [o for o in objects if o["metadata"]["name"] == "openeas-secrets"]
        return
    [job] = jobs
    assert job["metadata"]["annotations"]["helm.sh/hook"] == "pre-install,pre-upgrade"
    args = job["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args == ["secrets", "--namespace", NAMESPACE, "--name", "openeas-generated", *keys]
    rules = find(objects, "Role", "openeas-secrets")["rules"]
    named: dict[str, set[str]] = {}
    for rule in rules:
        for verb in rule["verbs"]:
            named.setdefault(verb, set()).update(rule.get("resourceNames", ["*"]))
    seeds = {k.split("=")[1].split("/")[0] for k in keys}
    assert named == {"create": {"*"}, "patch": {"openeas-generated"}} | {
        "get": {"openeas-generated", "openeas", "openeas-postgresql"}
    }
    assert seeds <= named["get"]
    # every reader of a generated value reads it from that Secret
    env = _env(container(objects, "Deployment", CP, "controlplane"))
    token_ref = env["OPENEAS_ADMIN_TOKEN"]["valueFrom"]["secretKeyRef"]
    assert (token_ref["name"] == "openeas-generated") == any("admin-token" in k for k in keys)


def test_existing_secrets_are_referenced_and_none_is_made(rendered: dict[str, list[Obj]]) -> None:
    objects = rendered["existing secrets"]
    assert not [o for o in objects if o["kind"] == "Secret"]
    env = _env(container(objects, "Deployment", CP, "controlplane"))
    assert env["OPENEAS_ADMIN_TOKEN"]["valueFrom"]["secretKeyRef"] == {
        "name": "openeas-admin",
        "key": "admin-token",
    }
    assert env["OPENEAS_K8S_OSS_SECRET"]["value"] == "oss-keys"


def test_the_oss_secret_lives_where_replicas_run(rendered: dict[str, list[Obj]]) -> None:
    objects = rendered["gpu resource groups"]
    secret = find(objects, "Secret", "openeas-oss")
    assert secret["metadata"]["namespace"] == "openeas-serving"
    assert set(secret["data"]) == {"OSS_ACCESS_KEY_ID", "OSS_ACCESS_KEY_SECRET"}
    find(objects, "Namespace", "openeas-serving")
    env = _env(container(objects, "Deployment", CP, "controlplane"))
    assert env["OPENEAS_K8S_OSS_SECRET"]["value"] == "openeas-oss"


def test_ingress_routes_predict_traffic_to_the_gateway(rendered: dict[str, list[Obj]]) -> None:
    objects = rendered["ingress"]
    ingress = find(objects, "Ingress", GW)
    assert ingress["spec"]["ingressClassName"] == "nginx"
    assert ingress["spec"]["tls"] == [
        {"hosts": ["predict.example.com"], "secretName": "predict-tls"}
    ]
    [rule] = ingress["spec"]["rules"]
    [path] = rule["http"]["paths"]
    assert (rule["host"], path["path"], path["backend"]["service"]["name"]) == (
        "predict.example.com",
        "/api/predict",
        GW,
    )
    assert {o["metadata"]["name"] for o in rendered["defaults"] if o["kind"] == "Ingress"} == set()
    find(objects, "Ingress", CP)
    env = _env(container(objects, "Deployment", CP, "controlplane"))
    assert env["OPENEAS_PUBLIC_URL"]["value"] == "https://predict.example.com"
    assert env["OPENEAS_INTRANET_URL"]["value"] == f"http://{GW}.{NAMESPACE}.svc.cluster.local"


def test_grpc_ingress_routes_triton_grpc_by_host_and_domain(
    rendered: dict[str, list[Obj]],
) -> None:
    """The gRPC door's Ingress: its own host (token-selected services) and, with the
    gateway's domain set, every <service>.<domain>, to the gateway's gRPC port, spoken to
    as gRPC."""
    ingress = find(rendered["ingress"], "Ingress", f"{GW}-grpc")
    annotations = ingress["metadata"]["annotations"]
    assert annotations["nginx.ingress.kubernetes.io/backend-protocol"] == "GRPC"
    hosts = ["grpc.example.com", "*.eas.example.com"]
    assert ingress["spec"]["tls"] == [{"hosts": hosts, "secretName": "grpc-tls"}]
    routes = [
        (rule["host"], path["path"], path["backend"]["service"]["name"],
         path["backend"]["service"]["port"]["number"])
        for rule in ingress["spec"]["rules"]
        for path in rule["http"]["paths"]
    ]  # fmt: skip
    assert routes == [(h, "/inference.GRPCInferenceService/", GW, 8001) for h in hosts]
    env = _env(container(rendered["ingress"], "Deployment", GW, "gateway"))
    assert env["OPENEAS_GATEWAY_DOMAIN"]["value"] == "eas.example.com"


def test_hpa_scales_the_gateway_and_owns_its_replica_count(
    rendered: dict[str, list[Obj]],
) -> None:
    objects = rendered["hpa"]
    hpa = find(objects, "HorizontalPodAutoscaler", GW)
    assert hpa["spec"]["scaleTargetRef"] == {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "name": GW,
    }
    assert (hpa["spec"]["minReplicas"], hpa["spec"]["maxReplicas"]) == (3, 20)
    assert "replicas" not in find(objects, "Deployment", GW)["spec"]
    assert container(objects, "Deployment", GW, "gateway")["resources"]["requests"]["cpu"]
    assert not [o for o in rendered["defaults"] if o["kind"] == "HorizontalPodAutoscaler"]


def test_optional_objects_are_off_by_default(rendered: dict[str, list[Obj]]) -> None:
    kinds = {o["kind"] for o in rendered["defaults"]}
    assert kinds.isdisjoint({"Ingress", "HorizontalPodAutoscaler", "ServiceMonitor"})
    assert "ClusterRole" not in kinds and "ClusterRoleBinding" not in kinds


# -- NOTES --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("case", "endpoint", "gateway"),
    [
        ("defaults", "http://127.0.0.1:8080", "port-forward -n openeas svc/openeas-gateway"),
        ("ingress", "http://eas.example.com", "https://predict.example.com/api/predict/"),
        ("hpa", "http://127.0.0.1:8080", ".status.loadBalancer.ingress[0]"),
    ],
)
def test_notes_tell_how_to_reach_the_api_and_the_gateway(
    case: str, endpoint: str, gateway: str
) -> None:
    text = notes(VALUE_SETS[case])
    assert "kubectl get secret -n openeas openeas" in text
    assert "-o jsonpath='{.data.admin-token}' | base64 -d" in text
    assert f"export EAS_API={endpoint}" in text
    assert 'eascmd config -e "$EAS_API" -k "$EAS_ADMIN_TOKEN" -r default' in text
    assert gateway in text


# -- values schema ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"gateway": {"replicas": "two"}}, "at '/gateway/replicas': got string, want integer"),
        ({"gateway": {"replica": 2}}, "at '/gateway': additional properties 'replica' not allowed"),
        ({"postgresql": {"enabled": "yes"}}, "at '/postgresql/enabled': got string, want boolean"),
        ({"image": {"repository": ""}}, "at '/image/repository': minLength: got 0, want 1"),
        ({"clusterId": "CN_Hangzhou"}, "at '/clusterId': 'CN_Hangzhou' does not match pattern"),
        ({"auth": {"adminToken": "short"}}, "at '/auth/adminToken': 'short' does not match"),
        (
            {"postgresql": {"enabled": False}},
            "at '/database/url': minLength: got 0, want 1",  # and the alternative:
        ),
        ({"postgresql": {"enabled": False}}, "at '/database/existingSecret': minLength"),
        (
            {"postgresql": {"enabled": False}, "database": {"url": "mysql://db/openeas"}},
            "at '/database/url': 'mysql://db/openeas' does not match pattern",
        ),
        ({"gateway": {"ingress": {"enabled": True}}}, "at '/gateway/ingress/host': minLength"),
        (
            {"gateway": {"grpc": {"ingress": {"enabled": True}}}},
            "at '/gateway/grpc/ingress/host': minLength",
        ),
        (
            {"serving": {"resourceGroups": {"a10": {"tolerations": [{"operator": "Equals"}]}}}},
            "at '/serving/resourceGroups/a10/tolerations/0/operator': value must be one of "
            "'Equal', 'Exists'",
        ),
        (
            {"serving": {"resourceGroups": {"a10": {"node_selector": {"pool": "a10"}}}}},
            "additional properties 'node_selector' not allowed",
        ),
        ({"gateway": {"config": {"maxBodyByte": 1}}}, "additional properties 'maxBodyByte'"),
        ({"serving": {"config": {"runAsUser": "0"}}}, "at '/serving/config/runAsUser': got string"),
        ({"oss": {"accessKeyId": "LTAI-x"}}, "at '/oss/accessKeySecret': minLength: got 0, want 1"),
        ({"gateway": {"service": {"type": "Ext"}}}, "at '/gateway/service/type': value must be"),
        # `--set image=null` removes a default: required values are then missing.
        ({"image": None}, "at '': missing property 'image'"),
        (
            {"serving": {"processorImage": {"repository": None}}},
            "at '/serving/processorImage': missing property 'repository'",
        ),
    ],
)
def test_the_schema_rejects_bad_values_naming_the_key(values: Obj, message: str) -> None:
    with pytest.raises(helm.HelmValuesError) as failed:
        render(values)  # as `helm install`/`template`: user values over the defaults
    assert message in str(failed.value)


def test_validating_values_alone_gives_the_same_answer() -> None:
    with helm.Chart.load(CHART) as chart:
        chart.validate_schema(VALUE_SETS["gpu resource groups"])
        with pytest.raises(helm.HelmValuesError, match="got string, want integer"):
            chart.validate_schema({"controlplane": {"replicas": "1"}})


# -- helpers ------------------------------------------------------------------------------------


def _env(c: Obj) -> dict[str, Any]:
    return {e["name"]: e for e in c.get("env", [])}


def _all_env(obj: Obj) -> list[Obj]:
    template = (obj.get("spec") or {}).get("template")
    if not template:
        return []
    pod = template["spec"]
    return [e for c in pod.get("initContainers", []) + pod["containers"] for e in c.get("env", [])]


def test_image_digests_pin_what_runs() -> None:
    digest = "sha256:" + "ab" * 32
    objects = render(
        {
            "image": {"repository": "r.example/openeas", "digest": digest, "pullPolicy": "Always"},
            "serving": {
                "processorImage": {
                    "repository": "r.example/processor-triton",
                    "digest": digest,
                    "pullPolicy": "IfNotPresent",
                },
                "resourceGroups": {},
                "gpuTolerations": [],
            },
        }
    )
    assert container(objects, "Deployment", GW, "gateway")["image"] == f"r.example/openeas@{digest}"
    env = _env(container(objects, "Deployment", CP, "controlplane"))
    assert env["OPENEAS_K8S_PROCESSOR_IMAGE"]["value"] == f"r.example/processor-triton@{digest}"


@pytest.mark.parametrize("component", ["controlplane", "gateway"])
def test_platform_pods_are_never_single_nor_on_one_node(
    component: str, rendered: dict[str, list[Obj]]
) -> None:
    objects = rendered["defaults"]
    name = f"openeas-{component}"
    deployment = find(objects, "Deployment", name)
    assert deployment["spec"]["replicas"] == 2
    selector = deployment["spec"]["selector"]["matchLabels"]
    budget = find(objects, "PodDisruptionBudget", name)
    assert budget["spec"]["selector"]["matchLabels"] == selector
    assert budget["spec"]["maxUnavailable"] == 1
    pod = deployment["spec"]["template"]["spec"]
    (term,) = pod["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    assert term["podAffinityTerm"]["labelSelector"]["matchLabels"] == selector
    assert term["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"
    spread = pod["topologySpreadConstraints"]
    assert {c["topologyKey"] for c in spread} == {
        "topology.kubernetes.io/zone",
        "kubernetes.io/hostname",
    }
    assert all(c["labelSelector"]["matchLabels"] == selector for c in spread)
    assert all(c["whenUnsatisfiable"] == "ScheduleAnyway" for c in spread)


def test_placement_and_budget_values_override_the_defaults() -> None:
    mine = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [
            {"key": "pool", "operator": "In", "values": ["system"]}
        ]}]
    }}}  # fmt: skip
    objects = render(
        {
            "controlplane": {"affinity": mine, "disruptionBudget": {"enabled": False}},
            "gateway": {"disruptionBudget": {"enabled": True, "maxUnavailable": "50%"}},
        }
    )
    assert find(objects, "Deployment", CP)["spec"]["template"]["spec"]["affinity"] == mine
    assert not [
        o for o in objects if o["kind"] == "PodDisruptionBudget" and o["metadata"]["name"] == CP
    ]
    assert find(objects, "PodDisruptionBudget", GW)["spec"]["maxUnavailable"] == "50%"


def test_a_gateway_pod_serves_through_its_pre_stop_delay_then_drains() -> None:
    objects = render({"gateway": {"prestopSeconds": 7, "config": {"shutdownGraceS": 20}}})
    pod = find(objects, "Deployment", GW)["spec"]["template"]["spec"]
    gateway = container(objects, "Deployment", GW, "gateway")
    assert gateway["lifecycle"]["preStop"]["exec"]["command"] == ["sleep", "7"]
    assert _env(gateway)["OPENEAS_GATEWAY_SHUTDOWN_GRACE_S"]["value"] == "20"
    # The kubelet kills only after the delay and the drain.
    assert pod["terminationGracePeriodSeconds"] > 7 + 20


def test_a_service_monitor_scrapes_the_replicas_metrics_port() -> None:
    objects = render({"serving": {"serviceMonitor": {"enabled": True, "labels": {"p": "main"}}}})
    monitor = find(objects, "ServiceMonitor", "openeas-replicas")
    assert monitor["metadata"]["namespace"] == "openeas-serving"
    assert monitor["metadata"]["labels"]["p"] == "main"
    assert monitor["spec"]["selector"] == {
        "matchLabels": {"app.kubernetes.io/managed-by": "openeas"}
    }
    assert monitor["spec"]["endpoints"] == [{"port": "metrics", "interval": "30s"}]


def test_rrsa_runs_replicas_as_a_service_account_mapped_to_a_ram_role() -> None:
    objects = render({"oss": {"rrsa": {"enabled": True, "roleName": "openeas-model-reader"}}})
    account = find(objects, "ServiceAccount", "openeas-replicas")
    assert account["metadata"]["namespace"] == "openeas-serving"
    assert account["metadata"]["annotations"] == {
        "pod-identity.alibabacloud.com/role-name": "openeas-model-reader"
    }
    assert account["automountServiceAccountToken"] is False  # no Kubernetes API token
    labels = find(objects, "Namespace", "openeas-serving")["metadata"]["labels"]
    assert labels["pod-identity.alibabacloud.com/injection"] == "on"
    env = _env(container(objects, "Deployment", CP, "controlplane"))
    assert env["OPENEAS_K8S_SERVICE_ACCOUNT"]["value"] == "openeas-replicas"
    for obj in objects:
        assert kubernetes_validate.validate(obj, "1.33.0", strict=True)
    with pytest.raises(helm.HelmValuesError, match="roleName"):
        render({"oss": {"rrsa": {"enabled": True}}})
    assert "openeas-replicas" not in {
        o["metadata"]["name"] for o in render() if o["kind"] == "ServiceAccount"
    }
