"""Async services in the spec and the route table: ``metadata.type: "Async"`` and EAS's
``queue`` section, validated and stored; the gateway's route carries the queue settings;
the service is a group of its own name."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest
import redis
from fastapi.testclient import TestClient

from contract.wire import ROUTES_PATH, RouteTable
from controlplane.api.app import create_app
from controlplane.settings import Settings
from controlplane.store.db import make_engine
from eascmd import render
from tests.controlplane.conftest import ADMIN, seed_spec
from tests.controlplane.test_api import SVC, errors_of

REDIS_URL = "redis://127.0.0.1:6379/0"


def async_spec(**queue: Any) -> dict[str, Any]:
    spec = seed_spec()
    spec["metadata"] = {**spec.get("metadata", {}), "type": "Async", "rpc": {"worker_threads": 3}}
    if queue:
        spec["queue"] = queue
    return spec


def test_an_async_service_is_stored_with_its_queue_and_routed_with_it(client: TestClient) -> None:
    r = client.post(
        "/api/v2/services",
        json=async_spec(sink={"max_length": 50, "auto_evict": True}, max_delivery=2),
    )
    assert r.status_code == 200, r.text
    config = json.loads(client.get(SVC).json()["ServiceConfig"])
    assert config["metadata"]["type"] == "Async"
    assert config["metadata"]["group"] == "triton_test"  # a group of its own name
    assert config["queue"]["sink"] == {
        "max_length": 50,
        "max_payload_size_kb": 8192,
        "auto_evict": True,
    }
    assert config["queue"]["source"]["max_length"] == 10000
    table = RouteTable.model_validate(client.get(ROUTES_PATH).json())
    [route] = table.routes
    assert route.queue is not None
    assert (route.queue.window, route.queue.max_delivery) == (3, 2)
    assert (route.queue.sink_max_length, route.queue.sink_auto_evict) == (50, True)
    assert route.queue.source_max_payload_bytes == 8192 * 1024
    assert [g.group for g in table.groups] == ["triton_test"]


def test_a_synchronous_service_has_no_queue_in_its_route(client: TestClient) -> None:
    assert client.post("/api/v2/services", json=seed_spec()).status_code == 200
    [route] = RouteTable.model_validate(client.get(ROUTES_PATH).json()).routes
    assert route.queue is None


@pytest.mark.parametrize(
    ("spec", "field", "words"),
    [
        ({**seed_spec(), "queue": {}}, "queue", 'add "type": "Async"'),
        (async_spec(sink={"max_length": 0}), "queue.sink.max_length", "greater than"),
        (async_spec(source={"max_size": 3}), "queue.source.max_size", "max_payload_size_kb"),
        (async_spec(max_delivery="5"), "queue.max_delivery", "whole number"),
        (async_spec(default_path="v2/x"), "queue.default_path", "pattern"),
        (
            {**seed_spec(), "metadata": {"type": "async"}},
            "metadata.type",
            "Async",
        ),
    ],
)
def test_bad_queue_sections_name_the_field_and_the_fix(
    client: TestClient, spec: dict[str, Any], field: str, words: str
) -> None:
    r = client.post("/api/v2/services", json=spec)
    assert r.status_code == 422, r.text
    errors = errors_of(r)
    assert field in errors, errors
    assert words in errors[field]


def test_scaling_on_backlog_needs_an_async_service(client: TestClient) -> None:
    strategies = [{"metricName": "queue[backlog]", "threshold": 10}]
    sync = {**seed_spec(), "autoscaler": {"min": 0, "max": 2, "scaleStrategies": strategies}}
    r = client.post("/api/v2/services", json=sync)
    assert r.status_code == 422
    assert (
        'metadata.type is not "Async"' in errors_of(r)["autoscaler.scaleStrategies[0].metricName"]
    )
    r = client.post("/api/v2/services", json={**async_spec(), "autoscaler": sync["autoscaler"]})
    assert r.status_code == 200, r.text


def test_desc_shows_queue_depth_and_consumers(settings: Settings) -> None:
    """Through the API with OPENEAS_REDIS_URL set, and as eascmd renders it."""
    name = f"q_{uuid.uuid4().hex[:10]}"
    base = f"openeas:q:{name}"
    r = redis.Redis.from_url(REDIS_URL)
    engine = make_engine(settings.sqlalchemy_url)
    try:
        with_redis = settings.model_copy(update={"redis_url": REDIS_URL})
        with TestClient(create_app(with_redis, engine)) as c:
            c.headers["Authorization"] = f"Bearer {ADMIN}"
            assert (
                c.post("/api/v2/services", json={**async_spec(), "name": name}).status_code == 200
            )
            for i in range(1, 4):
                r.xadd(f"{base}:input", {"d": b"x"}, id=f"{i}-0")
            r.xadd(f"{base}:sink", {"d": b"y"}, id="1-0")
            r.xgroup_create(f"{base}:input", "openeas-replicas", id="0")
            r.xreadgroup(
                "openeas-replicas", "http://10.0.0.7:8000", {f"{base}:input": ">"}, count=2
            )
            svc = c.get(f"/api/v2/services/local/{name}").json()
        assert svc["QueueStatus"] == {
            "InputLength": 3,
            "SinkLength": 1,
            "DeadLetters": 0,
            "Pending": 2,
            "Consumers": [
                {
                    "Name": "http://10.0.0.7:8000",
                    "Pending": 2,
                    "IdleMs": svc["QueueStatus"]["Consumers"][0]["IdleMs"],
                }
            ],
        }
        out = render.describe(svc)
        assert "input 3 (2 held by replicas), sink 1, dead letters 0" in out
        assert "http://10.0.0.7:8000 holds 2" in out
    finally:
        engine.dispose()
        r.delete(f"{base}:input", f"{base}:sink")
        r.close()
