"""AccessKey identities end to end: EAS's unmodified OpenAPI SDK (alibabacloud_eas20210701)
over real HTTP to a real uvicorn control plane, on SQLite and PostgreSQL. Each accepted
credential kind, each refusal with the code the SDK shows, and the audit trail."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from alibabacloud_eas20210701 import models as eas
from alibabacloud_eas20210701.client import Client as EasClient
from alibabacloud_tea_openapi import models as openapi
from alibabacloud_tea_openapi.exceptions import ClientException
from alibabacloud_tea_openapi.utils import Utils

from contract import signing
from controlplane.api.app import create_app
from controlplane.settings import Settings
from controlplane.store.db import make_engine
from tests.controlplane.conftest import ADMIN, LiveServer, seed_spec


def sdk(server: LiveServer, key: dict[str, Any] | None = None, **config: Any) -> EasClient:
    if key is not None:
        config.update(access_key_id=key["AccessKeyId"], access_key_secret=key["AccessKeySecret"])
    return EasClient(
        openapi.Config(
            endpoint=f"127.0.0.1:{server.port}", protocol="http", region_id="local", **config
        )
    )


def admin_http(server: LiveServer) -> httpx.Client:
    return httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {ADMIN}"})


def new_key(server: LiveServer, role: str, services: list[str] | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {"Role": role, "Description": f"a {role}"}
    if services is not None:
        body["Services"] = services
    with admin_http(server) as c:
        answer = c.post("/api/v2/accesskeys", json=body)
    assert answer.status_code == 200, answer.text
    made: dict[str, Any] = answer.json()
    return made


def create(client: EasClient, name: str) -> Any:
    return client.create_service(eas.CreateServiceRequest(body=json.dumps(seed_spec(name=name))))


def refused(call: Any) -> ClientException:
    with pytest.raises(ClientException) as e:
        call()
    return e.value


def audit(server: LiveServer, **query: str) -> list[dict[str, Any]]:
    with admin_http(server) as c:
        answer = c.get("/api/v2/audit", params=query)
    assert answer.status_code == 200, answer.text
    entries: list[dict[str, Any]] = answer.json()["Entries"]
    return entries


@pytest.fixture
def server(live_api: LiveServer) -> LiveServer:
    return live_api


def test_roles_and_globs_through_the_sdk(server: LiveServer) -> None:
    dev = new_key(server, "developer", ["team_a_*"])
    viewer = new_key(server, "viewer")
    assert dev["AccessKeyId"].startswith("OEAK") and len(dev["AccessKeySecret"]) >= 32

    made = create(sdk(server, dev), "team_a_one")  # ACS3-HMAC-SHA256, the SDK's default
    assert made.status_code == 200 and made.body.service_name == "team_a_one"
    outside = refused(lambda: create(sdk(server, dev), "team_b_one"))
    assert (outside.status_code, outside.code) == (403, "Forbidden")
    assert "team_b_one" in outside.message and outside.request_id not in ("", "None")
    # Nor may its services join a group outside its globs, at creation or later.
    grouped = seed_spec(
        name="team_a_two", metadata={**seed_spec()["metadata"], "group": "team_b_g"}
    )
    joined = refused(
        lambda: sdk(server, dev).create_service(eas.CreateServiceRequest(body=json.dumps(grouped)))
    )
    assert (joined.code, "team_b_g" in joined.message) == ("Forbidden", True)
    patch = json.dumps({"metadata": {"group": "team_b_g"}})
    moved = refused(
        lambda: sdk(server, dev).update_service(
            "local", "team_a_one", eas.UpdateServiceRequest(body=patch)
        )
    )
    assert moved.code == "Forbidden"
    ok = json.dumps({"metadata": {"group": "team_a_g"}})
    updated = sdk(server, dev).update_service(
        "local", "team_a_one", eas.UpdateServiceRequest(body=ok)
    )
    assert updated.status_code == 200

    listed = sdk(server, viewer).list_services(eas.ListServicesRequest(page_size=10))
    assert [s.service_name for s in listed.body.services] == ["team_a_one"]
    no = refused(lambda: sdk(server, viewer).delete_service("local", "team_a_one"))
    assert (no.status_code, no.code) == (403, "Forbidden")
    keys = refused(
        lambda: sdk(server, dev).call_api(
            openapi.Params(
                action="ListAccessKeys", version="2021-07-01", protocol="HTTP",
                pathname="/api/v2/accesskeys", method="GET", auth_type="AK", style="ROA",
                req_body_type="json", body_type="json",
            ),
            openapi.OpenApiRequest(),
            __import__("darabonba.runtime", fromlist=["RuntimeOptions"]).RuntimeOptions(),
        )
    )  # fmt: skip
    assert (keys.status_code, keys.code) == (403, "Forbidden")

    trail = audit(server)
    refusal = next(e for e in trail if e["Action"] == "DeleteService")
    assert refusal == {
        **refusal,
        "Principal": viewer["AccessKeyId"],
        "Resource": "team_a_one",
        "Status": 403,
        "SourceIp": "127.0.0.1",
    }
    assert refusal["RequestId"] == no.request_id
    created = audit(server, principal=dev["AccessKeyId"], service="team_a_one")
    assert [(e["Action"], e["Status"]) for e in created] == [
        ("UpdateService", 200),
        ("UpdateService", 403),
        ("CreateService", 200),
    ]
    assert not any(e["Action"] == "ListServices" for e in trail)  # reads are not audited


def test_a_narrowed_key_lists_only_what_its_globs_match(server: LiveServer) -> None:
    with admin_http(server) as c:
        for name in ("team_a_one", "team_a_two", "teamxa_three", "team_b_one"):
            assert c.post("/api/v2/services", json=seed_spec(name=name)).status_code == 200
        bad = c.post("/api/v2/accesskeys", json={"Role": "viewer", "Services": ["team-a-*"]})
        assert (bad.status_code, bad.json()["Code"]) == (422, "InvalidParameter")
        assert bad.json()["errors"][0]["field"] == "Services[0]"
    viewer = new_key(server, "viewer", ["team_a_*"])
    listed = sdk(server, viewer).list_services(eas.ListServicesRequest(page_size=10)).body
    assert sorted(s.service_name for s in listed.services) == ["team_a_one", "team_a_two"]
    assert listed.total_count == 2
    nothing = new_key(server, "viewer", [])
    assert sdk(server, nothing).list_services(eas.ListServicesRequest()).body.total_count == 0
    admin = new_key(server, "admin", ["zzz"])  # an admin is never narrowed
    assert sdk(server, admin).list_services(eas.ListServicesRequest()).body.total_count == 4


def test_every_credential_kind_the_sdk_sends(server: LiveServer) -> None:
    dev = new_key(server, "developer")
    with admin_http(server) as c:
        assert c.post("/api/v2/services", json=seed_spec()).status_code == 200
    pair = f"{dev['AccessKeyId']}:{dev['AccessKeySecret']}"
    for client in (
        sdk(server, dev),  # ACS3-HMAC-SHA256
        sdk(server, dev, signature_algorithm="v2"),  # ROA: acs <id>:<HMAC-SHA1>
        sdk(server, type="bearer", bearer_token=ADMIN),  # x-acs-bearer-token
        sdk(server, type="bearer", bearer_token=pair),
    ):
        answer = client.list_services(eas.ListServicesRequest(page_number=1, page_size=5))
        assert [s.service_name for s in answer.body.services] == ["triton_test"]
    described = sdk(server, dev, signature_algorithm="v2").describe_service("local", "triton_test")
    assert described.body.service_name == "triton_test"
    with httpx.Client(base_url=server.url) as c:  # today's Authorization: Bearer, both kinds
        for token in (ADMIN, pair):
            got = c.get("/api/v2/services", headers={"Authorization": f"Bearer {token}"})
            assert got.status_code == 200


def test_bad_credentials_get_their_codes(
    server: LiveServer, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    dev = new_key(server, "developer")
    ask = eas.ListServicesRequest()

    unknown = refused(
        lambda: sdk(server, {**dev, "AccessKeyId": "OEAKNOSUCHKEY"}).list_services(ask)
    )
    assert (unknown.status_code, unknown.code) == (401, "InvalidAccessKeyId.NotFound")
    wrong = refused(lambda: sdk(server, {**dev, "AccessKeySecret": "x" * 40}).list_services(ask))
    assert wrong.code == "SignatureDoesNotMatch"
    roa = refused(
        lambda: sdk(
            server, {**dev, "AccessKeySecret": "x"}, signature_algorithm="v2"
        ).list_services(ask)
    )
    assert roa.code == "SignatureDoesNotMatch"
    bearer = refused(lambda: sdk(server, type="bearer", bearer_token="nope").list_services(ask))
    assert bearer.code == "InvalidBearerToken"

    with monkeypatch.context() as m:  # a clock 20 minutes behind
        m.setattr(
            Utils,
            "get_timestamp",
            lambda: time.strftime(signing.DATE_FORMAT, time.gmtime(time.time() - 1200)),
        )
        skewed = refused(lambda: sdk(server, dev).list_services(ask))
    assert (skewed.status_code, skewed.code) == (401, "InvalidTimeStamp.Expired")

    with monkeypatch.context() as m:  # one nonce, twice
        m.setattr(Utils, "get_nonce", lambda: "the-same-nonce")
        sdk(server, dev).list_services(ask)
        again = refused(lambda: sdk(server, dev).list_services(ask))
    assert again.code == "SignatureNonceUsed"

    # A request changed after signing: its body, its path, a signed header.
    body = json.dumps(seed_spec()).encode()
    signed = signing.acs3_headers(
        dev["AccessKeyId"], dev["AccessKeySecret"], "POST", f"127.0.0.1:{server.port}",
        "/api/v2/services", {}, body, content_type="application/json",
    )  # fmt: skip
    with httpx.Client(base_url=server.url) as c:
        for path, content, headers in (
            ("/api/v2/services", body.replace(b"triton_test", b"triton_evil"), signed),
            ("/api/v2/services?Develop=true", body, signed),
            ("/api/v2/services", body, {**signed, "content-type": "text/plain"}),
        ):
            answer = c.post(path, content=content, headers=headers)
            assert (answer.status_code, answer.json()["Code"]) == (401, "SignatureDoesNotMatch")
            assert dev["AccessKeySecret"] not in answer.text
        assert c.post("/api/v2/services", content=body, headers=signed).status_code == 200
        odd = {**signed, "authorization": signed["authorization"][:-2].encode() + b"\xe9\xe9"}
        latin = {"authorization": f"acs {dev['AccessKeyId']}:\xe9".encode("latin-1")}
        odd_headers: tuple[dict[str, Any], ...] = (odd, latin)
        for headers in odd_headers:
            answer = c.post("/api/v2/services", content=body, headers=headers)
            assert (answer.status_code, answer.json()["Code"]) == (401, "SignatureDoesNotMatch")
        for header in ("ACS3-HMAC-SHA256 Credential=x", "acs nocolon", "Basic abc"):
            answer = c.get("/api/v2/services", headers={"authorization": header})
            assert answer.status_code in (400, 401), header
            assert answer.json()["Code"] in ("IncompleteSignature", "MissingAuthorization")
    assert [e["Status"] for e in audit(server, principal=dev["AccessKeyId"])].count(401) == 9
    logged = caplog.text
    assert dev["AccessKeySecret"] not in logged and signed["authorization"][-64:] not in logged


@pytest.fixture
def two_replicas(settings: Settings) -> Iterator[tuple[LiveServer, LiveServer]]:
    engine = make_engine(settings.sqlalchemy_url)
    a, b = LiveServer(create_app(settings, engine)), LiveServer(create_app(settings, engine))
    yield a, b
    a.stop()
    b.stop()
    engine.dispose()


def test_a_revoked_key_is_refused_by_every_replica_within_a_second(
    two_replicas: tuple[LiveServer, LiveServer],
) -> None:
    a, b = two_replicas
    viewer = new_key(a, "viewer")
    ask = eas.ListServicesRequest()
    assert sdk(b, viewer).list_services(ask).status_code == 200  # b now holds the key
    with admin_http(a) as c:
        gone = c.delete(f"/api/v2/accesskeys/{viewer['AccessKeyId']}")
        assert gone.status_code == 200
        revoked = time.monotonic()
        listed = c.get("/api/v2/accesskeys").json()["AccessKeys"]
        assert viewer["AccessKeyId"] not in [k["AccessKeyId"] for k in listed]
        assert "AccessKeySecret" not in json.dumps(listed)
    while True:
        try:
            sdk(b, viewer).list_services(ask)
        except ClientException as e:
            assert e.code == "InvalidAccessKeyId.NotFound"
            break
        assert time.monotonic() - revoked < 1.0, "replica b still accepts the revoked key"
        time.sleep(0.05)
    assert time.monotonic() - revoked < 1.0


def test_errors_carry_the_fields_the_sdk_reads(server: LiveServer) -> None:
    admin = sdk(server, type="bearer", bearer_token=ADMIN)
    missing = refused(lambda: admin.describe_service("local", "no_such_service"))
    assert (missing.status_code, missing.code) == (404, "InvalidService.NotFound")
    assert "no_such_service" in missing.message
    bad = refused(lambda: admin.create_service(eas.CreateServiceRequest(body='{"name": 1}')))
    assert (bad.status_code, bad.code) == (422, "InvalidParameter")
    with httpx.Client(base_url=server.url) as c:
        answer = c.get("/api/v2/services")
    body = answer.json()
    assert (answer.status_code, body["Code"], body["status"]) == (401, "MissingAuthorization", 401)
    assert body["RequestId"] == answer.headers["x-acs-request-id"]
    assert body["Message"] == body["detail"]
