"""The API stand-in is strict where the runtime relies on the real server: checked here with
the official client's own calls (and raw HTTP where the client would hide the answer)."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import pytest
import urllib3
from kubernetes import client as kube
from kubernetes import config as k8s_config
from kubernetes.client.exceptions import ApiException

from testing.k8s_server import ApiStandIn, parse_selector, status_ready

NS = "openeas-serving"
APPLY = "application/apply-patch+yaml"  # server-side apply


def client_for(k8s: ApiStandIn, kubeconfig: Path) -> kube.ApiClient:
    """A client configured as the runtime's is: from a kubeconfig (here the stand-in's)."""
    # kubernetes.config carries no annotations (the client's APIs and models do).
    api: kube.ApiClient = k8s_config.new_client_from_config(  # type: ignore[no-untyped-call]
        config_file=str(k8s.write_kubeconfig(kubeconfig))
    )
    return api


@pytest.fixture
def core(k8s: ApiStandIn, tmp_path: Path) -> Iterator[kube.CoreV1Api]:
    with client_for(k8s, tmp_path / "kc") as api:
        yield kube.CoreV1Api(api)


# Creates and replaces take the client's models: the client would validate a dict into one
# (pydantic's validate_call); the tests do it themselves with ``model_validate``.
def service(name: str = "svc", **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "labels": {"app": name}},
        "spec": {"selector": {"app": name}, "ports": [{"name": "http", "port": 80}], **spec},
    }


def unread(response: object) -> urllib3.BaseHTTPResponse:
    """What a call with ``_preload_content=False`` returns."""
    # The client's docstrings say so; its annotations name the model it would have decoded.
    return cast(urllib3.BaseHTTPResponse, response)


def raw(call: Any, *args: Any, **kwargs: Any) -> dict[str, Any]:
    body: dict[str, Any] = json.loads(unread(call(*args, _preload_content=False, **kwargs)).data)
    return body


def status_of(error: pytest.ExceptionInfo[ApiException]) -> dict[str, Any]:
    assert error.value.body is not None  # the API answers every refusal with a Status
    status: dict[str, Any] = json.loads(error.value.body)
    return status


def test_requests_need_the_token(k8s: ApiStandIn) -> None:
    with pytest.raises(urllib.error.HTTPError) as caught:
        urllib.request.urlopen(f"{k8s.url}/api/v1/namespaces/{NS}/services")
    assert caught.value.code == 401
    assert json.loads(caught.value.read())["reason"] == "Unauthorized"


def test_create_conflicts_and_resource_versions(core: kube.CoreV1Api) -> None:
    created = raw(core.create_namespaced_service, NS, service())
    with pytest.raises(ApiException) as caught:
        core.create_namespaced_service(NS, kube.V1Service.model_validate(service()))
    assert caught.value.status == 409 and status_of(caught)["reason"] == "AlreadyExists"

    stale = dict(service(), metadata={**service()["metadata"], "resourceVersion": "1"})
    with pytest.raises(ApiException) as caught:
        core.replace_namespaced_service("svc", NS, kube.V1Service.model_validate(stale))
    assert caught.value.status == 409 and status_of(caught)["reason"] == "Conflict"

    version = created["metadata"]["resourceVersion"]
    same = raw(core.patch_namespaced_service, "svc", NS, {"metadata": {"labels": {"app": "svc"}}})
    assert same["metadata"]["resourceVersion"] == version  # a no-op write changes nothing
    changed = raw(core.patch_namespaced_service, "svc", NS, {"metadata": {"labels": {"x": "1"}}})
    assert int(changed["metadata"]["resourceVersion"]) > int(version)


def test_invalid_objects_are_422(core: kube.CoreV1Api) -> None:
    for bad, says in [
        (service(spec_typo=True), "spec_typo"),  # unknown field: strict schema
        (service(name="Not_A_Name"), "metadata.name"),
        ({**service(), "metadata": {"name": "svc", "labels": {"a": "b_"}}}, "valid label"),
    ]:
        with pytest.raises(ApiException) as caught:  # (apply: the client checks creates)
            core.patch_namespaced_service(
                bad["metadata"]["name"],
                NS,
                bad,
                field_manager="me",
                _content_type=APPLY,
            )
        assert caught.value.status == 422, bad
        assert says in status_of(caught)["message"]


def test_patch_kinds(k8s: ApiStandIn, core: kube.CoreV1Api) -> None:
    core.create_namespaced_service(NS, kube.V1Service.model_validate(service()))
    ports = {"spec": {"ports": [{"name": "grpc", "port": 81}]}}
    merged = raw(core.patch_namespaced_service, "svc", NS, ports)  # strategic by default
    assert [p["port"] for p in merged["spec"]["ports"]] == [80, 81]  # merged by port
    replaced = raw(
        core.patch_namespaced_service,
        "svc",
        NS,
        ports,
        _content_type="application/merge-patch+json",
    )
    assert [p["port"] for p in replaced["spec"]["ports"]] == [81]  # lists replaced
    with pytest.raises(ApiException) as caught:
        core.patch_namespaced_service(
            "svc", NS, [{"op": "add", "path": "/x", "value": 1}]
        )  # JSON patch
    assert caught.value.status == 415


def test_server_side_apply(core: kube.CoreV1Api) -> None:
    with pytest.raises(ApiException) as caught:
        core.patch_namespaced_service("svc", NS, service(), _content_type=APPLY)
    assert caught.value.status == 422 and "fieldManager" in status_of(caught)["message"]

    labelled = service()
    labelled["metadata"]["labels"]["tier"] = "gpu"
    raw(core.patch_namespaced_service, "svc", NS, labelled, field_manager="me", _content_type=APPLY)
    raw(core.patch_namespaced_service, "svc", NS, {"metadata": {"labels": {"app": "other"}}},
        field_manager="kubectl")  # fmt: skip
    with pytest.raises(ApiException) as caught:  # someone else owns app now
        core.patch_namespaced_service("svc", NS, service(), field_manager="me", _content_type=APPLY)
    assert caught.value.status == 409 and "kubectl" in status_of(caught)["message"]
    forced = raw(
        core.patch_namespaced_service,
        "svc",
        NS,
        service(),
        field_manager="me",
        force=True,
        _content_type=APPLY,
    )
    assert forced["metadata"]["labels"] == {"app": "svc"}  # tier is no longer applied: gone


def test_label_selectors(k8s: ApiStandIn) -> None:
    def labels(**values: str) -> dict[str, Any]:
        return {"metadata": {"labels": values}}

    assert parse_selector("a=1,b in (x, y),!c")(labels(a="1", b="y"))
    assert not parse_selector("a=1,b in (x, y),!c")(labels(a="1", b="y", c=""))
    assert parse_selector("a!=1,b notin (x),d")(labels(a="2", b="z", d=""))
    assert parse_selector("")(labels())
    with pytest.raises(Exception, match="unable to parse"):
        parse_selector("a=1,=b")


def test_watch_replays_and_expires(k8s: ApiStandIn, core: kube.CoreV1Api) -> None:
    listed = raw(core.list_namespaced_service, NS)
    start = listed["metadata"]["resourceVersion"]
    core.create_namespaced_service(NS, kube.V1Service.model_validate(service("one")))
    core.create_namespaced_service(NS, kube.V1Service.model_validate(service("two")))
    response = unread(
        core.list_namespaced_service(
            NS,
            watch=True,
            resource_version=start,
            timeout_seconds=1,
            label_selector="app=two",
            _preload_content=False,
        )
    )
    events = [json.loads(line) for line in response if line.strip()]
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [("ADDED", "two")]

    k8s.expire_watches()
    response = unread(
        core.list_namespaced_service(
            NS, watch=True, resource_version=start, timeout_seconds=1, _preload_content=False
        )
    )
    [error] = [json.loads(line) for line in response if line.strip()]
    assert error["type"] == "ERROR"
    assert (error["object"]["code"], error["object"]["reason"]) == (410, "Expired")


def test_empty_value_sets_are_refused(core: kube.CoreV1Api) -> None:
    for selector in ("app in ()", "app notin ( )"):
        with pytest.raises(ApiException) as caught:
            core.list_namespaced_service(NS, label_selector=selector)
        assert caught.value.status == 400 and "can't be empty" in status_of(caught)["message"]


def test_watch_sends_deleted_and_added_when_a_selector_stops_and_starts_matching(
    core: kube.CoreV1Api,
) -> None:
    start = raw(core.list_namespaced_service, NS)["metadata"]["resourceVersion"]
    core.create_namespaced_service(NS, kube.V1Service.model_validate(service("one")))
    relabel = {"metadata": {"labels": {"app": "other"}}}
    core.patch_namespaced_service("one", NS, relabel)  # leaves the selection
    core.patch_namespaced_service("one", NS, {"metadata": {"labels": {"x": "1"}}})  # unseen
    core.patch_namespaced_service("one", NS, {"metadata": {"labels": {"app": "one"}}})  # back
    response = unread(
        core.list_namespaced_service(
            NS,
            watch=True,
            resource_version=start,
            timeout_seconds=1,
            label_selector="app=one",
            _preload_content=False,
        )
    )
    events = [json.loads(line) for line in response if line.strip()]
    assert [(e["type"], e["object"]["metadata"]["labels"]["app"]) for e in events] == [
        ("ADDED", "one"),
        ("DELETED", "other"),  # the object as it is now, no longer matching
        ("ADDED", "one"),
    ]


def deployment(name: str = "web", replicas: int = 2, **spec: Any) -> dict[str, Any]:
    labels = {"app": name}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchExpressions": [{"key": "app", "operator": "In", "values": [name]}]},
            "template": {
                "metadata": {"labels": labels},
                "spec": {"containers": [{"name": "c", "image": "busybox"}]},
            },
            **spec,
        },
    }


@pytest.fixture
def apps(k8s: ApiStandIn, tmp_path: Path) -> Iterator[kube.AppsV1Api]:
    with client_for(k8s, tmp_path / "ka") as api:
        yield kube.AppsV1Api(api)


def test_selectors_by_expression_and_their_validation(apps: kube.AppsV1Api) -> None:
    created = raw(apps.create_namespaced_deployment, NS, deployment())  # expressions only
    assert created["spec"]["selector"]["matchExpressions"][0]["operator"] == "In"
    for selector, says in [
        ({}, "empty selector is invalid"),
        ({"matchExpressions": [{"key": "app", "operator": "In", "values": []}]}, "Required"),
        ({"matchExpressions": [{"key": "app", "operator": "Exists", "values": ["x"]}]}, "Forb"),
        ({"matchExpressions": [{"key": "app", "operator": "NotIn", "values": ["c"]}]}, None),
        ({"matchExpressions": [{"key": "app", "operator": "DoesNotExist"}]}, "does not match"),
    ]:
        body = deployment("b")
        body["spec"]["selector"] = selector
        if says is None:
            apps.create_namespaced_deployment(NS, kube.V1Deployment.model_validate(body))
            apps.delete_namespaced_deployment("b", NS)
            continue
        with pytest.raises(ApiException) as caught:
            apps.create_namespaced_deployment(NS, kube.V1Deployment.model_validate(body))
        assert caught.value.status == 422 and says in status_of(caught)["message"], selector


def test_delete_preconditions(apps: kube.AppsV1Api) -> None:
    created = raw(apps.create_namespaced_deployment, NS, deployment())
    meta = created["metadata"]
    for preconditions in (
        kube.V1Preconditions(uid="00000000-0000-0000-0000-000000000000"),
        kube.V1Preconditions(resource_version="1"),
    ):
        with pytest.raises(ApiException) as caught:
            apps.delete_namespaced_deployment(
                "web", NS, body=kube.V1DeleteOptions(preconditions=preconditions)
            )
        assert caught.value.status == 409
        assert "Precondition failed" in status_of(caught)["message"]
    current = kube.V1Preconditions(uid=meta["uid"], resource_version=meta["resourceVersion"])
    apps.delete_namespaced_deployment("web", NS, body=kube.V1DeleteOptions(preconditions=current))
    with pytest.raises(ApiException) as caught:
        apps.read_namespaced_deployment("web", NS)
    assert caught.value.status == 404


@pytest.mark.parametrize("policy", ["Background", "Foreground", "Orphan"])
def test_garbage_collection_follows_owner_references(
    k8s: ApiStandIn, apps: kube.AppsV1Api, policy: str
) -> None:
    apps.create_namespaced_deployment(NS, kube.V1Deployment.model_validate(deployment()))
    pods = k8s.sync_pods("web")
    assert len(pods) == 2
    owner = k8s.get("pods", pods[0])["metadata"]["ownerReferences"]  # type: ignore[index]
    assert [(o["kind"], o["name"], o["controller"]) for o in owner] == [("Deployment", "web", True)]
    apps.delete_namespaced_deployment("web", NS, propagation_policy=policy)
    left = {p["metadata"]["name"]: p["metadata"] for p in k8s.list("pods")}
    assert sorted(left) == pods  # pods end when their containers do (the kubelet: a test)
    if policy == "Orphan":
        assert not any("deletionTimestamp" in m or "ownerReferences" in m for m in left.values())
    else:  # deleted by the collector: terminating
        assert all(m["deletionTimestamp"] for m in left.values())


def test_rollouts_surge_and_wait_for_readiness(k8s: ApiStandIn, apps: kube.AppsV1Api) -> None:
    strategy = {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}}
    body = deployment(replicas=2, strategy=strategy)
    apps.create_namespaced_deployment(NS, kube.V1Deployment.model_validate(body))
    first = k8s.sync_pods("web")
    for pod in first:
        k8s.set_pod_status(pod, {**status_ready()})
    patch = {"spec": {"template": {"metadata": {"annotations": {"rev": "2"}}}}}
    apps.patch_namespaced_deployment("web", NS, patch)

    def counts() -> list[int]:
        status = k8s.get("deployments", "web")["status"]  # type: ignore[index]
        return [status.get(k, 0) for k in ("replicas", "updatedReplicas", "readyReplicas")]

    seen = []
    for _ in range(10):  # controller steps, each new pod becoming ready in between
        new = k8s.sync_pods("web")
        seen.append(counts())
        pending = [p for p in new if not k8s.get("pods", p)["status"].get("conditions")]  # type: ignore[index]
        if not pending and counts() == [2, 2, 2]:
            break
        for pod in pending:
            k8s.set_pod_status(pod, status_ready())
    # One pod over (surge 1), never fewer than 2 ready (unavailable 0), until all updated.
    assert seen[0] == [3, 1, 2]
    assert all(ready >= 2 and total <= 3 for total, _, ready in seen), seen
    assert seen[-1] == [2, 2, 2] and sorted(set(new) & set(first)) == []
