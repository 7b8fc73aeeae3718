"""Labels: a map on the spec (``$SYSTEM_*`` keys too), shown by describe, and the list
filtered on it with ``?label=k:v`` (people) and ``Label={"k":"v"}`` (EAS's SDK, its query
string built by the SDK's own helper), on SQLite and PostgreSQL alike."""

from __future__ import annotations

import json
from typing import Any

from alibabacloud_openapi_util.client import Client as OpenApiUtilClient
from fastapi.testclient import TestClient

from tests.controlplane.conftest import seed_spec
from tests.controlplane.test_api import errors_of


def make(client: TestClient, name: str, labels: dict[str, str] | None) -> None:
    body = seed_spec(name=name)
    if labels is not None:
        body["labels"] = labels
    r = client.post("/api/v2/services", json=body)
    assert r.status_code == 200, r.text


def names(client: TestClient, query: str) -> list[str]:
    r = client.get("/api/v2/services?" + query)
    assert r.status_code == 200, r.text
    body: dict[str, Any] = r.json()
    assert body["TotalCount"] == len(body["Services"])
    return sorted(s["ServiceName"] for s in body["Services"])


def test_labels_are_shown_and_filter_the_list(client: TestClient) -> None:
    make(client, "vision_a", {"team": "vision", "$SYSTEM_SERVICE_DEPLOY_TYPE": "triton"})
    make(client, "vision_b", {"team": "vision", "stage": "canary"})
    make(client, "speech", {"team": "speech"})
    make(client, "bare", None)
    desc = client.get("/api/v2/services/local/vision_a").json()
    assert json.loads(desc["ServiceConfig"])["labels"] == {
        "team": "vision",
        "$SYSTEM_SERVICE_DEPLOY_TYPE": "triton",
    }
    assert names(client, "label=team:vision") == ["vision_a", "vision_b"]
    assert names(client, "label=team:vision&label=stage:canary") == ["vision_b"]
    assert names(client, "label=team:nobody") == []
    assert names(client, "label=%24SYSTEM_SERVICE_DEPLOY_TYPE:triton") == ["vision_a"]
    # EAS's SDK: ListServicesRequest(label={...}) becomes Label=<JSON> in the query
    shrink = OpenApiUtilClient.array_to_string_with_specified_style(
        {"team": "speech"}, "Label", "json"
    )
    r = client.get("/api/v2/services", params={"Label": shrink})
    assert [s["ServiceName"] for s in r.json()["Services"]] == ["speech"]
    assert json.loads(shrink) == {"team": "speech"}


def test_bad_label_filters_name_the_parameter(client: TestClient) -> None:
    r = client.get("/api/v2/services?label=team")
    assert r.status_code == 422 and "label" in errors_of(r)
    r = client.get("/api/v2/services", params={"Label": "[1]"})
    assert r.status_code == 422 and "Label" in errors_of(r)


def test_labels_are_checked(client: TestClient) -> None:
    r = client.post("/api/v2/services", json=seed_spec(labels={"team": 3}))
    assert r.status_code == 422 and "labels.team" in errors_of(r)
    r = client.post("/api/v2/services", json=seed_spec(labels={"": "x"}))
    assert r.status_code == 422 and "labels" in errors_of(r)


def test_the_sdk_lists_by_label_over_http(live_api: Any) -> None:
    """EAS's unmodified OpenAPI SDK, signed with an AccessKey, against uvicorn."""
    from alibabacloud_eas20210701 import models as eas

    from tests.controlplane.test_identities_sdk import admin_http, new_key, sdk

    with admin_http(live_api) as c:
        for name, team in (("vision_a", "vision"), ("speech_a", "speech"), ("bare", None)):
            body = seed_spec(name=name)
            if team:
                body["labels"] = {"team": team}
            assert c.post("/api/v2/services", json=body).status_code == 200
    client = sdk(live_api, new_key(live_api, "viewer"))
    listed = client.list_services(eas.ListServicesRequest(label={"team": "vision"})).body
    assert [s.service_name for s in listed.services] == ["vision_a"]
    assert listed.total_count == 1
