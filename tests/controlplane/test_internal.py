"""The internal endpoints: the gateway's route table (long-poll) and replica logs."""

from __future__ import annotations

import threading
import time

import pytest
from fastapi.testclient import TestClient

from contract.wire import ROUTES_PATH, SIGNALS_PATH, WAKE_PATH, RouteTable, token_digest
from controlplane.settings import Settings
from tests.controlplane.conftest import seed_spec


def test_route_table_long_poll(client: TestClient) -> None:
    first = RouteTable.model_validate(client.get(ROUTES_PATH).json())
    assert first.routes == []
    started = time.monotonic()
    unchanged = client.get(ROUTES_PATH, params={"after": first.version, "wait": 0.5})
    assert unchanged.status_code == 204
    assert time.monotonic() - started >= 0.45

    token = client.post("/api/v2/services", json=seed_spec()).json()["Token"]
    table = RouteTable.model_validate(
        client.get(ROUTES_PATH, params={"after": first.version, "wait": 5}).json()
    )
    assert table.version > first.version
    (route,) = table.routes
    assert route.service == "triton_test" and route.endpoints == []
    assert route.token_sha256 == token_digest(token)
    assert route.token == token  # the key of EAS-signed calls, opened from its seal
    assert token not in repr(route)

    new = client.post("/api/v2/services/local/triton_test/token").json()["Token"]  # routing
    rotated = RouteTable.model_validate(client.get(ROUTES_PATH).json())
    assert rotated.version > table.version
    assert rotated.routes[0].token_sha256 == token_digest(new) != route.token_sha256
    assert rotated.routes[0].token == new


def test_route_timeouts_come_from_the_spec_or_the_default(client: TestClient) -> None:
    client.post("/api/v2/services", json=seed_spec(name="a"))
    client.post(
        "/api/v2/services",
        json=seed_spec(name="b", metadata={"rpc": {"keepalive": 5000, "rate_limit": 20}}),
    )
    routes = {r["service"]: r for r in client.get(ROUTES_PATH).json()["routes"]}
    assert routes["a"]["timeout_ms"] == 600_000 and routes["a"]["rate_limit"] is None
    assert routes["b"]["timeout_ms"] == 5000 and routes["b"]["rate_limit"] == 20


def test_internal_endpoints_need_the_admin_token(client: TestClient) -> None:
    client.headers.pop("Authorization")
    assert client.get(ROUTES_PATH).status_code == 401
    assert client.get("/api/v2/services/local/x/logs").status_code == 401


def test_logs_are_served_by_a_control_plane_that_does_not_reconcile(
    client: TestClient, settings: Settings
) -> None:
    """The ``client`` app runs no reconciler (like a non-leading replica): it reads the logs
    the runtime's replicas write, from the data dir they share."""
    client.post("/api/v2/services", json=seed_spec())
    folder = settings.data_dir / "logs" / "triton_test"
    folder.mkdir(parents=True)
    (folder / "0.log").write_text("old replica\n")
    (folder / "1.log").write_text("".join(f"line {i}\n" for i in range(5)))
    r = client.get("/api/v2/services/local/triton_test/logs", params={"tail": 2})
    assert (r.status_code, r.text) == (200, "line 3\nline 4\n")
    r = client.get("/api/v2/services/local/triton_test/logs", params={"replica": 0})
    assert r.text == "old replica\n"
    assert client.get("/api/v2/services/local/triton_test/logs?replica=7").status_code == 404
    assert client.get("/api/v2/services/local/nope/logs").status_code == 404


def test_logs_on_an_unreachable_cluster_are_a_clear_503(settings: Settings) -> None:
    from controlplane.api.app import create_app
    from controlplane.runtime.kubernetes.settings import KubernetesSettings
    from controlplane.store.db import make_engine

    k8s = KubernetesSettings(kubeconfig=str(settings.data_dir / "no-such-kubeconfig"))
    on_k8s = settings.model_copy(update={"runtime": "kubernetes", "k8s": k8s})
    engine = make_engine(on_k8s.sqlalchemy_url)
    with TestClient(create_app(on_k8s, engine)) as c:  # starts: logs connect on first use
        c.headers["Authorization"] = f"Bearer {on_k8s.admin_token}"
        c.post("/api/v2/services", json=seed_spec(metadata={"resource": None}))
        r = c.get("/api/v2/services/local/triton_test/logs")
        assert r.status_code == 503
        assert r.json()["detail"].startswith("replica logs are unavailable: ")
        assert "no-such-kubeconfig" in r.json()["detail"]
    engine.dispose()


def test_a_commit_in_this_process_wakes_the_long_poll(
    client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    from controlplane.api import internal

    monkeypatch.setattr(internal, "POLL_SECONDS", 30.0)  # only the wake-up can answer in time
    first = client.get(ROUTES_PATH).json()["version"]
    answers: list[int] = []
    poll = threading.Thread(
        target=lambda: answers.append(
            client.get(ROUTES_PATH, params={"after": first, "wait": 20}).status_code
        )
    )
    poll.start()
    time.sleep(0.3)  # the poll is waiting
    client.post("/api/v2/services", json=seed_spec())
    poll.join(5)
    assert answers == [200]


def test_the_routes_token_opens_the_route_table_and_nothing_else(settings: Settings) -> None:
    """Exactly the gateway's three calls: the route table, load reports and wake-ups."""
    from controlplane.api.app import create_app
    from controlplane.store.db import make_engine

    routes_token = "routes-reader-token-0123456789"
    scoped = settings.model_copy(update={"routes_token": routes_token})
    engine = make_engine(scoped.sqlalchemy_url)
    with TestClient(create_app(scoped, engine)) as c:
        admin = {"Authorization": f"Bearer {scoped.admin_token}"}
        reader = {"Authorization": f"Bearer {routes_token}"}
        assert c.post("/api/v2/services", json=seed_spec(), headers=admin).status_code == 200
        assert c.get(ROUTES_PATH, headers=reader).status_code == 200
        assert c.get(ROUTES_PATH, headers=admin).status_code == 200  # the admin still may
        # Authenticated (no leader in this app, so 421, not 401):
        report = {"reporter": "r1", "interval_s": 1.0, "services": []}
        assert c.post(SIGNALS_PATH, json=report, headers=reader).status_code == 421
        wake = {"service": "triton_test"}
        assert c.post(WAKE_PATH, json=wake, headers=reader).status_code == 421
        for method, path in (
            ("GET", "/api/v2/services"),
            ("GET", "/api/v2/services/local/triton_test/token"),
            ("GET", "/api/v2/services/local/triton_test/logs"),
            ("DELETE", "/api/v2/services/local/triton_test"),
            ("GET", "/api/v2/groups"),
            ("PUT", "/api/v2/services/local/triton_test/scale"),
            ("PUT", "/api/v2/services/local/triton_test/autoscaler"),
            ("PUT", "/api/v2/services/local/triton_test/start"),
        ):
            # Known, so not 401, but short of the right: 403 with the code the SDK shows.
            answer = c.request(method, path, headers=reader)
            assert (answer.status_code, answer.json()["Code"]) == (403, "Forbidden"), path
    engine.dispose()
