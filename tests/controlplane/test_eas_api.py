"""EAS's JSON through the API on the local runtime: issue 58's config is created, shown as
written with the fields this runtime does not honour (and an event saying so); what the
local runtime cannot run at all is refused at create with the reason and the fix."""

from __future__ import annotations

import json
from typing import Any

from fastapi.testclient import TestClient

from tests.controlplane.test_api import errors_of
from tests.controlplane.test_eas_spec import issue_config


def test_the_issue_config_is_created_and_shown_as_written(client: TestClient) -> None:
    r = client.post("/api/v2/services", json=issue_config())
    assert r.status_code == 200, r.text
    assert r.json()["ServiceName"] == "triton_mnist"
    desc: dict[str, Any] = client.get("/api/v2/services/local/triton_mnist").json()
    config = json.loads(desc["ServiceConfig"])
    for key in ("containers", "storage", "labels", "cloud"):
        assert config[key] == issue_config()[key]
    fields = [n["field"] for n in desc["NotHonoured"]]
    assert fields == [
        "metadata.workspace_id",
        "containers[].image",
        "containers[].port",
        "cloud.computing.instance_type",
    ]
    events = client.get("/api/v2/services/local/triton_mnist/events").json()["Events"]
    warned = [e["Message"] for e in events if e["Reason"] == "NotHonoured"]
    assert any(m.startswith("containers[].image: ") and "runs no images" in m for m in warned)


def test_what_the_local_runtime_cannot_run_is_refused_with_why(client: TestClient) -> None:
    body = issue_config(
        containers=[{"image": "registry/web:1", "command": "no-such-program --serve"}],
    )
    r = client.post("/api/v2/services", json=body)
    assert r.status_code == 422
    message = errors_of(r)["containers[0].image"]
    assert "'registry/web:1'" in message and "runs no images" in message
    assert "'no-such-program' is not on this machine's PATH" in message
    nfs = issue_config(storage=[{"mount_path": "/data", "nfs": {"server": "nfs", "path": "/x"}}])
    r = client.post("/api/v2/services", json=nfs)
    assert r.status_code == 422 and "mounts no NFS" in errors_of(r)["storage[0].nfs"]
    assert client.get("/api/v2/services").json()["TotalCount"] == 0  # nothing half-written


def test_kubernetes_refuses_a_warm_up_it_could_not_replay() -> None:
    from controlplane.api.app import image_warm_up
    from controlplane.model.spec import validate_spec

    spec = validate_spec(issue_config(warm_up_data_path="oss://bucket/warm-up"))
    [problem] = image_warm_up(spec)
    assert problem.field == "warm_up_data_path" and "processor" in problem.fix
    assert image_warm_up(validate_spec(issue_config())) == []


def test_a_patch_in_eas_spellings_replaces_what_is_stored(client: TestClient) -> None:
    body = issue_config()
    body["metadata"]["rpc.keepalive"] = 3000
    assert client.post("/api/v2/services", json=body).status_code == 200
    path = "/api/v2/services/local/triton_mnist"
    r = client.put(path, json={"metadata": {"rpc.keepalive": 5000}})
    assert r.status_code == 200, r.text
    written = json.loads(client.get(path).json()["ServiceConfig"])
    assert written["metadata"]["rpc"] == {"keepalive": 5000}
    r = client.put(path, json={"autoscaler": {"min": 1, "max": 2, "strategies": {"qps": 5}}})
    assert r.status_code == 200, r.text
    r = client.put(path, json={"autoscaler": {"strategies": {"cpu": 70}}})
    assert r.status_code == 200, r.text
    auto = json.loads(client.get(path).json()["ServiceConfig"])["autoscaler"]
    assert auto["scaleStrategies"] == [{"metricName": "cpu", "threshold": 70.0}]
    r = client.put(path, json={"metadata": {"name": "renamed"}})
    assert r.status_code == 422 and "metadata.name" in r.text
