"""REST API of the control plane, on SQLite and PostgreSQL."""

from __future__ import annotations

import json
import logging
import threading
import time
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import event
from sqlalchemy.orm import Session
from sqlalchemy.orm.exc import StaleDataError

from contract.wire import token_digest
from controlplane.store import changes, service_watch
from tests.controlplane.conftest import ADMIN, seed_spec

SVC = "/api/v2/services/local/triton_test"


def create(client: TestClient, **changes: Any) -> dict[str, Any]:
    r = client.post("/api/v2/services", json=seed_spec(**changes))
    assert r.status_code == 200, r.text
    body: dict[str, Any] = r.json()
    return body


def errors_of(r: Any) -> dict[str, str]:
    assert r.headers["content-type"] == "application/problem+json"
    return {e["field"]: e["message"] + " | " + e["fix"] for e in r.json()["errors"]}


def test_create_answers_endpoints_and_token_and_stores_the_spec(client: TestClient) -> None:
    body = create(client)
    assert body["ServiceName"] == "triton_test"
    assert body["InternetEndpoint"] == "http://gateway.example:8080/api/predict/triton_test"
    assert body["IntranetEndpoint"] == (
        "http://openeas-gateway.openeas.svc.cluster.local/api/predict/triton_test"
    )
    assert len(body["Token"]) >= 32 and body["Status"] == "Creating" and body["RequestId"]

    desc = client.get(SVC).json()
    assert desc["Generation"] == 1 and desc["ObservedGeneration"] == 0
    assert json.loads(desc["ServiceConfig"])["processor_params"][0].startswith(
        "--model-repository=oss://"
    )
    assert desc["TotalInstance"] == 1 and desc["PendingInstance"] == 1
    # Describe shows the token to the admin, as EAS does (AccessToken); a list never does.
    assert client.get(SVC).json()["AccessToken"] == body["Token"]
    assert body["Token"] not in client.get("/api/v2/services").text
    assert client.get(SVC + "/token").json()["Token"] == body["Token"]
    events = client.get(SVC + "/events").json()["Events"]
    assert [e["Reason"] for e in events] == ["Created"]


def test_custom_token_is_kept_out_of_the_stored_spec(client: TestClient) -> None:
    create(client, token="my-own-token-0123456789")
    desc = client.get(SVC).json()
    assert "token" not in json.loads(desc["ServiceConfig"])
    assert client.get(SVC + "/token").json()["Token"] == "my-own-token-0123456789"


def test_a_token_in_use_is_a_conflict_naming_the_field(client: TestClient) -> None:
    """Tokens are unique per cluster (the gateway's gRPC door selects by token): on create,
    on a spec update, and whoever set the first one (a custom or a generated token)."""
    generated = create(client)["Token"]
    r = client.post("/api/v2/services", json=seed_spec(name="other", token=generated))
    assert r.status_code == 409, r.text
    assert r.json()["title"] == "Token already in use"
    assert "unique per cluster" in errors_of(r)["token"]
    assert client.get("/api/v2/services/local/other").status_code == 404  # nothing written
    create(client, name="other", token="custom-token-0123456789")
    r = client.put(SVC, json={"token": "custom-token-0123456789"})
    assert r.status_code == 409 and "token" in errors_of(r)
    assert client.get(SVC + "/token").json()["Token"] == generated  # unchanged
    same = client.put("/api/v2/services/local/other", json={"token": "custom-token-0123456789"})
    assert same.status_code == 200, same.text  # its own token again is no clash


def test_duplicate_name_is_a_conflict(client: TestClient) -> None:
    create(client)
    r = client.post("/api/v2/services", json=seed_spec())
    assert r.status_code == 409
    assert "already exists" in r.json()["detail"]


@pytest.mark.parametrize(
    ("changes", "field", "words"),
    [
        ({"name": "Triton-Test"}, "name", "'triton_test'"),
        ({"name": "x" * 64}, "name", "1-63"),
        ({"name": "bad_"}, "name", "not ending"),
        ({"metadata": {"instance": "1"}}, "metadata.instance", "whole number"),
        ({"metadata": {"instance": 101}}, "metadata.instance", "100"),
        ({"metadata": {"gpu": -1}}, "metadata.gpu", "greater than or equal to 0"),
        ({"metadata": {"memory": 10, "cpu": 1}}, "metadata.memory", "64"),
        ({"metadata": {"gpu_memory": 10}}, "metadata.gpu_memory", "allowed here: instance"),
        ({"metadata": {"rpc": {"keepalive": 0}}}, "metadata.rpc.keepalive", "greater than"),
        ({"extra": 1}, "extra", "remove it"),
        ({"processor": "tensorflow"}, "processor", "triton"),
        ({"processor_params": "--x"}, "processor_params", "use a list"),
        ({"token": "short"}, "token", "16-128"),
        ({"warm_up_data_path": "warm-up/"}, "warm_up_data_path", "is relative"),
        ({"warm_up_data_path": "https://h/x"}, "warm_up_data_path", "use oss://<bucket>"),
        ({"warm_up_data_path": "oss://B/x"}, "warm_up_data_path", "<model>/<n>.json"),
        ({"warm_up_data_path": "oss://b-1/w/m.json"}, "warm_up_data_path", "give the folder"),
    ],
)
def test_bad_specs_name_the_field_and_the_fix_and_store_nothing(
    client: TestClient, changes: dict[str, Any], field: str, words: str
) -> None:
    r = client.post("/api/v2/services", json=seed_spec(**changes))
    assert r.status_code == 422, r.text
    errors = errors_of(r)
    assert field in errors, errors
    assert words in errors[field]
    assert client.get("/api/v2/services").json()["TotalCount"] == 0


def test_warm_up_data_path_is_kept_and_shown(client: TestClient) -> None:
    r = client.post(
        "/api/v2/services", json=seed_spec(warm_up_data_path="oss://triton-model-repo/warm-up")
    )
    assert r.status_code == 200, r.text
    desc = client.get(SVC).json()
    assert (
        json.loads(desc["ServiceConfig"])["warm_up_data_path"] == "oss://triton-model-repo/warm-up"
    )


def test_missing_name_and_processor_are_reported_together(client: TestClient) -> None:
    r = client.post("/api/v2/services", json={"metadata": {}})
    assert set(errors_of(r)) == {"name", "processor"}


def test_pasted_en_dash_flag_is_refused_with_the_right_spelling(client: TestClient) -> None:
    r = client.post(
        "/api/v2/services",
        json=seed_spec(processor_params=["–model-repository=oss://triton-model-repo/models"]),
    )
    assert r.status_code == 422
    (field, text), *_ = errors_of(r).items()
    assert field == "processor_params[0]"
    assert "--model-repository=oss://triton-model-repo/models" in text


def test_malformed_json_names_line_and_column(client: TestClient) -> None:
    r = client.post("/api/v2/services", content=b'{\n "name": "a"\n')
    assert r.status_code == 400
    assert r.headers["content-type"] == "application/problem+json"
    assert "request body:3:1: Expecting ',' delimiter" in r.json()["detail"]
    assert r.json()["errors"][0] | {"message": ""} == {
        "field": "line 3 column 1",
        "line": 3,
        "column": 1,
        "message": "",
        "fix": "",
    }


@pytest.mark.parametrize("header", [None, "Bearer wrong", "admin-token-for-tests-0123456789"])
def test_admin_credential_is_required(client: TestClient, header: str | None) -> None:
    headers = {"Authorization": header} if header else {}
    client.headers.pop("Authorization")
    r = client.get("/api/v2/services", headers=headers)
    assert r.status_code == 401
    assert r.headers["www-authenticate"] == "Bearer"
    assert r.headers["content-type"] == "application/problem+json"


def test_list_pages_filters_and_sorts(client: TestClient) -> None:
    for name in ("alpha", "beta", "gamma_one", "gamma_two"):
        create(client, name=name)
    client.put("/api/v2/services/local/beta/stop")
    page = client.get("/api/v2/services", params={"pageSize": 3, "sort": "name", "order": "asc"})
    assert [s["ServiceName"] for s in page.json()["Services"]] == ["alpha", "beta", "gamma_one"]
    assert page.json()["TotalCount"] == 4
    page2 = client.get(
        "/api/v2/services", params={"pageSize": 3, "pageNumber": 2, "sort": "name", "order": "asc"}
    )
    assert [s["ServiceName"] for s in page2.json()["Services"]] == ["gamma_two"]
    by_name = client.get("/api/v2/services", params={"name": "gamma", "sort": "name"})
    assert [s["ServiceName"] for s in by_name.json()["Services"]] == ["gamma_two", "gamma_one"]
    stopping = client.get("/api/v2/services", params={"status": "Stopping"}).json()
    assert [s["ServiceName"] for s in stopping["Services"]] == ["beta"]
    assert client.get("/api/v2/services", params={"pageSize": 1000}).status_code == 422


@pytest.mark.parametrize(("sort", "order"), [("createTime", "desc"), ("name", "asc")])
def test_page_tokens_are_stable_while_services_are_created(
    client: TestClient, sort: str, order: str
) -> None:
    """Keyset paging: every service present when the listing started is seen exactly once,
    though new ones arrive between pages (offset paging would repeat or skip some)."""
    first = [f"svc_{i:02d}" for i in range(23)]
    for name in first:
        create(client, name=name)
    seen: list[str] = []
    params: dict[str, Any] = {"pageSize": 5, "sort": sort, "order": order}
    for page in range(20):
        body = client.get("/api/v2/services", params=params).json()
        seen += [s["ServiceName"] for s in body["Services"]]
        create(client, name=f"new_{page:02d}")  # created while the client pages
        create(client, name=f"a_new_{page:02d}")  # sorts before every first one by name
        if body["NextPageToken"] is None:
            break
        params["pageToken"] = body["NextPageToken"]
    original = [n for n in seen if n.startswith("svc_")]
    assert sorted(original) == first and len(original) == len(set(original))
    if order == "desc":
        assert seen == [n for n in seen if n.startswith("svc_")]  # newer ones sort before


def test_a_bad_page_token_is_a_4xx_naming_it(client: TestClient) -> None:
    create(client, name="a")
    create(client, name="b")
    token = client.get("/api/v2/services", params={"pageSize": 1}).json()["NextPageToken"]
    assert token
    other = client.get("/api/v2/services", params={"pageToken": token, "sort": "name"})
    assert other.status_code == 422 and "sort=createTime" in errors_of(other)["pageToken"]
    junk = client.get("/api/v2/services", params={"pageToken": "not-a-token"})
    assert junk.status_code == 422 and "previous page" in errors_of(junk)["pageToken"]


def test_update_merges_bumps_generation_and_checks_if_match(client: TestClient) -> None:
    create(client)
    version = client.get(SVC).json()["ResourceVersion"]
    r = client.put(SVC, json={"metadata": {"instance": 2}}, headers={"If-Match": f'"{version}"'})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["Generation"] == 2
    assert json.loads(body["ServiceConfig"])["metadata"] == {
        "instance": 2,
        "cpu": 4,
        "gpu": 1,
        "memory": 10000,
        "resource": "eas-r-1",
        "rpc": {},
    }
    stale = client.put(SVC, json={"metadata": {"cpu": 2}}, headers={"If-Match": f'"{version}"'})
    assert stale.status_code == 412
    same = client.put(SVC, json={"metadata": {"instance": 2}})
    assert same.json()["Generation"] == 2  # an unchanged spec is not a new generation
    bad = client.put(SVC, json={"metadata": {"instance": -1}})
    assert bad.status_code == 422 and "metadata.instance" in errors_of(bad)
    assert json.loads(client.get(SVC).json()["ServiceConfig"])["metadata"]["instance"] == 2
    renamed = client.put(SVC, json={"name": "other"})
    assert renamed.status_code == 422 and "name" in errors_of(renamed)


def test_concurrent_updates_lose_no_write(client: TestClient) -> None:
    create(client)
    failures: list[str] = []

    def bump(field: str, values: range) -> None:
        for v in values:
            r = client.put(SVC, json={"metadata": {field: v}})
            if r.status_code != 200:
                failures.append(r.text)

    threads = [
        threading.Thread(target=bump, args=("cpu", range(1, 9))),
        threading.Thread(target=bump, args=("memory", range(1000, 1008))),
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not failures
    desc = client.get(SVC).json()
    assert json.loads(desc["ServiceConfig"])["metadata"]["cpu"] == 8
    assert json.loads(desc["ServiceConfig"])["metadata"]["memory"] == 1007
    assert desc["Generation"] == 17


def test_racing_conditional_updates_one_wins(client: TestClient) -> None:
    """Writers that read the same ResourceVersion race: exactly one write lands (200), the
    others are told the service changed (412); the spec moved exactly one generation."""
    create(client)
    version = client.get(SVC).json()["ResourceVersion"]
    writers = 4
    start = threading.Barrier(writers)
    codes: list[int] = []

    def write(cpu: int) -> None:  # cpu differs from the seed's: no write is a no-op
        start.wait()
        r = client.put(SVC, json={"metadata": {"cpu": cpu}}, headers={"If-Match": f'"{version}"'})
        codes.append(r.status_code)

    threads = [threading.Thread(target=write, args=(cpu,)) for cpu in range(10, 10 + writers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(codes) == [200] + [412] * (writers - 1)
    desc = client.get(SVC).json()
    assert desc["Generation"] == 2 and desc["ResourceVersion"] == version + 1


def test_if_match_star_means_any_version(client: TestClient) -> None:
    """``If-Match: *`` (RFC 9110: any current representation) makes the write unconditional
    on the version; the service must still exist."""
    create(client)
    r = client.put(SVC, json={"metadata": {"cpu": 2}}, headers={"If-Match": "*"})
    assert r.status_code == 200, r.text
    assert json.loads(r.json()["ServiceConfig"])["metadata"]["cpu"] == 2
    missing = client.put(
        "/api/v2/services/local/nothing_here",
        json={"metadata": {"cpu": 2}},
        headers={"If-Match": "*"},
    )
    assert missing.status_code == 404
    bad = client.put(SVC, json={"metadata": {"cpu": 3}}, headers={"If-Match": "version-7"})
    assert bad.status_code == 422 and "If-Match" in errors_of(bad)


def test_a_write_that_keeps_meeting_newer_versions_gives_up_with_409(
    client: TestClient,
) -> None:
    """Every attempt to store finds that another writer got there first (StaleDataError,
    raised here at each flush of a service): after its bounded retries the API answers 409
    and the stored spec is unchanged."""
    attempts: list[int] = []

    def stale(session: Session, *_: Any) -> None:
        if any(getattr(o, "__tablename__", "") == "services" for o in session.dirty):
            attempts.append(1)
            raise StaleDataError("another writer changed the service")

    create(client)
    before = client.get(SVC).json()
    event.listen(Session, "before_flush", stale)
    try:
        r = client.put(SVC, json={"metadata": {"cpu": 2}})
    finally:
        event.remove(Session, "before_flush", stale)
    assert r.status_code == 409, r.text
    assert r.headers["content-type"] == "application/problem+json"
    assert "concurrently" in r.json()["detail"]
    assert len(attempts) > 1  # retried, and bounded (the request returned)
    after = client.get(SVC).json()
    assert (after["Generation"], after["ResourceVersion"]) == (
        before["Generation"],
        before["ResourceVersion"],
    )


def test_tokens_never_reach_a_log(client: TestClient, caplog: pytest.LogCaptureFixture) -> None:
    """Every log record of a service's life, at DEBUG, names neither its tokens nor the
    admin credential (nor a wrong token a caller sent)."""
    caplog.set_level(logging.DEBUG)
    first = create(client, token="my-own-token-0123456789")["Token"]
    client.get(SVC)
    client.put(SVC, json={"metadata": {"cpu": 2}})
    rotated = client.post(SVC + "/token").json()["Token"]
    assert rotated != first and client.get(SVC + "/token").json()["Token"] == rotated
    client.get(SVC, headers={"Authorization": "Bearer wrong-admin-token-0123456789"})
    client.delete(SVC)
    assert caplog.records, "nothing was logged: the check would prove nothing"
    text = caplog.text + "".join(str(r.args) for r in caplog.records)
    for secret in (first, rotated, ADMIN, "wrong-admin-token-0123456789"):
        assert secret not in text


def test_stop_start_scale_rotate_delete(client: TestClient) -> None:
    first = create(client)["Token"]
    stopped = client.put(SVC + "/stop").json()
    assert stopped["Stopped"] is True and stopped["Status"] == "Stopping"
    started = client.put(SVC + "/start").json()
    assert started["Stopped"] is False and started["Generation"] == 3

    scaled = client.put(SVC + "/scale", json={"Instance": 3}).json()
    assert json.loads(scaled["ServiceConfig"])["metadata"]["instance"] == 3
    assert client.put(SVC + "/scale", json={"Instance": "3"}).status_code == 422
    assert client.put(SVC + "/scale", json={"instances": 3}).status_code == 422

    rotated = client.post(SVC + "/token").json()["Token"]
    assert rotated != first
    assert client.get(SVC + "/token").json()["Token"] == rotated

    deleting = client.delete(SVC).json()
    assert deleting["Status"] == "Deleting"
    assert client.put(SVC + "/scale", json={"Instance": 1}).status_code == 409
    reasons = [e["Reason"] for e in client.get(SVC + "/events").json()["Events"]]
    assert reasons == ["Created", "Stopping", "Starting", "Scaled", "TokenRotated", "Deleting"]


class Poll(threading.Thread):
    """A long-poll of the service in the background: its answer and how long it took."""

    def __init__(self, client: TestClient, state: str, wait: float) -> None:
        super().__init__()
        self.client, self.params = client, {"after": state, "wait": wait}
        self.answer: Any = None
        self.took = 0.0
        self.start()

    def run(self) -> None:
        started = time.monotonic()
        self.answer = self.client.get(SVC, params=self.params)
        self.took = time.monotonic() - started


@pytest.mark.parametrize("signal", ["this process's commit", "another process's commit"])
def test_describe_long_polls_until_the_service_changes(
    client: TestClient, monkeypatch: pytest.MonkeyPatch, signal: str
) -> None:
    """``?after=<X-OpenEAS-State>&wait=s`` answers when the service changes: at once on a
    commit in this process, within a re-read for one made elsewhere (fire disabled)."""
    if signal == "this process's commit":
        monkeypatch.setattr(service_watch, "REREAD_S", 60.0)  # only the commit can wake it
    else:
        monkeypatch.setattr(changes.SERVICES, "fire", lambda: None)
    create(client)
    state = client.get(SVC).headers["X-OpenEAS-State"]
    started = time.monotonic()
    same = client.get(SVC, params={"after": state, "wait": 0.3})
    assert time.monotonic() - started >= 0.3  # nothing changed: the whole wait
    assert same.status_code == 200 and same.headers["X-OpenEAS-State"] == state
    poll = Poll(client, state, wait=20)
    time.sleep(0.3)
    assert poll.is_alive()  # waiting
    assert client.put(SVC + "/scale", json={"Instance": 3}).status_code == 200
    poll.join(10)
    assert not poll.is_alive() and poll.answer.status_code == 200
    assert json.loads(poll.answer.json()["ServiceConfig"])["metadata"]["instance"] == 3
    assert poll.answer.headers["X-OpenEAS-State"] != state
    # a state it no longer has answers at once
    again = client.get(SVC, params={"after": state, "wait": 20}).json()
    assert json.loads(again["ServiceConfig"])["metadata"]["instance"] == 3


def test_a_bad_wait_is_a_4xx_naming_it(client: TestClient) -> None:
    create(client)
    for wait in ("-1", "31", "soon"):
        r = client.get(SVC, params={"after": "x", "wait": wait})
        assert r.status_code == 422 and "wait" in r.text, r.text


def test_unknown_service_and_cluster_are_404(client: TestClient) -> None:
    assert client.get("/api/v2/services/local/nope").status_code == 404
    create(client)
    r = client.get("/api/v2/services/cn-shanghai/triton_test")
    assert r.status_code == 404 and "'local'" in r.json()["detail"]


def test_token_digest_is_what_a_gateway_would_check(client: TestClient) -> None:
    token = create(client)["Token"]
    assert token_digest(token) != token and len(token_digest(token)) == 64


def test_health_ready_and_openapi(client: TestClient) -> None:
    assert client.get("/healthz").json() == {"status": "ok"}
    assert client.get("/readyz").json()["status"] == "ready"
    schema = client.get("/openapi.json").json()
    assert "ServiceSpec" in schema["components"]["schemas"]
    assert "/api/v2/services/{cluster}/{name}/scale" in schema["paths"]


def test_unknown_resource_group_is_a_4xx_on_kubernetes(settings: Any) -> None:
    from controlplane.api.app import create_app
    from controlplane.runtime.kubernetes.settings import KubernetesSettings, ResourceGroup
    from controlplane.store.db import make_engine

    k8s = KubernetesSettings(
        resource_groups={"eas-r-gpu": ResourceGroup(node_selector={"gpu": "a10"})}
    )
    on_k8s = settings.model_copy(update={"runtime": "kubernetes", "k8s": k8s})
    engine = make_engine(on_k8s.sqlalchemy_url)
    with TestClient(create_app(on_k8s, engine)) as c:
        c.headers["Authorization"] = f"Bearer {on_k8s.admin_token}"
        r = c.post("/api/v2/services", json=seed_spec())  # resource "eas-r-1"
        assert r.status_code == 422
        assert "eas-r-gpu" in errors_of(r)["metadata.resource"]
        ok = seed_spec(metadata={"resource": "eas-r-gpu"})
        assert c.post("/api/v2/services", json=ok).status_code == 200
    engine.dispose()
