"""The chart's environment variables are the settings classes' own: every ``OPENEAS_*`` name
the chart sets is a field of ``Settings``/``KubernetesSettings``/``GatewaySettings`` (they
ignore unknown names, so a typo would pass silently), the rendered values parse into those
classes with the values meant, and the ``config`` maps of values.schema.json offer exactly
the fields the chart does not set itself."""

from __future__ import annotations

import base64
import json
import os
import re
from typing import Any

import pytest
from pydantic import AliasChoices
from pydantic_settings import BaseSettings

from controlplane.runtime.kubernetes.settings import KubernetesSettings
from controlplane.settings import Settings
from gateway.settings import GatewaySettings
from tests.deploy.chart import CHART, VALUE_SETS, Obj, container, find, render

CP, GW = "openeas-controlplane", "openeas-gateway"
NOT_SETTINGS = {"PGPASSWORD"}  # read by libpq, not by us (the bundled database's password)

# Fields the chart sets itself (or that make no sense in a cluster), per `config` map.
CHART_OWNED: dict[str, tuple[type[BaseSettings], set[str]]] = {
    "controlplane": (
        Settings,
        {"data_dir", "database_url", "admin_token", "routes_token", "secret_key", "cluster_id",
         "public_url", "intranet_url", "runtime", "k8s", "redis_url"},
    ),
    # admin_token: the chart gives the gateway none (it reads routes with routes_token).
    "gateway": (
        GatewaySettings,
        # grpc_port: gateway.grpc.enabled (its Service port is gateway.grpc.port).
        {"controlplane_url", "routes_token", "admin_token", "host", "port", "grpc_port",
         "workers", "route_snapshot", "route_snapshot_shared", "redis_url"},
    ),
    "serving": (
        KubernetesSettings,
        {
            "namespace", "release", "in_cluster", "kubeconfig", "context", "processor_image",
            "image_pull_policy", "image_pull_secrets", "resource_groups", "instance_types",
            "gpu_tolerations",
            "oss_secret", "oss_endpoint", "oss_region", "model_cache_url", "model_cache_token",
            "route_snapshot_configmap", "route_snapshot_namespace",  # gateway.sharedRouteSnapshot
            # The processor image's contract, not an operator's choice; one processor exists.
            "entrypoint", "processor_images",
        },
    ),
}  # fmt: skip


def env_names(cls: type[BaseSettings]) -> set[str]:
    """The environment names pydantic-settings reads for ``cls``: prefix + field name, or
    the field's alias choices when it has them."""
    prefix = str(cls.model_config.get("env_prefix", ""))
    names: set[str] = set()
    for name, field in cls.model_fields.items():
        alias = field.validation_alias
        if isinstance(alias, AliasChoices):
            names |= {str(c).upper() for c in alias.choices if str(c).startswith("OPENEAS_")}
        else:
            names.add(f"{prefix}{name}".upper())
    return names


CONTROLPLANE_ENV = (env_names(Settings) - {"OPENEAS_K8S"}) | env_names(KubernetesSettings)
GATEWAY_ENV = env_names(GatewaySettings)


def resolved_env(objects: list[Obj], c: Obj) -> dict[str, str]:
    """A container's environment as the kubelet would give it: secretKeyRefs read from the
    chart's Secrets, or a stand-in value for Secrets the operator provides."""
    secrets = {
        o["metadata"]["name"]: {k: base64.b64decode(v).decode() for k, v in o["data"].items()}
        for o in objects
        if o["kind"] == "Secret"
    }
    env: dict[str, str] = {}
    for item in c.get("env", []):
        if "value" in item:
            env[item["name"]] = item["value"]
        else:
            ref = item["valueFrom"]["secretKeyRef"]
            stand_in = "postgresql://u:p@db/x" if "DATABASE" in item["name"] else "x" * 32
            env[item["name"]] = secrets.get(ref["name"], {}).get(ref["key"], stand_in)
    return env


@pytest.mark.parametrize("case", VALUE_SETS)
def test_every_openeas_name_the_chart_sets_is_a_settings_field(case: str) -> None:
    objects = render(VALUE_SETS[case])
    checks = [
        (container(objects, "Deployment", CP, "controlplane"), CONTROLPLANE_ENV),
        (container(objects, "Deployment", GW, "gateway"), GATEWAY_ENV),
        (container(objects, "Job", "openeas-migrate", "migrate"), CONTROLPLANE_ENV),
    ]
    for c, known in checks:
        names = {e["name"] for e in c["env"]}
        assert names - known - NOT_SETTINGS == set(), c["name"]


@pytest.mark.parametrize("case", VALUE_SETS)
def test_the_rendered_environment_parses_into_the_settings(
    case: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    values = VALUE_SETS[case]
    objects = render(values)
    use_env(
        monkeypatch, resolved_env(objects, container(objects, "Deployment", CP, "controlplane"))
    )
    settings = Settings()
    assert settings.runtime == "kubernetes"
    assert settings.cluster_id == values.get("clusterId", "default")
    assert settings.admin_token and settings.database_url
    k8s = settings.k8s
    assert k8s.in_cluster is True
    serving = values.get("serving", {})
    assert k8s.namespace == serving.get("namespace", "openeas-serving")
    assert k8s.processor_image == (
        "registry.example.com/openeas/processor-triton:0.1.0-cuda12"
        if case == "gpu resource groups"
        else "openeas/processor-triton:0.1.0"
    )
    groups = serving.get("resourceGroups", {})
    assert set(k8s.resource_groups) == set(groups)
    for group_id, group in groups.items():
        parsed = k8s.resource_groups[group_id]
        assert parsed.node_selector == group.get("nodeSelector", {})
        assert [t.manifest() for t in parsed.tolerations] == group.get("tolerations", [])
    assert [t.manifest() for t in k8s.gpu_tolerations] == [
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
    ]
    assert k8s.oss_endpoint == values.get("oss", {}).get("endpoint", "")

    use_env(monkeypatch, resolved_env(objects, container(objects, "Deployment", GW, "gateway")))
    gateway = GatewaySettings()
    assert gateway.controlplane_url == "http://openeas-controlplane:80"
    assert (gateway.host, gateway.port) == ("0.0.0.0", 8080)
    assert gateway.routes_token.get_secret_value() == settings.routes_token
    assert settings.routes_token  # from the chart's Secret, or the key of yours
    assert settings.secret_key  # every control-plane replica seals with the same key
    assert gateway.admin_token.get_secret_value() == ""  # least privilege


def test_the_bundled_database_url_leaves_the_password_to_libpq() -> None:
    objects = render({})
    env = resolved_env(objects, container(objects, "Deployment", CP, "controlplane"))
    assert env["OPENEAS_DATABASE_URL"] == (
        "postgresql+psycopg://openeas@openeas-postgresql:5432/openeas"
    )
    pod = find(objects, "Deployment", CP)["spec"]["template"]["spec"]
    [password] = [e for e in pod["containers"][0]["env"] if e["name"] == "PGPASSWORD"]
    # generated once by the install hook, not rendered
    assert password["valueFrom"]["secretKeyRef"] == {
        "name": "openeas-generated",
        "key": "postgresql-password",
    }


# -- config maps -------------------------------------------------------------------------------


def _schema_config_keys(component: str) -> set[str]:
    schema = json.loads((CHART / "values.schema.json").read_text())
    return set(schema["properties"][component]["properties"]["config"]["properties"])


def _snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


@pytest.mark.parametrize("component", CHART_OWNED)
def test_config_maps_offer_exactly_the_settings_the_chart_leaves_open(component: str) -> None:
    cls, owned = CHART_OWNED[component]
    assert owned <= set(cls.model_fields), "a chart-owned name is no longer a settings field"
    offered = {_snake(k) for k in _schema_config_keys(component)}
    assert offered == set(cls.model_fields) - owned


SAMPLE: dict[str, Any] = {
    "controlplane": {
        "defaultTimeoutMs": 120000,
        "resyncSeconds": 12.5,
        "leaseSeconds": 20,
        "auditRetentionDays": 30.0,
    },
    "gateway": {
        "maxBodyBytes": 1048576,
        "signatureSkewS": 300.0,
        "defaultTimeoutMs": 30000,
        "connectTimeoutMs": 500,
        "bufferBodyBytes": 0,
        "spliceMinBytes": 131072,
        "keepaliveS": 30.5,
        "retryAfterS": 2,
        "replicaDownS": 0.5,
        "pollWaitS": 10,
        "pollBackoffMaxS": 2,
        "reportIntervalS": 0.25,
        "wakeQueue": 64,
        "headTimeoutS": 30,
        "bodyTimeoutS": 45,
        "shutdownGraceS": 120,
        "healthPath": "/healthz",
        "metricsPath": "/gateway/metrics",
        "domain": "eas.example.com",
        "httpYieldAt": 8,
        "grpcYieldAt": 16,
        "queuePrefix": "eas:",
        "queueClaimIdleS": 45.5,
    },
    "serving": {
        "requestTimeoutSeconds": 10,
        "startupTimeoutSeconds": 600,
        "terminationGraceSeconds": 40,
        "runAsUser": None,
        "serviceAccount": "replicas",
        "modelVolumeSize": "50Gi",
        "shmSize": "",
        "prestopSeconds": 5,
        "gpuResource": "nvidia.com/mig-1g.10gb",
        "runtimeClassName": "nvidia",
        "spreadTopologyKey": "topology.kubernetes.io/zone",
        "disruptionBudget": False,
        "gpuRollout": {"maxSurge": "25%", "maxUnavailable": 0},
        "events": False,
        "fieldManager": "openeas-test",
        "resyncSeconds": 60,
        "watchTimeoutSeconds": 120,
        "progressSeconds": 2.5,
    },
}


def test_every_config_key_reaches_its_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    assert {k: set(v) for k, v in SAMPLE.items()} == {
        c: _schema_config_keys(c) for c in CHART_OWNED
    }
    objects = render({c: {"config": SAMPLE[c]} for c in SAMPLE})
    for deployment, name, expected in (
        (CP, "controlplane", SAMPLE["controlplane"]),
        (GW, "gateway", SAMPLE["gateway"]),
    ):
        use_env(
            monkeypatch, resolved_env(objects, container(objects, "Deployment", deployment, name))
        )
        settings: BaseSettings = Settings() if name == "controlplane" else GatewaySettings()
        for key, value in expected.items():
            assert getattr(settings, _snake(key)) == value, key
        if name == "controlplane":
            assert isinstance(settings, Settings)
            for key, value in SAMPLE["serving"].items():
                got = getattr(settings.k8s, _snake(key))
                assert (got.model_dump(by_alias=True) if key == "gpuRollout" else got) == value

    gw = container(objects, "Deployment", GW, "gateway")
    assert gw["readinessProbe"]["httpGet"]["path"] == "/healthz"  # probes follow healthPath


def use_env(monkeypatch: pytest.MonkeyPatch, env: dict[str, str]) -> None:
    """Exactly ``env`` as the process's OPENEAS_* environment."""
    for name in list(os.environ):
        if name.startswith("OPENEAS_") or name in NOT_SETTINGS:
            monkeypatch.delenv(name)
    for name, value in env.items():
        monkeypatch.setenv(name, value)


def test_the_gateway_holds_a_route_reader_token_and_no_admin_token() -> None:
    objects = render({})
    gateway = resolved_env(objects, container(objects, "Deployment", GW, "gateway"))
    controlplane = resolved_env(objects, container(objects, "Deployment", CP, "controlplane"))
    assert "OPENEAS_ADMIN_TOKEN" not in gateway
    assert gateway["OPENEAS_ROUTES_TOKEN"] == controlplane["OPENEAS_ROUTES_TOKEN"]
    refs = {
        (c, e["name"]): e["valueFrom"]["secretKeyRef"]
        for c, name in ((GW, "gateway"), (CP, "controlplane"))
        for e in container(objects, "Deployment", c, name)["env"]
        if e["name"] in ("OPENEAS_ROUTES_TOKEN", "OPENEAS_ADMIN_TOKEN")
    }
    # generated once by the install hook (not rendered), a key of its own
    generated = {"name": "openeas-generated", "key": "routes-token"}
    assert refs[(GW, "OPENEAS_ROUTES_TOKEN")] == refs[(CP, "OPENEAS_ROUTES_TOKEN")] == generated
    assert refs[(CP, "OPENEAS_ADMIN_TOKEN")] == {"name": "openeas-generated", "key": "admin-token"}


def test_the_gateway_pod_outwaits_its_shutdown_grace() -> None:
    # The pre-stop delay (5 s), the drain (shutdownGraceS, 30 s by default), 5 s of margin.
    for grace, expected in ((None, 40), (600, 610)):
        config = {} if grace is None else {"gateway": {"config": {"shutdownGraceS": grace}}}
        objects = render(config)
        pod = next(o for o in objects if o["kind"] == "Deployment" and o["metadata"]["name"] == GW)[
            "spec"
        ]["template"]["spec"]
        assert pod["terminationGracePeriodSeconds"] == expected
