"""The API stand-in is strict where the runtime relies on the real server: checked here with
the official client's own calls (and raw HTTP where the client would hide the answer)."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as kube
from kubernetes import config as k8s_config
from kubernetes.client.exceptions import ApiException

from testing.k8s_server import ApiStandIn, parse_selector

NS = "openeas-serving"


@pytest.fixture
def core(k8s: ApiStandIn, tmp_path: Path) -> Iterator[kube.CoreV1Api]:
    api = k8s_config.new_client_from_config(config_file=str(k8s.write_kubeconfig(tmp_path / "kc")))
    yield kube.CoreV1Api(api)
    api.close()


def service(name: str = "svc", **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "labels": {"app": name}},
        "spec": {"selector": {"app": name}, "ports": [{"name": "http", "port": 80}], **spec},
    }


def raw(call: Any, *args: Any, **kwargs: Any) -> dict[str, Any]:
    response = call(*args, _preload_content=False, **kwargs)
    return json.loads(response.data)  # type: ignore[no-any-return]


def status_of(error: pytest.ExceptionInfo[ApiException]) -> dict[str, Any]:
    return json.loads(error.value.body)  # type: ignore[no-any-return]


def test_requests_need_the_token(k8s: ApiStandIn) -> None:
    with pytest.raises(urllib.error.HTTPError) as caught:
        urllib.request.urlopen(f"{k8s.url}/api/v1/namespaces/{NS}/services")
    assert caught.value.code == 401
    assert json.loads(caught.value.read())["reason"] == "Unauthorized"


def test_create_conflicts_and_resource_versions(core: kube.CoreV1Api) -> None:
    created = raw(core.create_namespaced_service, NS, service())
    with pytest.raises(ApiException) as caught:
        core.create_namespaced_service(NS, service())
    assert caught.value.status == 409 and status_of(caught)["reason"] == "AlreadyExists"

    stale = dict(service(), metadata={**service()["metadata"], "resourceVersion": "1"})
    with pytest.raises(ApiException) as caught:
        core.replace_namespaced_service("svc", NS, stale)
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
                _content_type="application/apply-patch+yaml",
            )
        assert caught.value.status == 422, bad
        assert says in status_of(caught)["message"]


def test_patch_kinds(k8s: ApiStandIn, core: kube.CoreV1Api) -> None:
    core.create_namespaced_service(NS, service())
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
    apply = {"_content_type": "application/apply-patch+yaml"}
    with pytest.raises(ApiException) as caught:
        core.patch_namespaced_service("svc", NS, service(), **apply)
    assert caught.value.status == 422 and "fieldManager" in status_of(caught)["message"]

    labelled = service()
    labelled["metadata"]["labels"]["tier"] = "gpu"
    raw(core.patch_namespaced_service, "svc", NS, labelled, field_manager="me", **apply)
    raw(core.patch_namespaced_service, "svc", NS, {"metadata": {"labels": {"app": "other"}}},
        field_manager="kubectl")  # fmt: skip
    with pytest.raises(ApiException) as caught:  # someone else owns app now
        core.patch_namespaced_service("svc", NS, service(), field_manager="me", **apply)
    assert caught.value.status == 409 and "kubectl" in status_of(caught)["message"]
    forced = raw(
        core.patch_namespaced_service, "svc", NS, service(), field_manager="me", force=True, **apply
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
    core.create_namespaced_service(NS, service("one"))
    core.create_namespaced_service(NS, service("two"))
    response = core.list_namespaced_service(
        NS,
        watch=True,
        resource_version=start,
        timeout_seconds=1,
        label_selector="app=two",
        _preload_content=False,
    )
    events = [json.loads(line) for line in response if line.strip()]
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [("ADDED", "two")]

    k8s.expire_watches()
    response = core.list_namespaced_service(
        NS, watch=True, resource_version=start, timeout_seconds=1, _preload_content=False
    )
    [error] = [json.loads(line) for line in response if line.strip()]
    assert error["type"] == "ERROR"
    assert (error["object"]["code"], error["object"]["reason"]) == (410, "Expired")
