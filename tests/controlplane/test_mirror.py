"""A service's mirror through the REST API: EAS's names, routing only (no new generation),
carried to the gateway by the route table, refused with the field and the fix when wrong,
removed by Ratio 0 (both databases)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from fastapi.testclient import TestClient

from contract.wire import MirrorRoute
from tests.controlplane.conftest import seed_spec
from tests.controlplane.test_groups import routes

MIRROR = "/api/v2/services/local/v1/mirror"


@pytest.fixture
def two(client: TestClient) -> TestClient:
    for name in ("v1", "v2"):
        r = client.post("/api/v2/services", json=seed_spec(name=name))
        assert r.status_code == 200, r.text
    return client


def generation(client: TestClient) -> int:
    body: dict[str, Any] = client.get("/api/v2/services/local/v1").json()
    return int(body["Generation"])


def test_mirror_reaches_the_route_table_without_a_new_generation(two: TestClient) -> None:
    before, gen = routes(two).version, generation(two)
    r = two.put(MIRROR, json={"Ratio": 10, "Target": ["v2"], "Tolerance": 0.001})
    assert r.status_code == 200, r.text
    mirror = json.loads(r.json()["ServiceConfig"])["metadata"]["mirror"]
    assert mirror == {"ratio": 10, "targets": ["v2"], "tolerance": 0.001}
    assert generation(two) == gen
    delta = routes(two, before)
    assert [(x.service, x.mirror) for x in delta.routes] == [
        ("v1", MirrorRoute(ratio=10, targets=["v2"], tolerance=0.001))
    ]
    events = two.get("/api/v2/services/local/v1/events").json()["Events"]
    assert events[-1]["Reason"] == "Mirrored" and "v2" in events[-1]["Message"]

    before = routes(two).version
    r = two.put(MIRROR, json={"Ratio": 0})
    assert (
        r.status_code == 200 and "mirror" not in json.loads(r.json()["ServiceConfig"])["metadata"]
    )
    assert [(x.service, x.mirror) for x in routes(two, before).routes] == [("v1", None)]
    assert generation(two) == gen


@pytest.mark.parametrize(
    ("body", "field", "words"),
    [
        ({"Ratio": 10, "Target": ["nope"]}, "Target[0]", "no service named 'nope'"),
        ({"Ratio": 10, "Target": ["v2", "v1"]}, "Target[1]", "cannot mirror to itself"),
        ({"Ratio": 10, "Target": ["v2", "v2"]}, "Target", "listed twice"),
        ({"Ratio": 10, "Target": ["Bad-Name"]}, "Target", "not a service name"),
        ({"Ratio": 101, "Target": ["v2"]}, "Ratio", "less than or equal to 100"),
        ({"Ratio": 10, "Target": ["v2"], "Tolerance": -1.0}, "Tolerance", "greater than"),
        ({"Ratio": 10, "Target": ["v2"] * 9}, "Target", "at most 8"),
    ],
)
def test_bad_mirrors_are_refused_and_nothing_is_stored(
    two: TestClient, body: dict[str, Any], field: str, words: str
) -> None:
    before = routes(two).version
    r = two.put(MIRROR, json=body)
    assert r.status_code == 422, r.text
    (error,) = r.json()["errors"]
    assert error["field"] == field and words in error["message"], error
    assert routes(two).version == before
    assert (
        "mirror"
        not in json.loads(two.get("/api/v2/services/local/v1").json()["ServiceConfig"])["metadata"]
    )


def test_the_spec_carries_a_mirror_too(two: TestClient) -> None:
    spec = seed_spec(name="v3", metadata={"mirror": {"ratio": 100, "targets": ["v1", "v2"]}})
    r = two.post("/api/v2/services", json=spec)
    assert r.status_code == 200, r.text
    (route,) = [x for x in routes(two).routes if x.service == "v3"]
    assert route.mirror == MirrorRoute(ratio=100, targets=["v1", "v2"])
    bad = seed_spec(name="v4", metadata={"mirror": {"ratio": 1, "targets": ["gone"]}})
    r = two.post("/api/v2/services", json=bad)
    assert r.status_code == 422 and r.json()["errors"][0]["field"] == "metadata.mirror.targets[0]"
