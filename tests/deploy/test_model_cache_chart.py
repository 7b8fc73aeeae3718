"""The chart's node-local model cache (``modelCache``): a DaemonSet in the release namespace
holding the node's disk, reached through a node-local Service by the replicas' pulls (the
control plane tells the runtime where), fenced so only replica pods reach it and it reaches
nothing; the replicas stay Pod Security ``restricted``, and so does the cache itself in its
emptyDir form."""

from __future__ import annotations

import kubernetes_validate

from controlplane.runtime.kubernetes.settings import KubernetesSettings
from tests.deploy.chart import NAMESPACE, Obj, find, render
from tests.deploy.test_network_policy import SERVING, admits, check_restricted, replica_pod

NAME = "openeas-model-cache"
URL = f"http://{NAME}.{NAMESPACE}.svc:8090"


def cache_pod(objects: list[Obj]) -> Obj:
    return find(objects, "DaemonSet", NAME)["spec"]["template"]  # type: ignore[no-any-return]


def control_env(objects: list[Obj]) -> dict[str, str]:
    control = find(objects, "Deployment", "openeas-controlplane")["spec"]["template"]["spec"]
    return {e["name"]: e.get("value") for e in control["containers"][0]["env"]}


def test_off_by_default() -> None:
    objects = render({})
    assert not [o for o in objects if o["metadata"]["name"] == NAME]
    assert "OPENEAS_K8S_MODEL_CACHE_URL" not in control_env(objects)


def test_one_cache_per_node_on_its_disk_bounded_and_cleaned() -> None:
    objects = render({"modelCache": {"enabled": True, "maxBytes": 50 * 2**30, "maxAgeDays": 7}})
    pod = cache_pod(objects)["spec"]
    (server,) = pod["containers"]
    assert server["args"] == [
        "processor", "model-cache", "--dir=/cache", f"--max-bytes={50 * 2**30}",
        "--max-age-days=7", "--port=8090",
    ]  # fmt: skip
    (volume,) = pod["volumes"]
    assert "emptyDir" in volume  # by default: no hostPath, the namespace stays restricted
    check_restricted(pod)
    assert pod["tolerations"] == [{"operator": "Exists"}]  # GPU pools' tainted nodes too
    service = find(objects, "Service", NAME)
    assert service["spec"]["internalTrafficPolicy"] == "Local"  # a pull stays on its node
    assert service["metadata"]["namespace"] == NAMESPACE
    # The control plane hands the address to the runtime, which gives it to the pulls.
    env = control_env(objects)
    assert env["OPENEAS_K8S_MODEL_CACHE_URL"] == URL
    settings = KubernetesSettings(kubeconfig="/nonexistent", model_cache_url=URL)
    assert settings.model_cache_url == URL


def test_a_node_directory_is_used_as_provisioned_never_chowned_by_root() -> None:
    path = "/var/lib/openeas/model-cache"
    objects = render({"modelCache": {"enabled": True, "hostPath": path}})
    pod = cache_pod(objects)["spec"]
    (volume,) = pod["volumes"]
    assert volume["hostPath"] == {"path": path, "type": "Directory"}  # made by the node
    assert "initContainers" not in pod
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["fsGroup"] == 10001
    for c in pod["containers"]:
        assert c["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert "CHOWN" not in str(objects) and "runAsUser: 0" not in str(objects)


def test_only_replica_pods_reach_it_and_it_reaches_nothing() -> None:
    objects = render({"modelCache": {"enabled": True}})
    policy = find(objects, "NetworkPolicy", NAME)
    target = cache_pod(objects)
    replica = replica_pod()["metadata"]["labels"]
    assert admits(policy, SERVING, replica, target, 8090)
    gateway = find(objects, "Deployment", "openeas-gateway")["spec"]["template"]["metadata"]
    assert not admits(policy, NAMESPACE, gateway["labels"], target, 8090)
    assert not admits(policy, "default", replica, target, 8090)  # another namespace
    assert policy["spec"]["egress"] == [] and "Egress" in policy["spec"]["policyTypes"]


def test_without_a_host_path_the_cache_itself_is_restricted() -> None:
    objects = render({"modelCache": {"enabled": True, "hostPath": "", "maxBytes": 4 * 2**30}})
    pod = cache_pod(objects)["spec"]
    assert "initContainers" not in pod
    (volume,) = pod["volumes"]
    assert volume["emptyDir"] == {"sizeLimit": str(5 * 2**30)}  # room for uploads in flight
    check_restricted(pod)
    for obj in objects:
        assert kubernetes_validate.validate(obj, "1.33.0", strict=True)


def test_replicas_using_the_cache_stay_restricted() -> None:
    pod = replica_pod(model_cache_url=URL, model_cache_token="cache-token-for-tests")
    check_restricted(pod["spec"])
    pull = next(c for c in pod["spec"]["initContainers"] if c["name"] == "model-pull")
    assert {"name": "OPENEAS_MODEL_CACHE_URL", "value": URL} in pull["env"]


def test_the_cache_and_the_control_plane_share_a_generated_token() -> None:
    """The token is drawn in the cluster by the secrets hook, read by the cache and by the
    control plane (which keeps it in the serving namespace for pull init containers)."""
    objects = render({"modelCache": {"enabled": True}})
    ref = {"secretKeyRef": {"name": "openeas-generated", "key": "model-cache-token"}}
    (server,) = cache_pod(objects)["spec"]["containers"]
    assert {"name": "OPENEAS_MODEL_CACHE_TOKEN", "valueFrom": ref} in server["env"]
    control = find(objects, "Deployment", "openeas-controlplane")["spec"]["template"]["spec"]
    assert {"name": "OPENEAS_K8S_MODEL_CACHE_TOKEN", "valueFrom": ref} in control["containers"][0][
        "env"
    ]
    (job,) = find(objects, "Job", "openeas-secrets")["spec"]["template"]["spec"]["containers"]
    assert [a for a in job["args"] if a.startswith("model-cache-token=")]
    assert "model-cache-token" not in str(render({}))  # drawn only with the cache on
