"""The console in a real browser (Debian's chromium through Playwright) against a real
control plane: sign-in, the live list, create with the blog's JSON and a clean one, the
service page with its charts, logs and actions, sign-out, and a phone-width layout.

``OPENEAS_SCREENSHOTS=docs/img`` also writes the screenshots the docs show."""

from __future__ import annotations

import json
import math
import os
import re
import time
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Page, expect

from contract.wire import SIGNALS_PATH, LoadReport, ServiceLoad
from controlplane.elasticity.metrics_history import POINTS, STEP_S, MetricsHistory
from testing.waiting import wait_until
from tests.console.conftest import Platform
from tests.controlplane.conftest import ADMIN

SEED = Path(__file__).resolve().parents[1] / "data" / "seed_triton.config"
BOUNDS = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25]


@pytest.fixture(scope="module")
def seeded(platform: Platform) -> Platform:
    platform.create("resnet50_v2", 2)
    platform.create("bert_base", 1)
    platform.create("yolo_edge", 1)
    assert platform.api.put("/api/v2/services/local/yolo_edge/stop").status_code == 200
    wait_until(lambda: platform.status("resnet50_v2") == ("Running", 2), 30, what="running")
    wait_until(lambda: platform.status("yolo_edge")[0] == "Stopped", 30, what="stopped")
    return platform


def shot(page: Page, name: str, tmp_path: Path, **kw: Any) -> None:
    folder = Path(os.environ.get("OPENEAS_SCREENSHOTS", tmp_path))
    folder.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(folder / f"console-{name}.png"), **kw)


def sign_in(page: Page, url: str, token: str = ADMIN) -> None:
    page.goto(url + "/")
    page.get_by_label("Admin token").fill(token)
    page.get_by_role("button", name="Sign in").click()


def test_sign_in_live_list_filters_and_sign_out(
    seeded: Platform, page: Page, tmp_path: Path
) -> None:
    page.goto(seeded.url + "/")  # by keyboard: the field has focus, Enter submits
    page.keyboard.type("not-the-token")
    page.keyboard.press("Enter")
    expect(page.get_by_role("alert")).to_contain_text("not accepted")
    expect(page.get_by_role("heading", name="Sign in")).to_be_visible()

    sign_in(page, seeded.url)
    table = page.locator("table.services")
    row = table.get_by_role("row").filter(has_text="resnet50_v2")
    expect(row).to_contain_text("Running")
    expect(row).to_contain_text("2 / 2")
    expect(row).to_contain_text("http://gateway.example:8080/api/predict/resnet50_v2")
    expect(table.get_by_role("row").filter(has_text="yolo_edge")).to_contain_text("Stopped")
    assert page.evaluate("sessionStorage.getItem('openeas.admin')") == ADMIN
    assert page.context.cookies() == []  # the token travels as a header only

    seeded.create("whisper_small", 1)  # appears without a reload
    expect(table.get_by_role("row").filter(has_text="whisper_small")).to_contain_text("Running")
    shot(page, "list", tmp_path)

    page.get_by_label("Name").fill("bert")
    expect(table.locator("tbody tr")).to_have_count(1)
    expect(table.locator("tbody tr")).to_contain_text("bert_base")
    page.get_by_label("Name").fill("")
    page.get_by_label("Status").select_option("Stopped")
    expect(table.locator("tbody tr")).to_have_count(1)
    expect(table.locator("tbody tr")).to_contain_text("yolo_edge")
    expect(page.get_by_text("Page 1 of 1 · 1 service(s)")).to_be_visible()

    page.get_by_role("button", name="Sign out").click()
    expect(page.get_by_role("heading", name="Sign in")).to_be_visible()
    assert page.evaluate("sessionStorage.getItem('openeas.admin')") is None
    page.reload()
    expect(page.get_by_role("heading", name="Sign in")).to_be_visible()


def test_create_shows_the_blogs_problems_inline_then_a_clean_one_appears(
    seeded: Platform, page: Page, tmp_path: Path
) -> None:
    sign_in(page, seeded.url)
    page.get_by_role("link", name="Create service").first.click()
    spec = page.get_by_label("Service JSON")
    spec.fill(SEED.read_text(encoding="utf-8"))
    page.get_by_role("button", name="Create", exact=True).click()
    problems = page.locator(".problems")
    expect(problems).to_contain_text("Malformed JSON")
    expect(problems).to_contain_text("line 2 typographic quotes “ ” (columns 1, 6, 9, 21)")
    expect(problems).to_contain_text('should read: "name": "triton_test",')
    expect(problems).to_contain_text('should read: "--model-repository=oss://triton-model-repo')
    expect(problems).to_contain_text("trailing comma")
    shot(page, "create-errors", tmp_path)

    page.get_by_role("button", name="Apply the corrections").click()
    fixed = json.loads(spec.input_value())
    assert fixed["processor_params"][0] == "--model-repository=oss://triton-model-repo/models"

    clean = {
        "name": "console_demo",
        "processor": "triton",
        "processor_params": ["--model-repository=oss://models/demo"],
        "metadata": {"instance": 1, "cpu": 2, "memory": 2000, "bogus": 1},
    }
    spec.fill(json.dumps(clean))
    page.get_by_role("button", name="Create", exact=True).click()
    expect(problems).to_contain_text("metadata.bogus")  # spec problems inline too
    del clean["metadata"]["bogus"]  # type: ignore[attr-defined]
    spec.fill(json.dumps(clean))
    page.get_by_role("button", name="Create", exact=True).click()
    created = page.locator(".created")
    expect(created).to_contain_text("Created console_demo")
    token = seeded.api.get("/api/v2/services/local/console_demo/token").json()["Token"]
    expect(created.locator("code.token")).to_have_text(token)
    snippet = created.locator("pre.snippet")
    expect(snippet).to_contain_text(
        'InferenceServerClient(url="gateway.example:8080/api/predict/console_demo")'
    )
    expect(snippet).to_contain_text(f'"Authorization": "{token}"')

    page.get_by_role("link", name="Services").click()
    row = page.locator("table.services tbody tr").filter(has_text="console_demo")
    expect(row).to_contain_text("Running")


def replay_an_hour(platform: Platform) -> None:
    """An hour of traffic as gateways would have reported it (the history's clock shifted
    back), then the last report through the internal API like a gateway's."""
    now = time.time()
    clock = [now - STEP_S * (POINTS - 1)]
    history = MetricsHistory(clock=lambda: clock[0])
    history.replicas("resnet50_v2", 1)
    for i in range(POINTS - 1):
        wave = 1 + 0.6 * math.sin(i / 25)
        requests = int(400 * wave)
        errors = 12 if 200 < i < 215 else 0
        latency = [0, requests // 3, requests // 3, requests // 4, requests // 12, errors, 0]
        latency[1] += requests - sum(latency)
        load = ServiceLoad(
            service="resnet50_v2",
            requests=requests,
            concurrency=wave * 3,
            completed=requests,
            errors=errors,
            latency=latency,
        )
        history.add(
            LoadReport(reporter="gw", interval_s=10, services=[load], latency_bounds_s=BOUNDS)
        )
        if i == 120:
            history.replicas("resnet50_v2", 2)
        clock[0] += STEP_S
    history._clock = time.time  # from now on, live
    platform.autoscaling.signals.history = history
    report = {
        "reporter": "gw",
        "interval_s": 0.5,
        "latency_bounds_s": BOUNDS,
        "services": [
            {
                "service": "resnet50_v2",
                "requests": 20,
                "concurrency": 2.0,
                "completed": 20,
                "errors": 0,
                "latency": [0, 5, 10, 5, 0, 0, 0],
            }
        ],
    }
    assert platform.api.post(SIGNALS_PATH, json=report).status_code == 204


def test_service_page_charts_replicas_logs_and_scale(
    seeded: Platform, page: Page, tmp_path: Path
) -> None:
    replay_an_hour(seeded)
    sign_in(page, seeded.url)
    page.get_by_role("link", name="resnet50_v2").click()
    expect(page.get_by_role("heading", name="resnet50_v2")).to_be_visible()
    expect(page.locator("#instances")).to_have_text("2 / 2")

    charts = page.locator("figure.chart-box")
    expect(charts).to_have_count(4)
    requests = page.get_by_role("img", name=re.compile(r"^Requests\/s over the last hour"))
    expect(requests.locator("path.line")).to_have_count(1)
    expect(requests).to_have_attribute("aria-label", re.compile(r"latest: [\d.]+$"))
    recent = seeded.api.get("/api/v2/services/local/resnet50_v2/metrics?window=30").json()
    assert any(p["RequestsPerSecond"] > 0 for p in recent["Points"])  # the live report
    latency = page.get_by_role("img", name=re.compile("^Latency"))
    expect(latency.locator("path.line")).to_have_count(2)  # p50 and p99
    replicas = page.get_by_role("img", name=re.compile("^Ready replicas"))
    expect(replicas).to_have_attribute("aria-label", re.compile("latest: 2$"))

    table = page.locator("table").filter(has_text="Restarts")
    expect(table.locator("tbody tr")).to_have_count(2)
    expect(table).to_contain_text("http://10.0.0.7:8000")
    expect(
        page.locator("table").filter(has_text="Reason").locator("tbody tr").first
    ).to_be_visible()
    page.get_by_role("button", name="Show log").click()
    expect(page.get_by_label("replica log")).to_contain_text("successfully loaded")
    page.evaluate("window.scrollTo(0, 0)")
    shot(page, "service", tmp_path)

    page.get_by_label("Instances").fill("3")
    page.get_by_role("button", name="Scale", exact=True).click()
    expect(page.locator("#action-result")).to_contain_text("Scaled to 3")
    expect(page.locator("#instances")).to_have_text("3 / 3")
    assert seeded.status("resnet50_v2") == ("Running", 3)

    page.get_by_role("button", name="Show token").click()
    token = seeded.api.get("/api/v2/services/local/resnet50_v2/token").json()["Token"]
    expect(page.locator("#action-result code.token")).to_have_text(token)


def test_modify_stop_and_delete_with_confirmation(seeded: Platform, page: Page) -> None:
    seeded.create("to_delete", 1)
    sign_in(page, seeded.url)
    page.goto(seeded.url + "/#/services/local/to_delete")
    expect(page.locator("#instances")).to_have_text("1 / 1")

    modify = page.get_by_label(re.compile("^JSON merged into the spec"))
    modify.fill("{“metadata”: {“instance”: 2}}")
    page.get_by_role("button", name="Apply", exact=True).click()
    expect(page.get_by_text('should read: {"metadata": {"instance": 2}}')).to_be_visible()
    page.get_by_role("button", name="Apply the corrections").click()
    page.get_by_role("button", name="Apply", exact=True).click()
    expect(page.locator("#instances")).to_have_text("2 / 2")

    page.get_by_role("button", name="Stop", exact=True).click()
    expect(page.get_by_role("button", name="Start")).to_be_visible()
    wait_until(lambda: seeded.status("to_delete")[0] == "Stopped", 30, what="stopped")

    page.get_by_role("button", name="Delete…").click()
    confirm = page.get_by_label("Type to_delete to confirm")
    confirm.fill("to_delet")
    page.get_by_role("button", name="Delete service").click()
    assert seeded.api.get("/api/v2/services/local/to_delete").status_code == 200
    confirm.fill("to_delete")
    page.get_by_role("button", name="Delete service").click()
    expect(page.get_by_role("heading", name="Services")).to_be_visible()
    wait_until(
        lambda: seeded.api.get("/api/v2/services/local/to_delete").status_code == 404,
        30,
        what="deleted",
    )


def test_autoscaler_and_group_settings(seeded: Platform, page: Page) -> None:
    seeded.api.put("/api/v2/services/local/bert_base", json={"metadata": {"group": "bert"}})
    sign_in(page, seeded.url)
    page.goto(seeded.url + "/#/services/local/bert_base")
    auto = page.get_by_label("Autoscaler (as eascmd autoscale sets it)")
    expect(auto).to_have_value(re.compile('"metricName": "qps"'))  # a template to edit
    page.get_by_role("button", name="Set autoscaler").click()
    expect(page.get_by_text("Autoscaler set.")).to_be_visible()
    got = seeded.api.get("/api/v2/services/local/bert_base/autoscaler").json()
    assert (got["min"], got["max"], got["scaleStrategies"][0]["threshold"]) == (1, 4, 100)
    page.get_by_role("button", name="Remove").click()
    expect(page.get_by_text("Autoscaler removed")).to_be_visible()
    assert seeded.api.get("/api/v2/services/local/bert_base/autoscaler").status_code == 404

    page.get_by_label("Weight (0–1000)").fill("5000")  # the browser keeps it in range
    page.get_by_role("button", name="Save").click()
    assert page.get_by_label("Weight (0–1000)").evaluate("e => e.validity.rangeOverflow")
    page.get_by_label("Weight (0–1000)").fill("250")
    page.get_by_label("Traffic").select_option("grouping")
    page.get_by_role("button", name="Save").click()
    expect(page.get_by_text("Group settings saved.")).to_be_visible()
    spec = json.loads(seeded.api.get("/api/v2/services/local/bert_base").json()["ServiceConfig"])
    assert (spec["metadata"]["weight"], spec["metadata"]["traffic_state"]) == (250, "grouping")


def test_list_pages(seeded: Platform, page: Page) -> None:
    for i in range(21):
        seeded.create(f"page_{i:02d}", 0)
    sign_in(page, seeded.url)
    pager = page.locator(".pager")
    expect(pager).to_contain_text(re.compile(r"Page 1 of 2 · 2\d service\(s\)"))
    expect(page.locator("table.services tbody tr")).to_have_count(20)
    pager.get_by_role("button", name="Next").click()
    expect(pager).to_contain_text("Page 2 of 2")
    expect(pager.get_by_role("button", name="Next")).to_be_disabled()
    pager.get_by_role("button", name="Previous").click()
    expect(pager).to_contain_text("Page 1 of 2")


def test_phone_width_keeps_everything_on_screen(seeded: Platform, page: Page) -> None:
    page.set_viewport_size({"width": 390, "height": 844})
    sign_in(page, seeded.url)
    expect(page.locator("table.services tbody tr").first).to_be_visible()
    for hash_ in ("#/", "#/create", "#/services/local/resnet50_v2"):
        page.goto(seeded.url + "/" + hash_)
        page.locator("main h2").first.wait_for()
        width = page.evaluate("document.documentElement.scrollWidth")
        assert width <= 390, (hash_, width)  # wide tables scroll inside their box


def test_sign_in_with_an_access_key_pair(seeded: Platform, page: Page) -> None:
    """A viewer's pair opens the console; what it may not do is refused with the reason."""
    seeded.create("ak_visible", 1)  # the newest: on the list's first page
    made = seeded.api.post("/api/v2/accesskeys", json={"Role": "viewer"})
    assert made.status_code == 200, made.text
    key_id, secret = made.json()["AccessKeyId"], made.json()["AccessKeySecret"]
    page.goto(seeded.url + "/")
    page.get_by_label("AccessKeyId").fill(key_id)
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_role("alert")).to_contain_text(
        "both the AccessKeyId and its AccessKeySecret"
    )
    page.get_by_label("AccessKeySecret").fill("wrong")
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_role("alert")).to_contain_text("not accepted")

    page.get_by_label("AccessKeyId").fill(key_id)
    page.get_by_label("AccessKeySecret").fill(secret)
    page.get_by_role("button", name="Sign in").click()
    row = page.locator("table.services").get_by_role("row").filter(has_text="ak_visible")
    expect(row).to_contain_text("Running")
    assert page.evaluate("sessionStorage.getItem('openeas.admin')") == f"{key_id}:{secret}"
    page.goto(seeded.url + "/#/services/local/ak_visible")
    page.get_by_role("button", name="Show token").click()
    expect(page.get_by_text("may only read")).to_be_visible()
    assert (
        seeded.api.get("/api/v2/audit", params={"principal": key_id}).json()["Entries"][0]["Action"]
        == "DescribeServiceToken"
    )
