"""The pure desired-objects function, table-style: GPU and CPU-only services, resource
groups (MIG resources, runtime class, image, rollout), instance 0, what changes the hash and
what does not, secrets by reference only, rollouts that fit a full GPU pool, disruption
budgets and spread that select the service's own pods, the bounded model volume; and
every manifest checked with kubernetes-validate (strict: unknown fields are errors) against
each Kubernetes version it ships from 1.29 on."""

from __future__ import annotations

import base64
import json
from typing import Any

import kubernetes_validate
import pytest
from kubernetes_validate.utils import all_versions
from packaging.version import Version

from controlplane.model.spec import ServiceSpec, StoredSpec, split_token
from controlplane.model.states import ServiceState
from controlplane.reconcile.desired import desired
from controlplane.runtime.base import DesiredReplicaSet, PermanentRuntimeError
from controlplane.runtime.kubernetes.manifests import (
    HASH_ANNOTATION,
    MODEL_REPOSITORY,
    READY_FILE,
    WARM_UP_DIR,
    check_resource_group,
    desired_objects,
    model_cache_secret,
)
from controlplane.runtime.kubernetes.settings import KubernetesSettings
from processors.base import READY_FILE_ENV
from tests.kubernetes.conftest import RESOURCE_GROUPS

OLDEST = Version("1.29")
VERSIONS = sorted({v for v in all_versions() if Version(v) >= OLDEST}, key=Version)
TOKEN = "MmY3M2ExYjQtc2VjcmV0LXRva2Vu"
MODELS = "oss://triton-model-repo/models"


def settings(**overrides: Any) -> KubernetesSettings:
    overrides.setdefault("resource_groups", RESOURCE_GROUPS)
    return KubernetesSettings(
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
    deployment, service, *_ = desired_objects(want(body, **kw), s or settings())
    return deployment, service


def pod(deployment: dict[str, Any]) -> dict[str, Any]:
    return deployment["spec"]["template"]["spec"]  # type: ignore[no-any-return]


def container(deployment: dict[str, Any], name: str = "processor") -> dict[str, Any]:
    spec = pod(deployment)
    return next(c for c in spec["containers"] + spec.get("initContainers", []) if c["name"] == name)


MIG_GROUP = {
    "node_selector": {"nvidia.com/mig.config": "all-1g.10gb"},
    "gpu_resource": "nvidia.com/mig-1g.10gb",
    "runtime_class_name": "nvidia",
    "processor_image": "registry.example/processor-triton:0.1.0-tf",
    "rollout": {"max_surge": "25%", "max_unavailable": 0},
}


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
    "mig pool, runtime class, replace": (
        spec(resource="eas-r-mig", instance=3),
        settings(resource_groups={**RESOURCE_GROUPS, "eas-r-mig": MIG_GROUP}),
    ),
    "gpu, 2 instances": (spec(instance=2), settings(runtime_class_name="nvidia")),
    "warm-up from oss, node cache": (
        {**spec(), "warm_up_data_path": "oss://triton-model-repo/warm-up"},
        settings(model_cache_url="http://openeas-model-cache.openeas.svc:8090"),
    ),
    "no budget, spread, prestop or bound": (
        spec(),
        settings(
            disruption_budget=False,
            spread_topology_key="",
            prestop_seconds=0,
            model_volume_size="",
        ),
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
        "requests": {
            "cpu": "4",
            "memory": "10000Mi",
            "nvidia.com/gpu": "1",
            "ephemeral-storage": "20Gi",  # what the model volume may hold
        },
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
    problem = check_resource_group(resource, KubernetesSettings(resource_groups=groups))
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
    manifests = desired_objects(desired(state), settings())
    deployment = manifests[0]
    text = json.dumps(manifests)
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


def test_warm_up_files_are_pulled_beside_the_models_and_gate_the_startup_probe() -> None:
    deployment, _ = objects({**spec(), "warm_up_data_path": "oss://triton-model-repo/warm-up"})
    pull = container(deployment, "warm-up-pull")
    assert pull["args"] == ["processor", "pull", "oss://triton-model-repo/warm-up", WARM_UP_DIR]
    assert pull["volumeMounts"] == container(deployment, "model-pull")["volumeMounts"]
    assert "secretKeyRef" in json.dumps(pull["env"])  # the model pull's credentials
    processor = container(deployment)
    args = processor["args"]
    assert args[args.index("--warm-up-data-path") + 1] == WARM_UP_DIR
    assert {"name": READY_FILE_ENV, "value": READY_FILE} in processor["env"]
    # Readiness is probed only after the startup probe passed: after the warm-up.
    assert processor["startupProbe"]["exec"] == {"command": ["test", "-e", READY_FILE]}
    assert "httpGet" not in processor["startupProbe"]
    assert processor["readinessProbe"]["httpGet"]["path"] == "/v2/health/ready"
    # A local path is used in place (it is in the image): nothing to pull.
    local, _ = objects({**spec(), "warm_up_data_path": "/opt/warm-up"})
    assert [c["name"] for c in pod(local)["initContainers"]] == ["model-pull"]
    assert "/opt/warm-up" in container(local)["args"]
    # Without warm-up the startup probe is Triton's liveness, as before.
    plain, _ = objects()
    assert "httpGet" in container(plain)["startupProbe"]
    assert READY_FILE_ENV not in json.dumps(container(plain))


def test_pulls_ask_the_node_cache_when_there_is_one() -> None:
    url = "http://openeas-model-cache.openeas.svc:8090"
    body = {**spec(), "warm_up_data_path": "oss://triton-model-repo/warm-up"}
    cached = settings(model_cache_url=url, model_cache_token="cache-token-for-tests")
    deployment, _ = objects(body, cached)
    for name in ("model-pull", "warm-up-pull"):
        env = {e["name"]: e for e in container(deployment, name)["env"]}
        assert env["OPENEAS_MODEL_CACHE_URL"]["value"] == url
        # The token comes from the Secret the runtime keeps, never written in the pod spec.
        assert env["OPENEAS_MODEL_CACHE_TOKEN"]["valueFrom"] == {
            "secretKeyRef": {"name": "openeas-model-cache", "key": "token"}
        }
    assert "cache-token-for-tests" not in json.dumps(deployment)
    # The replica's own container (tenant code) gets neither.
    assert "OPENEAS_MODEL_CACHE" not in json.dumps(container(deployment))
    secret = model_cache_secret(cached)
    assert secret is not None and secret["metadata"]["name"] == "openeas-model-cache"
    assert base64.b64decode(secret["data"]["token"]) == b"cache-token-for-tests"
    plain, _ = objects(body)
    assert "OPENEAS_MODEL_CACHE" not in json.dumps(plain)
    assert model_cache_secret(settings(model_cache_url=url)) is None  # no token: no cache


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
    deployment, service, *_ = desired_objects(want(), s)
    assert deployment["metadata"]["namespace"] == service["metadata"]["namespace"] == "serving"
    assert "oss-creds" in json.dumps(deployment)


# -- production on a GPU pool ------------------------------------------------------------------
def kinds(body: dict[str, Any], s: KubernetesSettings) -> dict[str, dict[str, Any]]:
    return {m["kind"]: m for m in desired_objects(want(body), s)}


def selects(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    assert set(selector) == {"matchLabels"}  # what these objects use
    return all(labels.get(k) == v for k, v in selector["matchLabels"].items())


@pytest.mark.parametrize(
    ("body", "groups", "expected"),
    [
        (spec(), {}, {"maxSurge": 1, "maxUnavailable": 0}),  # one GPU instance: surge
        (spec(instance=2), {}, {"maxSurge": 0, "maxUnavailable": 1}),  # full pool-safe
        (spec(instance=4, gpu=2), {}, {"maxSurge": 0, "maxUnavailable": 1}),
        (spec(instance=4, gpu=0), {}, {"maxSurge": 1, "maxUnavailable": 0}),  # CPU: surge
        (
            spec(instance=3, resource="eas-r-mig"),
            {"eas-r-mig": MIG_GROUP},
            {"maxSurge": "25%", "maxUnavailable": 0},  # the group's own
        ),
    ],
)
def test_rollouts_fit_a_full_gpu_pool(
    body: dict[str, Any], groups: dict[str, Any], expected: dict[str, Any]
) -> None:
    s = settings(resource_groups={**RESOURCE_GROUPS, **groups})
    deployment, _ = objects(body, s)
    assert deployment["spec"]["strategy"] == {"type": "RollingUpdate", "rollingUpdate": expected}


def test_a_disruption_budget_guards_the_services_pods_only() -> None:
    objs = kinds(spec(instance=3), settings())
    budget, deployment = objs["PodDisruptionBudget"], objs["Deployment"]
    assert budget["spec"]["maxUnavailable"] == 1 and "minAvailable" not in budget["spec"]
    assert budget["spec"]["unhealthyPodEvictionPolicy"] == "AlwaysAllow"
    assert budget["metadata"]["name"] == deployment["metadata"]["name"]
    assert selects(budget["spec"]["selector"], deployment["spec"]["template"]["metadata"]["labels"])
    state = ServiceState("other_svc", "uid-2", 1, StoredSpec.model_validate(spec()), False, False)
    other = desired_objects(desired(state), settings())[0]
    assert not selects(budget["spec"]["selector"], other["spec"]["template"]["metadata"]["labels"])
    assert "PodDisruptionBudget" not in kinds(spec(), settings(disruption_budget=False))


def test_replicas_spread_over_nodes() -> None:
    deployment, _ = objects(spec(instance=3))
    (spread,) = pod(deployment)["topologySpreadConstraints"]
    assert spread["topologyKey"] == "kubernetes.io/hostname"
    assert spread["whenUnsatisfiable"] == "ScheduleAnyway" and spread["maxSkew"] == 1
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert selects(spread["labelSelector"], labels)
    assert all(key in labels for key in spread["matchLabelKeys"])
    zoned, _ = objects(s=settings(spread_topology_key="topology.kubernetes.io/zone"))
    assert pod(zoned)["topologySpreadConstraints"][0]["topologyKey"].endswith("/zone")
    assert "topologySpreadConstraints" not in pod(objects(s=settings(spread_topology_key=""))[0])


def env_of(deployment: dict[str, Any], name: str = "processor") -> dict[str, str | None]:
    return {e["name"]: e.get("value") for e in container(deployment, name).get("env", [])}


def test_cpu_replicas_and_the_pull_see_no_gpu() -> None:
    cpu, _ = objects(spec(gpu=0, cpu=2, memory=4096))
    assert env_of(cpu)["NVIDIA_VISIBLE_DEVICES"] == "void"
    assert env_of(cpu, "model-pull")["NVIDIA_VISIBLE_DEVICES"] == "void"
    gpu, _ = objects()
    assert "NVIDIA_VISIBLE_DEVICES" not in env_of(gpu)  # the device plugin sets it
    assert env_of(gpu, "model-pull")["NVIDIA_VISIBLE_DEVICES"] == "void"


def test_a_mig_pool_asks_for_its_slices_with_its_runtime_and_image() -> None:
    s = settings(resource_groups={**RESOURCE_GROUPS, "eas-r-mig": MIG_GROUP})
    deployment, _ = objects(spec(resource="eas-r-mig", gpu=2), s)
    limits = container(deployment)["resources"]["limits"]
    assert limits["nvidia.com/mig-1g.10gb"] == "2" and "nvidia.com/gpu" not in limits
    assert pod(deployment)["runtimeClassName"] == "nvidia"
    assert container(deployment)["image"] == MIG_GROUP["processor_image"]
    assert container(deployment, "model-pull")["image"] == MIG_GROUP["processor_image"]
    plain, _ = objects(s=settings(runtime_class_name="nvidia", gpu_resource="example.com/gpu"))
    assert pod(plain)["runtimeClassName"] == "nvidia"
    assert container(plain)["resources"]["requests"]["example.com/gpu"] == "1"
    cpu, _ = objects(spec(gpu=0), settings(runtime_class_name="nvidia"))
    assert "runtimeClassName" not in pod(cpu)  # CPU replicas keep the node's default runtime


def test_the_model_volume_is_bounded_and_requested() -> None:
    deployment, _ = objects()
    (models,) = [v for v in pod(deployment)["volumes"] if v["name"] == "models"]
    assert models["emptyDir"] == {"sizeLimit": "20Gi"}
    assert container(deployment)["resources"]["requests"]["ephemeral-storage"] == "20Gi"
    assert "ephemeral-storage" not in container(deployment)["resources"]["limits"]
    big, _ = objects(s=settings(model_volume_size="200Gi"))
    assert container(big)["resources"]["requests"]["ephemeral-storage"] == "200Gi"
    local, _ = objects(spec(["--model-repository=/opt/models"]))
    assert "ephemeral-storage" not in container(local)["resources"]["requests"]  # no pull


def test_a_terminating_replica_serves_until_gateways_forget_it() -> None:
    deployment, _ = objects()
    hook = container(deployment)["lifecycle"]["preStop"]["exec"]["command"]
    assert hook == ["sleep", "10"]
    assert pod(deployment)["terminationGracePeriodSeconds"] >= 10 + 30  # + Triton's exit
    assert "lifecycle" not in container(objects(s=settings(prestop_seconds=0))[0])
    with pytest.raises(ValueError, match="prestop_seconds"):
        settings(prestop_seconds=45)  # 45 + 30 > the default 60 s grace
