"""What the console needs from the control plane: its files (self-contained, under a strict
CSP), the blog's JSON answered with eascmd's diagnostics and a corrected text, and a
service's last hour fed by gateway load reports through the internal API."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from contract.configfile import ConfigFileError, read_config
from contract.wire import SIGNALS_PATH
from controlplane.elasticity.scaling_loop import Autoscaling
from controlplane.settings import Settings
from controlplane.store.db import make_engine, make_sessions
from controlplane.store.sealing import from_settings
from controlplane.store.services import Services
from tests.controlplane.conftest import seed_spec

SEED = Path(__file__).resolve().parents[1] / "data" / "seed_triton.config"


@pytest.fixture
def scaling(settings: Settings) -> Iterator[Autoscaling]:
    engine = make_engine(settings.sqlalchemy_url)
    sessions = make_sessions(engine)
    sealer = from_settings(settings.secret_key, settings.data_dir)
    yield Autoscaling(sessions, Services(sessions, settings.cluster_id, sealer))
    engine.dispose()


@pytest.fixture
def autoscaling(scaling: Autoscaling) -> Autoscaling:
    """The API's (tests.controlplane.conftest's ``client`` serves with it)."""
    return scaling


def test_the_console_is_three_files_of_its_own_under_a_strict_policy(client: TestClient) -> None:
    page = client.get("/", headers={"Authorization": ""})  # the page itself is public
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    policy = page.headers["content-security-policy"]
    assert "default-src 'none'" in policy and "script-src 'self'" in policy
    assert "unsafe" not in policy  # no inline script or style anywhere
    linked = re.findall(r'(?:src|href)="(/console/[^"]+)"', page.text)
    assert sorted(linked) == ["/console/console.css", "/console/console.js"]
    for path in linked:
        asset = client.get(path, headers={"Authorization": ""})
        assert asset.status_code == 200 and asset.headers["content-security-policy"] == policy
        # Nothing from elsewhere: the platform runs offline (the SVG namespace is a name).
        urls = set(re.findall(r"https?://[^\s\"'`)]+", asset.text))
        assert urls <= {"http://www.w3.org/2000/svg"}, urls
    assert "<script>" not in page.text and "style=" not in page.text
    js = client.get("/console/console.js").text
    assert "innerHTML" not in js  # data goes in as text only
    assert "sessionStorage" in js and "localStorage" not in js and "document.cookie" not in js
    assert client.get("/console/..%2fapi%2fapp.py").status_code == 404
    assert client.get("/console/app.py").status_code == 404


def test_the_blogs_json_gets_eascmds_diagnostics_and_a_corrected_text(
    client: TestClient,
) -> None:
    text = SEED.read_text(encoding="utf-8")
    r = client.post("/api/v2/services", content=text.encode())
    assert r.status_code == 400 and r.headers["content-type"] == "application/problem+json"
    problem = r.json()
    with pytest.raises(ConfigFileError) as cli:
        read_config(str(SEED))
    # The same lines eascmd prints, naming the request body instead of the file.
    assert problem["detail"] == str(cli.value).replace(str(SEED), "request body")
    first = problem["errors"][0]
    assert (first["line"], first["column"]) == (2, 1)
    assert first["fix"] == 'should read: "name": "triton_test",'
    dash = next(e for e in problem["errors"] if "dash" in e["message"])
    assert dash["fix"] == 'should read: "--model-repository=oss://triton-model-repo/models",'
    assert any("trailing comma" in e["message"] for e in problem["errors"])
    assert client.get("/api/v2/services").json()["TotalCount"] == 0  # nothing created

    fixed = problem["corrected"]
    assert json.loads(fixed)["processor_params"][0].startswith("--model-repository=")
    created = client.post("/api/v2/services", content=fixed.encode())
    assert created.status_code == 200, created.text
    # Modify answers the same way.
    r = client.put(
        "/api/v2/services/local/triton_test", content="{“metadata”: {“instance”: 2}}".encode()
    )
    assert r.status_code == 400 and r.json()["corrected"] == '{"metadata": {"instance": 2}}'


def test_json_damage_without_a_fix_names_where_and_corrects_nothing(client: TestClient) -> None:
    r = client.post("/api/v2/services", content=b'{"name": "a" "processor": 1}')
    problem = r.json()
    assert r.status_code == 400 and "corrected" not in problem
    assert problem["errors"] == [
        {
            "field": "line 1 column 14",
            "line": 1,
            "column": 14,
            "message": "Expecting ',' delimiter",
            "fix": "",
        }
    ]
    assert client.post("/api/v2/services", content=b"\xff{}").status_code == 400


def service_load(**load: object) -> dict[str, object]:
    return {"service": "triton_test", "requests": 0, "concurrency": 0.0} | load


def report(reporter: str, **load: object) -> dict[str, object]:
    return {
        "reporter": reporter,
        "interval_s": 0.5,
        "services": [service_load(**load)],
        "latency_bounds_s": [0.01, 0.1, 1.0],
    }


def test_load_reports_become_the_service_charts(client: TestClient, scaling: Autoscaling) -> None:
    assert client.post("/api/v2/services", json=seed_spec()).status_code == 200
    url = "/api/v2/services/local/triton_test/metrics"
    quiet = client.get(url).json()
    assert quiet["StepSeconds"] == 10 and len(quiet["Points"]) == 360
    assert quiet["Leading"] is False and quiet["Points"][-1]["Replicas"] == 0
    assert {p["RequestsPerSecond"] for p in quiet["Points"]} == {0.0}

    scaling.signals.leading = True  # as while this process's reconciler leads
    for reporter in ("gw-a", "gw-b"):  # two gateway processes, summed
        sent = report(reporter, requests=10, completed=10, errors=1, latency=[0, 10, 0, 0])
        assert client.post(SIGNALS_PATH, json=sent).status_code == 204
    # An older gateway's report (no answered counts or histogram) still parses.
    old = {"reporter": "gw-old", "interval_s": 0.5, "services": [service_load()]}
    assert client.post(SIGNALS_PATH, json=old).status_code == 204

    got = client.get(url, params={"window": 60}).json()
    assert got["Leading"] is True and len(got["Points"]) == 6
    now = got["Points"][-1]
    assert now["RequestsPerSecond"] > 0 and now["ErrorsPerSecond"] > 0
    assert now["LatencyP50Ms"] == pytest.approx(55.0)  # the middle of (10, 100] ms
    assert now["Time"] <= time.time() < now["Time"] + 10 + 5


@pytest.mark.parametrize(
    ("path", "status"),
    [
        ("/api/v2/services/local/nope/metrics", 404),
        ("/api/v2/services/local/triton_test/metrics?window=5", 422),
        ("/api/v2/services/local/triton_test/metrics?window=3610", 422),
    ],
)
def test_metrics_answers_bad_calls_with_a_4xx(client: TestClient, path: str, status: int) -> None:
    client.post("/api/v2/services", json=seed_spec())
    r = client.get(path)
    assert r.status_code == status and r.headers["content-type"] == "application/problem+json"
    assert client.get(path, headers={"Authorization": ""}).status_code == 401


@pytest.mark.parametrize(
    "change",
    [
        {"services": [{"service": "a", "requests": 1, "concurrency": 0, "latency": [-1]}]},
        {"latency_bounds_s": [0.1, float("inf")]},
        {"latency_bounds_s": [0.0]},
        {"services": [{"service": "a", "requests": 1, "concurrency": 0, "errors": -2}]},
    ],
)
def test_a_report_with_impossible_figures_is_refused(
    client: TestClient, scaling: Autoscaling, change: dict[str, object]
) -> None:
    scaling.signals.leading = True
    body = {"reporter": "gw", "interval_s": 0.5, "services": []} | change
    r = client.post(SIGNALS_PATH, content=json.dumps(body).replace("Infinity", "1e999"))
    assert r.status_code == 422, r.text
