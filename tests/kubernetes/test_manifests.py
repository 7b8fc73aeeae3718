"""The pure desired-objects function, table-style: GPU and CPU-only services, resource
groups, instance 0, what changes the hash and what does not, secrets by reference only; and
every manifest checked with kubernetes-validate (strict: unknown fields are errors) against
each Kubernetes version it ships from 1.29 on."""

from __future__ import annotations

import json
from typing import Any

import kubernetes_validate
import pytest
from kubernetes_validate.utils import all_versions
from packaging.version import Version

from controlplane.desired import ServiceState, desired
from controlplane.runtime.base import DesiredReplicaSet, PermanentRuntimeError
from controlplane.runtime.kubernetes.manifests import (
    HASH_ANNOTATION,
    MODEL_REPOSITORY,
    check_resource_group,
    desired_objects,
)
from controlplane.runtime.kubernetes.settings import KubernetesSettings
from controlplane.spec import ServiceSpec, StoredSpec, split_token
from tests.kubernetes.conftest import RESOURCE_GROUPS

OLDEST = Version("1.29")
VERSIONS = sorted({v for v in all_versions() if Version(v) >= OLDEST}, key=Version)
TOKEN = "MmY3M2ExYjQtc2VjcmV0LXRva2Vu"
MODELS = "oss://triton-model-repo/models"


def settings(**overrides: Any) -> KubernetesSettings:
    return KubernetesSettings(
        resource_groups=RESOURCE_GROUPS,  # type: ignore[arg-type]
        kubeconfig="/nonexistent",  # never read here: this module does no I/O
        **overrides,
    )


def spec(params: list[str] | None = None, **metadata: Any) -> dict[str, Any]:
    return {
        "name": "triton_test",
        "processor": "triton",
        "processor_params": params or [f"--model-repository={MODELS}", "--allow-http=true"],
        "metadata": {"instance": 1, "cpu": 4, "gpu": 1, "memory": 10000, **metadata},
    }


def want(
    body: dict[str, Any] | None = None, *, generation: int = 1, stopped: bool = False
) -> DesiredReplicaSet:
    return desired(
        ServiceState(
            "triton_test",
            "uid-1",
            generation,
            StoredSpec.model_validate(body or spec()),
            stopped,
            False,
        )
    )


def objects(
    body: dict[str, Any] | None = None, s: KubernetesSettings | None = None, **kw: Any
) -> tuple[dict[str, Any], dict[str, Any]]:
    deployment, service = desired_objects(want(body, **kw), s or settings())
    return deployment, service


def pod(deployment: dict[str, Any]) -> dict[str, Any]:
    return deployment["spec"]["template"]["spec"]  # type: ignore[no-any-return]


def container(deployment: dict[str, Any], name: str = "processor") -> dict[str, Any]:
    spec = pod(deployment)
    return next(c for c in spec["containers"] + spec.get("initContainers", []) if c["name"] == name)


# -- the table of cases every manifest is also schema-checked for ------------------------------
CASES: dict[str, tuple[dict[str, Any], KubernetesSettings]] = {
    "gpu": (spec(), settings()),
    "cpu-only": (spec(gpu=0, cpu=2, memory=4096), settings()),
    "resource group": (spec(resource="eas-r-a10"), settings()),
    "instance 0": (spec(instance=0), settings()),
    "local model": (spec(["--model-repository=/opt/models"], gpu=0), settings()),
    "oss endpoint": (
        {**spec(), "oss_endpoint": "oss-cn-hangzhou-internal.aliyuncs.com"},
        settings(oss_region="cn-hangzhou", model_volume_size="50Gi"),
    ),
    "no secret, root image": (spec(), settings(oss_secret="", run_as_user=None, shm_size="")),
    "pull secrets, account": (
        spec(),
        settings(image_pull_secrets=["regcred"], service_account="replicas"),
    ),
}


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("case", CASES)
def test_every_manifest_validates_strictly(case: str, version: str) -> None:
    body, s = CASES[case]
    for manifest in desired_objects(want(body), s):
        assert kubernetes_validate.validate(manifest, version, strict=True)


def test_validated_versions_cover_1_29_to_1_33() -> None:
    majors = {str(Version(v).release[:2]) for v in VERSIONS}
    assert {"(1, 29)", "(1, 30)", "(1, 31)", "(1, 32)", "(1, 33)"} <= majors


# -- what the objects say ------------------------------------------------------------------------
def test_a_gpu_service() -> None:
    deployment, service = objects()
    assert deployment["spec"]["replicas"] == 1
    assert deployment["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0
    processor = container(deployment)
    assert processor["resources"] == {
        "requests": {"cpu": "4", "memory": "10000Mi", "nvidia.com/gpu": "1"},
        "limits": {"cpu": "4", "memory": "10000Mi", "nvidia.com/gpu": "1"},
    }
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod(
        deployment
    )["tolerations"]
    # the replica serves the pulled copy, with the platform's ports
    assert processor["command"] == ["openeas"]
    assert processor["args"][:3] == ["processor", "run", "triton"]
    assert processor["args"][-2:] == [f"--model-repository={MODEL_REPOSITORY}", "--allow-http=true"]
    assert "--http-port" in processor["args"] and "0.0.0.0" in processor["args"]
    pull = container(deployment, "model-pull")
    assert pull["args"] == ["processor", "pull", MODELS, MODEL_REPOSITORY]
    assert "nvidia.com/gpu" not in pull["resources"]["limits"]  # the pull needs no GPU
    assert processor["readinessProbe"]["httpGet"]["path"] == "/v2/health/ready"
    assert processor["livenessProbe"]["httpGet"]["path"] == "/v2/health/live"
    startup = processor["startupProbe"]
    assert startup["periodSeconds"] * startup["failureThreshold"] >= 1800
    assert pod(deployment)["securityContext"]["runAsNonRoot"] is True
    assert processor["securityContext"]["allowPrivilegeEscalation"] is False
    assert pod(deployment)["terminationGracePeriodSeconds"] == 60
    assert [p["port"] for p in service["spec"]["ports"]] == [8000, 8001, 8002]
    assert service["spec"]["selector"] == deployment["spec"]["selector"]["matchLabels"]


def test_a_cpu_only_service_asks_for_no_gpu() -> None:
    deployment, _ = objects(spec(gpu=0, cpu=2, memory=4096))
    assert "nvidia.com/gpu" not in json.dumps(deployment)
    assert container(deployment)["resources"]["limits"] == {"cpu": "2", "memory": "4096Mi"}
    assert "tolerations" not in pod(deployment)


def test_a_resource_group_places_the_pods() -> None:
    deployment, _ = objects(spec(resource="eas-r-a10"))
    assert pod(deployment)["nodeSelector"] == {"openeas.io/pool": "a10"}
    assert pod(deployment)["tolerations"][0] == {
        "key": "openeas.io/pool",
        "operator": "Equal",
        "value": "a10",
        "effect": "NoSchedule",
    }
    cpu_group, _ = objects(spec(resource="eas-r-cpu", gpu=0))
    assert pod(cpu_group)["nodeSelector"] == {"openeas.io/pool": "cpu"}
    assert "tolerations" not in pod(cpu_group)


@pytest.mark.parametrize(
    ("resource", "groups", "expected"),
    [
        (None, RESOURCE_GROUPS, None),
        ("eas-r-a10", RESOURCE_GROUPS, None),
        ("eas-r-x", RESOURCE_GROUPS, "known resource groups: eas-r-a10, eas-r-cpu"),
        ("eas-r-x", {}, "known resource groups: none are configured"),
    ],
)
def test_check_resource_group(
    resource: str | None, groups: dict[str, Any], expected: str | None
) -> None:
    problem = check_resource_group(resource, KubernetesSettings(resource_groups=groups))  # type: ignore[arg-type]
    if expected is None:
        assert problem is None
    else:
        assert problem is not None and expected in problem and repr(resource) in problem


def test_an_unknown_resource_group_is_permanent() -> None:
    with pytest.raises(PermanentRuntimeError) as caught:
        objects(spec(resource="<your resource id>"))
    assert caught.value.reason == "UnknownResourceGroup"


def test_instance_0_and_stopped_keep_the_template() -> None:
    running, _ = objects()
    zero, _ = objects(spec(instance=0))
    stopped, _ = objects(stopped=True)
    assert zero["spec"]["replicas"] == stopped["spec"]["replicas"] == 0
    assert zero["spec"]["template"] == running["spec"]["template"] == stopped["spec"]["template"]
    assert zero["metadata"]["annotations"] != running["metadata"]["annotations"]


def test_the_hash_follows_what_changes() -> None:
    first, first_service = objects()
    again, again_service = objects()
    assert first == again and first_service == again_service  # deterministic
    changed, changed_service = objects(spec([f"--model-repository={MODELS}", "--log-verbose=1"]))
    assert (
        changed["metadata"]["annotations"][HASH_ANNOTATION]
        != (first["metadata"]["annotations"][HASH_ANNOTATION])
    )
    assert changed["spec"]["template"] != first["spec"]["template"]  # a rollout
    assert changed_service == first_service  # the Service does not depend on params
    newer, newer_service = objects(generation=2)
    assert newer["spec"]["template"] == first["spec"]["template"]  # no rollout for a label
    assert newer_service["metadata"]["labels"]["openeas.io/generation"] == "2"
    image, _ = objects(s=settings(processor_images={"triton": "registry.example/triton:24.05"}))
    assert container(image)["image"] == "registry.example/triton:24.05"
    assert image["metadata"]["annotations"] != first["metadata"]["annotations"]


def test_labels_name_the_service_uid_and_generation() -> None:
    deployment, service = objects(generation=7)
    for obj in (deployment, service):
        labels = obj["metadata"]["labels"]
        assert labels["openeas.io/service"] == "triton_test"
        assert labels["openeas.io/service-uid"] == "uid-1"
        assert labels["openeas.io/generation"] == "7"
        assert obj["metadata"]["name"] == "triton-test"
    template = deployment["spec"]["template"]["metadata"]["labels"]
    assert template["openeas.io/template-hash"] == want().template_hash
    assert "openeas.io/generation" not in template  # scaling must not roll pods


def test_credentials_only_by_reference_and_no_token_anywhere(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OSS_ACCESS_KEY_ID", "LTAI-must-not-leak")
    monkeypatch.setenv("OSS_ACCESS_KEY_SECRET", "secret-must-not-leak")
    stored, token = split_token(ServiceSpec.model_validate({**spec(), "token": TOKEN}))
    assert token == TOKEN  # the token leaves the spec before anything is planned from it
    state = ServiceState("triton_test", "uid-1", 1, stored, False, False)
    deployment, service = desired_objects(desired(state), settings())
    text = json.dumps([deployment, service])
    assert TOKEN not in text and "must-not-leak" not in text
    env = {e["name"]: e for e in container(deployment, "model-pull")["env"]}
    for key in ("OSS_ACCESS_KEY_ID", "OSS_ACCESS_KEY_SECRET", "OSS_SESSION_TOKEN"):
        assert "value" not in env[key]
        assert env[key]["valueFrom"]["secretKeyRef"] == {
            "name": "openeas-oss",
            "key": key,
            "optional": key == "OSS_SESSION_TOKEN",
        }
    # the serving container never sees the credentials
    assert "OSS_ACCESS_KEY" not in json.dumps(container(deployment))


def test_a_local_model_needs_no_pull() -> None:
    deployment, _ = objects(spec(["--model-repository=/opt/models"], gpu=0))
    assert "initContainers" not in pod(deployment)
    assert "--model-repository=/opt/models" in container(deployment)["args"]
    assert "secretKeyRef" not in json.dumps(deployment)


def test_the_oss_endpoint_reaches_the_pull() -> None:
    deployment, _ = objects({**spec(), "oss_endpoint": "oss-cn-beijing.aliyuncs.com"})
    env = {e["name"]: e.get("value") for e in container(deployment, "model-pull")["env"]}
    assert env["OSS_ENDPOINT"] == "oss-cn-beijing.aliyuncs.com"
    default, _ = objects(s=settings(oss_endpoint="oss-cn-hangzhou.aliyuncs.com"))
    env = {e["name"]: e.get("value") for e in container(default, "model-pull")["env"]}
    assert env["OSS_ENDPOINT"] == "oss-cn-hangzhou.aliyuncs.com"


def test_params_the_processor_rejects_are_permanent() -> None:
    with pytest.raises(PermanentRuntimeError) as caught:
        objects(spec(["--model-repository=oss://x/models"]))
    assert caught.value.reason == "InvalidProcessorParams"
    assert "bucket" in caught.value.message


def test_settings_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENEAS_K8S_NAMESPACE", "serving")
    monkeypatch.setenv("OPENEAS_K8S_RESOURCE_GROUPS", json.dumps(RESOURCE_GROUPS))
    monkeypatch.setenv("OPENEAS_K8S_PROCESSOR_IMAGES", '{"triton": "r.example/t:1"}')
    monkeypatch.setenv("OPENEAS_K8S_OSS_SECRET", "oss-creds")
    s = KubernetesSettings()
    assert s.namespace == "serving"
    assert s.resource_groups["eas-r-a10"].tolerations[0].value == "a10"
    assert s.image_for("triton") == "r.example/t:1"
    assert s.image_for("other") == s.processor_image
    deployment, service = desired_objects(want(), s)
    assert deployment["metadata"]["namespace"] == service["metadata"]["namespace"] == "serving"
    assert "oss-creds" in json.dumps(deployment)
