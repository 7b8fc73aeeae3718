"""Service groups through the REST API: made with the first member and gone with the last,
release and traffic mode as routing-only changes that reach the route table, the group token
shown only on its own call (both databases)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from fastapi.testclient import TestClient

from contract.wire import ROUTES_PATH, RouteTable, token_digest
from controlplane.model.spec import StoredSpec
from controlplane.store.groups import shares
from controlplane.store.tables import ServiceRow
from tests.controlplane.conftest import seed_spec

GROUPS = "/api/v2/groups"


def member(client: TestClient, name: str, **metadata: Any) -> dict[str, Any]:
    spec = seed_spec(name=name, metadata={"instance": 1, "group": "g", **metadata})
    r = client.post("/api/v2/services", json=spec)
    assert r.status_code == 200, r.text
    body: dict[str, Any] = r.json()
    return body


def routes(client: TestClient, after: int = -1) -> RouteTable:
    return RouteTable.model_validate(client.get(ROUTES_PATH, params={"after": after}).json())


def test_a_group_lives_as_long_as_its_members(client: TestClient) -> None:
    assert client.get(GROUPS).json()["Groups"] == []
    member(client, "blue", traffic_state="grouping")
    member(client, "green")  # new members start standalone
    (group,) = client.get(GROUPS).json()["Groups"]
    assert group["GroupName"] == "g" and group["TrafficMode"] == "customized"
    assert group["InternetEndpoint"].endswith("/api/predict/g")
    assert "group token" in group["Authentication"]
    states = {m["ServiceName"]: (m["TrafficState"], m["Weight"]) for m in group["Members"]}
    assert states == {"blue": ("grouping", 100), "green": ("standalone", 100)}
    table = routes(client)
    assert [g.group for g in table.groups] == ["g"]
    assert {r.service: (r.group, r.grouping) for r in table.routes} == {
        "blue": ("g", True),
        "green": ("g", False),
    }

    client.delete("/api/v2/services/local/blue")
    assert client.get(f"{GROUPS}/local/g").status_code == 200  # green is still in it
    before = routes(client).version
    client.put("/api/v2/services/local/green", json={"metadata": {"group": None}})
    assert client.get(f"{GROUPS}/local/g").status_code == 404
    delta = routes(client, before)
    assert delta.removed_groups == ["g"] and [r.group for r in delta.routes] == [None]


def test_release_moves_traffic_without_a_new_generation(client: TestClient) -> None:
    member(client, "blue", traffic_state="grouping")
    member(client, "green")
    generation = client.get("/api/v2/services/local/green").json()["Generation"]
    before = routes(client).version
    r = client.put("/api/v2/services/local/green/release", json={"TrafficState": "grouping"})
    assert r.status_code == 200 and r.json()["Generation"] == generation
    r = client.put("/api/v2/services/local/green/release", json={"Weight": 300})
    assert json.loads(r.json()["ServiceConfig"])["metadata"]["traffic_state"] == "grouping"  # kept
    delta = routes(client, before)
    assert [(x.service, x.weight, x.grouping) for x in delta.routes] == [("green", 300, True)]
    events = client.get("/api/v2/services/local/green/events").json()["Events"]
    assert [e["Reason"] for e in events][-2:] == ["Released", "Released"]
    bad = client.put("/api/v2/services/local/green/release", json={"Weight": 1001})
    assert bad.status_code == 422
    assert client.get("/api/v2/services/local/green").json()["Generation"] == generation


def test_traffic_mode_and_the_group_token(client: TestClient) -> None:
    member(client, "blue", traffic_state="grouping")
    r = client.put(f"{GROUPS}/local/g", json={"TrafficMode": "auto"})
    assert r.status_code == 200 and r.json()["TrafficMode"] == "auto"
    assert routes(client).groups[0].traffic_mode == "auto"
    bad = client.put(f"{GROUPS}/local/g", json={"TrafficMode": "random"})
    assert bad.status_code == 422 and "TrafficMode" in bad.text

    token = client.get(f"{GROUPS}/local/g/token").json()["Token"]
    assert routes(client).groups[0].token_sha256 == token_digest(token)
    assert token not in client.get(GROUPS).text  # a list never shows it
    assert client.get(f"{GROUPS}/local/g").json()["AccessToken"] == token  # to the admin
    assert routes(client).groups[0].token == token  # the key of EAS-signed calls
    rotated = client.post(f"{GROUPS}/local/g/token").json()["Token"]
    assert rotated != token and routes(client).groups[0].token_sha256 == token_digest(rotated)
    assert routes(client).groups[0].token == rotated
    assert client.get(f"{GROUPS}/local/nope").status_code == 404
    # A service may not hold a group's token (gRPC callers are routed by the token alone).
    taken = client.post("/api/v2/services", json=seed_spec(name="thief", token=rotated))
    assert taken.status_code == 409 and taken.json()["errors"][0]["field"] == "token"
    r = client.put("/api/v2/services/local/blue", json={"token": rotated})
    assert r.status_code == 409 and r.json()["errors"][0]["field"] == "token"


def test_group_names_are_checked(client: TestClient) -> None:
    r = client.post("/api/v2/services", json=seed_spec(metadata={"group": "Bad-Group"}))
    assert r.status_code == 422 and "metadata.group" in r.text


def _row(name: str, mode_state: str | None, weight: int | None, running: int) -> ServiceRow:
    spec = {"name": name, "processor": "triton", "metadata": {"group": "g"}}
    if mode_state:
        spec["metadata"]["traffic_state"] = mode_state  # type: ignore[index]
    if weight is not None:
        spec["metadata"]["weight"] = weight  # type: ignore[index]
    row = ServiceRow(name=name, spec=StoredSpec.model_validate(spec))
    row.running_instances = running
    return row


@pytest.mark.parametrize(
    ("mode", "members", "expected"),
    [
        ("customized", [("a", "grouping", 100, 1), ("b", "grouping", 300, 1)], [0.25, 0.75]),
        ("customized", [("a", "grouping", 100, 1), ("b", None, 300, 1)], [1.0, 0.0]),
        ("customized", [("a", "grouping", 100, 0), ("b", "grouping", 300, 2)], [0.0, 1.0]),
        ("auto", [("a", "grouping", 900, 1), ("b", "grouping", 1, 3)], [0.25, 0.75]),
        ("auto", [("a", "standalone", None, 1)], [0.0]),
    ],
)
def test_expected_shares(
    mode: str, members: list[tuple[str, str | None, int | None, int]], expected: list[float]
) -> None:
    rows = [_row(*m) for m in members]
    assert list(shares(mode, rows).values()) == expected
