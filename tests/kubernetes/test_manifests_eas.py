"""EAS's containers/storage/cloud form on Kubernetes, field by field in the Deployment: the
image with its command and port, a tritonserver command with the platform's flags after the
user's, OSS mounts filled by pull init containers into volumes at mount_path, NFS and
/dev/shm volumes, checks as probes, the instance type as a node selector (or the chart's
mapping), rolling_strategy, termination_grace_period and enable_sigterm; every manifest
validated strictly. Then the runtime against the Kubernetes stand-in: the replica's
endpoint is the container's port."""

from __future__ import annotations

import copy
from typing import Any

import kubernetes_validate
import pytest

from controlplane.model.spec import split_token, validate_spec
from controlplane.model.states import ServiceState
from controlplane.reconcile.desired import desired
from controlplane.runtime.base import DesiredReplicaSet
from controlplane.runtime.kubernetes.manifests import desired_objects
from controlplane.runtime.kubernetes.runtime import KubernetesRuntime
from controlplane.runtime.kubernetes.settings import KubernetesSettings
from testing import k8s_server as ks
from testing.k8s_server import ApiStandIn
from tests.kubernetes.conftest import claimed
from tests.kubernetes.test_manifests import VERSIONS

REPO = "oss://triton-model-repo/models/"
IMAGE = "registry/pai-eas/tritonserver:25.03-py3"


def config(**extra: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "metadata": {"name": "triton_mnist", "instance": 2, "cpu": 2, "memory": 4000},
        "cloud": {"computing": {"instance_type": "ecs.gn6i-c4g1.xlarge"}},
        "containers": [
            {"image": IMAGE, "command": "tritonserver --model-repository=/models", "port": 8000}
        ],
        "storage": [{"mount_path": "/models", "oss": {"path": REPO, "readOnly": False}}],
        "labels": {"$SYSTEM_SERVICE_DEPLOY_TYPE": "triton"},
    }
    for key, value in extra.items():
        if key == "metadata":
            base["metadata"].update(value)
        else:
            base[key] = value
    return base


def want(body: dict[str, Any]) -> DesiredReplicaSet:
    spec, _ = split_token(validate_spec(body))
    return desired(ServiceState(spec.name, "uid-58", 1, spec, False, False))


def settings(**overrides: Any) -> KubernetesSettings:
    return KubernetesSettings(kubeconfig="/nonexistent", **overrides)


def deployment(body: dict[str, Any], s: KubernetesSettings | None = None) -> dict[str, Any]:
    objects = desired_objects(want(body), s or settings())
    return objects[0]


def pod(body: dict[str, Any], s: KubernetesSettings | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = deployment(body, s)["spec"]["template"]["spec"]
    return spec


def serving(body: dict[str, Any]) -> dict[str, Any]:
    container: dict[str, Any] = pod(body)["containers"][0]
    return container


def test_the_issue_config_runs_its_image_with_triton_flags_and_an_oss_mount() -> None:
    p = pod(config())
    [init] = p["initContainers"]
    assert init["name"] == "mount-pull-0"
    assert init["image"] == "openeas/processor-triton:0.1.0"  # the pull is the platform's
    assert init["args"] == ["processor", "pull", REPO, "/models"]
    assert init["volumeMounts"] == [{"name": "mount-0", "mountPath": "/models"}]
    [main] = p["containers"]
    assert main["image"] == IMAGE
    assert main["command"] == ["tritonserver"]
    args = main["args"]
    assert args[0] == "--model-repository=/models"  # the user's flags first, as written
    assert "--http-port=8000" in args and "--http-address=0.0.0.0" in args
    assert any(a.startswith("--http-restricted-api=") for a in args)  # admin APIs fenced
    assert "--backend-config=python,shm-region-prefix-name=openeas_$(OPENEAS_POD_NAME)_" in args
    env = {e["name"]: e for e in main["env"]}
    assert env["OPENEAS_ADMIN_KEY"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.uid"}}
    assert {"name": "mount-0", "mountPath": "/models", "readOnly": False} in main["volumeMounts"]
    assert {v["name"]: v for v in p["volumes"]}["mount-0"] == {
        "name": "mount-0",
        "emptyDir": {"sizeLimit": "20Gi"},
    }
    assert main["readinessProbe"]["httpGet"] == {"path": "/v2/health/ready", "port": "http"}
    assert [port["containerPort"] for port in main["ports"]] == [8000, 8001, 8002]
    assert p["nodeSelector"] == {"node.kubernetes.io/instance-type": "ecs.gn6i-c4g1.xlarge"}


def test_the_chart_maps_an_instance_type_to_its_labels() -> None:
    s = settings(instance_types={"ecs.gn6i-c4g1.xlarge": {"gpu-pool": "t4"}})
    assert pod(config(), s)["nodeSelector"] == {"gpu-pool": "t4"}
    instances = {"computing": {"instances": [{"type": "ecs.c7.large"}]}}
    assert pod(config(cloud=instances))["nodeSelector"] == {
        "node.kubernetes.io/instance-type": "ecs.c7.large"
    }


def test_rollout_and_shutdown_fields() -> None:
    body = config(
        metadata={
            "rolling_strategy": {"max_surge": "50%", "max_unavailable": 1},
            "eas.termination_grace_period": 45,
        }
    )
    d = deployment(body)
    assert d["spec"]["strategy"]["rollingUpdate"] == {"maxSurge": "50%", "maxUnavailable": 1}
    assert d["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] == 45
    quiet = pod(config(metadata={"rpc.enable_sigterm": False, "eas.termination_grace_period": 45}))
    stop = quiet["containers"][0]["lifecycle"]["preStop"]["exec"]["command"]
    assert stop == ["sleep", "45"]  # no SIGTERM before the grace period is over


def test_a_rolling_strategy_change_rolls_no_pod() -> None:
    before = want(config())
    after = want(config(metadata={"rolling_strategy": {"max_surge": 3}}))
    assert before.template_hash == after.template_hash


def test_storage_kinds_and_checks_become_volumes_and_probes() -> None:
    body = config(
        storage=[
            {"mount_path": "/models", "oss": {"path": REPO}},
            {
                "mount_path": "/data",
                "nfs": {"server": "10.0.0.5", "path": "/share", "readOnly": True},
            },
            {"mount_path": "/dev/shm", "empty_dir": {"medium": "memory", "size_limit": 2}},
        ],
        containers=[
            {
                "image": "python:3.11",
                "script": "python app.py",
                "port": 9000,
                "env": [{"name": "MODE", "value": "fast"}],
                "readiness_check": {
                    "http_get": {"path": "/health", "port": 9000},
                    "period_seconds": 3,
                    "failure_threshold": 2,
                },
                "liveness_check": {"exec": {"command": "test -e /tmp/alive"}},
            }
        ],
    )
    p = pod(body)
    volumes = {v["name"]: v for v in p["volumes"]}
    assert volumes["mount-1"]["nfs"] == {"server": "10.0.0.5", "path": "/share", "readOnly": True}
    assert volumes["mount-2"]["emptyDir"] == {"medium": "Memory", "sizeLimit": "2Gi"}
    assert "dshm" not in volumes  # the spec sized /dev/shm itself
    main = p["containers"][0]
    assert (main["image"], main["command"], main["args"]) == (
        "python:3.11",
        ["sh"],
        ["-c", "python app.py"],
    )
    assert main["ports"] == [{"name": "http", "containerPort": 9000, "protocol": "TCP"}]
    assert {"name": "MODE", "value": "fast"} in main["env"]
    assert main["readinessProbe"] == {
        "httpGet": {"path": "/health", "port": 9000},
        "periodSeconds": 3,
        "failureThreshold": 2,
    }
    assert main["livenessProbe"] == {"exec": {"command": ["sh", "-c", "test -e /tmp/alive"]}}
    assert main["startupProbe"]["tcpSocket"] == {"port": "http"}
    assert [c["name"] for c in p["initContainers"]] == ["mount-pull-0"]


CASES = {
    "issue": config(),
    "everything": config(
        metadata={
            "gpu": 1,
            "rolling_strategy": {"max_surge": "25%", "max_unavailable": "25%"},
            "eas": {"termination_grace_period": 30},
            "rpc": {"enable_sigterm": False},
        },
        storage=[
            {"mount_path": "/models", "oss": {"path": REPO}},
            {"mount_path": "/data", "nfs": {"server": "nfs.local", "path": "/x"}},
            {"mount_path": "/dev/shm", "empty_dir": {"medium": "memory", "size_limit": 4}},
        ],
        containers=[
            {
                "image": IMAGE,
                "command": "tritonserver --model-repository=/models/triton --strict-readiness=true",
                "port": 8000,
                "env": [{"name": "A", "value": "b"}],
                "startup_check": {"tcp_socket": {"port": 8000}, "failure_threshold": 60},
            }
        ],
    ),
}


@pytest.mark.parametrize("version", VERSIONS[-2:])
@pytest.mark.parametrize("case", CASES)
def test_every_manifest_validates_strictly(case: str, version: str) -> None:
    for manifest in desired_objects(want(copy.deepcopy(CASES[case])), settings()):
        assert kubernetes_validate.validate(manifest, version, strict=True)


def test_a_subfolder_of_the_mount_is_pulled_from_under_the_prefix() -> None:
    body = CASES["everything"]
    d = want(copy.deepcopy(body))
    assert d.params == (f"--model-repository={REPO}triton/", "--strict-readiness=true")


async def test_the_replica_is_reached_on_the_containers_port(
    k8s_settings: KubernetesSettings, k8s: ApiStandIn
) -> None:
    body = config(
        containers=[
            {"image": IMAGE, "command": "tritonserver --model-repository=/models", "port": 9000}
        ]
    )
    d = want(body)
    rt = await claimed(KubernetesRuntime(k8s_settings, lambda _name: None))
    try:
        await rt.apply(d)
        written = k8s.get("deployments", "triton-mnist")
        assert written is not None
        assert written["spec"]["template"]["spec"]["containers"][0]["image"] == IMAGE
        pods = k8s.sync_pods("triton-mnist")
        for name in pods:
            k8s.set_pod_status(name, ks.status_ready(init="mount-pull-0"))
        replicas = (await rt.observe("triton_mnist")).replicas
        assert replicas and all(r.state == "Running" for r in replicas)
        assert all(r.endpoint and r.endpoint.endswith(":9000") for r in replicas)
    finally:
        await rt.close()


def test_containers_after_the_first_run_beside_it() -> None:
    body = config()
    body["containers"].append(
        {
            "image": "registry/log-agent:1",
            "command": "agent --watch /models",
            "port": 9100,
            "env": [{"name": "LEVEL", "value": "debug"}],
            "liveness_check": {"tcp_socket": {"port": 9100}},
        }
    )
    p = pod(body)
    main, side = p["containers"]
    assert main["image"] == IMAGE and main["command"] == ["tritonserver"]
    assert side["name"] == "sidecar-1"
    assert (side["image"], side["command"], side["args"]) == (
        "registry/log-agent:1",
        ["agent"],
        ["--watch", "/models"],
    )
    assert side["ports"] == [{"name": "side-9100", "containerPort": 9100, "protocol": "TCP"}]
    assert side["env"] == [{"name": "LEVEL", "value": "debug"}]
    assert side["livenessProbe"] == {"tcpSocket": {"port": 9100}}
    assert {"name": "mount-0", "mountPath": "/models", "readOnly": False} in side["volumeMounts"]
    for version in VERSIONS[-1:]:
        for manifest in desired_objects(want(body), settings()):
            assert kubernetes_validate.validate(manifest, version, strict=True)


def test_a_mount_pull_goes_through_the_node_cache_when_it_is_on() -> None:
    url = "http://openeas-model-cache.openeas.svc:8090"
    s = settings(model_cache_url=url, model_cache_token="cache-token-for-tests")
    [init] = pod(config(), s)["initContainers"]
    env = {e["name"]: e for e in init["env"]}
    assert env["OPENEAS_MODEL_CACHE_URL"]["value"] == url
    assert "secretKeyRef" in env["OPENEAS_MODEL_CACHE_TOKEN"]["valueFrom"]
