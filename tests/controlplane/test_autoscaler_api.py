"""The autoscaler through the REST API, on SQLite and PostgreSQL: the spec key, the
``/autoscaler`` sub-resource, bad input named by field, and manual scaling that says so."""

from __future__ import annotations

import json
from typing import Any

from fastapi.testclient import TestClient

from contract.wire import SIGNALS_PATH
from controlplane.api.app import create_app
from controlplane.elasticity.scaling_loop import Autoscaling
from controlplane.settings import Settings
from controlplane.store.db import make_engine, make_sessions
from controlplane.store.sealing import TokenSealer
from controlplane.store.services import Services
from tests.controlplane.conftest import seed_spec
from tests.controlplane.test_api import errors_of

SVC = "/api/v2/services/local/triton_test"
AUTO: dict[str, Any] = {
    "min": 2,
    "max": 4,
    "scaleStrategies": [{"metricName": "qps", "threshold": 100}],
    "behavior": {"scaleDown": {"stabilizationWindowSeconds": 60}},
}


def test_put_get_delete_autoscaler(client: TestClient) -> None:
    client.post("/api/v2/services", json=seed_spec())
    assert client.get(SVC + "/autoscaler").status_code == 404

    r = client.put(SVC + "/autoscaler", json=AUTO)
    assert r.status_code == 200, r.text
    stored = {k: v for k, v in r.json().items() if k not in ("RequestId", "Message")}
    assert stored["behavior"]["scaleUp"] == {"stabilizationWindowSeconds": 0}  # default
    described = client.get(SVC + "/autoscaler").json()
    assert {k: described[k] for k in stored} == stored
    assert (described["MinReplica"], described["MaxReplica"]) == (2, 4)  # the SDK's names
    desc = client.get(SVC).json()
    assert json.loads(desc["ServiceConfig"])["autoscaler"] == stored
    assert json.loads(desc["ServiceConfig"])["metadata"]["instance"] == 2  # raised into [min, max]
    assert desc["TotalInstance"] == 1  # until the reconciler acts

    r = client.put(SVC + "/scale", json={"Instance": 3})
    assert r.status_code == 409
    assert "eascmd autoscale triton_test --off" in r.json()["detail"]

    # A modify that carries another count keeps the autoscaler's, and says so.
    client.put(SVC, json={"metadata": {"instance": 1, "cpu": 2}})
    desc = client.get(SVC).json()
    assert json.loads(desc["ServiceConfig"])["metadata"] == {
        **json.loads(desc["ServiceConfig"])["metadata"],
        "cpu": 2,
    }
    assert json.loads(desc["ServiceConfig"])["metadata"]["instance"] == 2
    reasons = [e["Reason"] for e in client.get(SVC + "/events").json()["Events"]]
    assert reasons[-3:] == ["AutoscalerSet", "InstanceKept", "Updated"]

    assert client.delete(SVC + "/autoscaler").status_code == 200
    assert "autoscaler" not in json.loads(client.get(SVC).json()["ServiceConfig"])
    assert client.put(SVC + "/scale", json={"Instance": 3}).status_code == 200


def test_autoscaler_in_the_service_json(client: TestClient) -> None:
    spec = seed_spec(autoscaler={**AUTO, "min": 1})
    spec["metadata"]["instance"] = 9
    assert client.post("/api/v2/services", json=spec).status_code == 200
    desc = client.get(SVC).json()
    assert (
        json.loads(desc["ServiceConfig"])["metadata"]["instance"] == 4
        and desc["TotalInstance"] == 4
    )


BAD = [
    ({**AUTO, "min": 5}, "autoscaler.max", "below min"),
    (
        {**AUTO, "scaleStrategies": [{"metricName": "gpu", "threshold": 1}]},
        "autoscaler.scaleStrategies[0].metricName",
        "'qps', 'concurrency', 'cpu', 'queue_time_ms' or 'queue[backlog]'",
    ),
    (
        {**AUTO, "scaleStrategies": [{"metricName": "qps", "threshold": 0}]},
        "autoscaler.scaleStrategies[0].threshold",
        "greater than 0",
    ),
    ({**AUTO, "scaleStrategies": []}, "autoscaler.scaleStrategies", "at least 1"),
    ({**AUTO, "Min": 1}, "autoscaler.Min", "allowed here: min, max, scaleStrategies, behavior"),
    (
        {**AUTO, "behavior": {"scaleDown": {"window": 3}}},
        "autoscaler.behavior.scaleDown.window",
        "allowed here: stabilizationWindowSeconds",
    ),
    # Scale to zero (EAS's behavior.onZero).
    (
        {**AUTO, "behavior": {"onZero": {"scaleDownGracePeriodSeconds": 60}}},
        "autoscaler.behavior.onZero",
        "applies only to a service that scales to zero, and min is 2",
    ),
    (
        {**AUTO, "min": 0, "behavior": {"onZero": {"scaleUpActivationReplicas": 5}}},
        "autoscaler.behavior.onZero.scaleUpActivationReplicas",
        "above max (4)",
    ),
    (
        {**AUTO, "min": 0, "behavior": {"onZero": {"scaleDownGracePeriodSeconds": -1}}},
        "autoscaler.behavior.onZero.scaleDownGracePeriodSeconds",
        "greater than or equal to 0",
    ),
    (
        {**AUTO, "min": 0, "behavior": {"onZero": {"graceSeconds": 1}}},
        "autoscaler.behavior.onZero.graceSeconds",
        "allowed here: scaleDownGracePeriodSeconds, scaleUpActivationReplicas",
    ),
    ({**AUTO, "min": -1}, "autoscaler.min", "greater than or equal to 0"),
]


def test_min_zero_with_on_zero_is_stored_and_shown(client: TestClient) -> None:
    on_zero = {"scaleDownGracePeriodSeconds": 30, "scaleUpActivationReplicas": 2}
    body = {**AUTO, "min": 0, "behavior": {"onZero": on_zero}}
    client.post("/api/v2/services", json=seed_spec())
    r = client.put(SVC + "/autoscaler", json=body)
    assert r.status_code == 200, r.text
    assert r.json()["min"] == 0 and r.json()["behavior"]["onZero"] == on_zero
    desc = client.get(SVC).json()
    assert json.loads(desc["ServiceConfig"])["autoscaler"]["behavior"]["onZero"] == on_zero
    assert json.loads(desc["ServiceConfig"])["metadata"]["instance"] == 1  # starts awake


def test_bad_autoscaler_is_named_and_nothing_is_stored(client: TestClient) -> None:
    client.post("/api/v2/services", json=seed_spec())
    version = client.get(SVC).json()["ResourceVersion"]
    for body, field, message in BAD:
        r = client.put(SVC + "/autoscaler", json=body)
        assert r.status_code == 422, (body, r.text)
        errors = errors_of(r)
        assert field in errors, (field, errors)
        assert message in errors[field]
        r = client.post("/api/v2/services", json=seed_spec(name="other", autoscaler=body))
        assert field in errors_of(r)
    assert client.get(SVC).json()["ResourceVersion"] == version
    assert client.get(SVC + "/autoscaler").status_code == 404


def test_load_reports_need_a_gateway_credential_and_a_leader(client: TestClient) -> None:
    report = {"reporter": "r1", "interval_s": 1.0, "services": []}
    assert client.post(SIGNALS_PATH, json=report, headers={"Authorization": ""}).status_code == 401
    r = client.post(SIGNALS_PATH, json=report)
    assert r.status_code == 421 and "does not lead" in r.json()["detail"]
    bad = {**report, "interval_s": 0}
    assert client.post(SIGNALS_PATH, json=bad).status_code == 422


def test_queue_time_needs_tritons_metrics(client: TestClient) -> None:
    spec = seed_spec()
    spec["processor_params"].append("--allow-metrics=false")
    client.post("/api/v2/services", json=spec)
    body = {**AUTO, "scaleStrategies": [{"metricName": "queue_time_ms", "threshold": 10}]}
    r = client.put(SVC + "/autoscaler", json=body)
    assert r.status_code == 422
    assert "--allow-metrics=false" in errors_of(r)["autoscaler.scaleStrategies[0].metricName"]


def test_the_routes_token_may_report_load(settings: Settings) -> None:
    scoped = settings.model_copy(update={"routes_token": "routes-reader-token-0123456789"})
    engine = make_engine(scoped.sqlalchemy_url)
    sessions = make_sessions(engine)
    sealer = TokenSealer(["sealing-key-for-tests-0123"])
    scaling = Autoscaling(sessions, Services(sessions, scoped.cluster_id, sealer))
    scaling.signals.leading = True  # as while its reconciler leads
    report = {"reporter": "r1", "interval_s": 1.0, "services": [
        {"service": "svc", "requests": 30, "concurrency": 1.5}]}  # fmt: skip
    with TestClient(create_app(scoped, engine, autoscaling=scaling)) as c:
        reader = {"Authorization": "Bearer routes-reader-token-0123456789"}
        assert c.post(SIGNALS_PATH, json=report, headers=reader).status_code == 204
        assert c.get(SVC + "/autoscaler", headers=reader).status_code == 403  # reads no API
    assert scaling.signals.load("svc").qps == 30.0
    engine.dispose()
