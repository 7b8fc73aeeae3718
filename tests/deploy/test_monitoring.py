"""``monitoring.enabled: true``, rendered by Helm's engine: ServiceMonitors that select the
gateway's and the control plane's Services on a port they publish; the Grafana dashboard as
the sidecar loads it (a labelled ConfigMap whose data is the dashboard JSON, ``panels`` at the
top); alerting rules whose expressions parse (promql-parser, Prometheus' own grammar ported)
and, like every dashboard query, name only series the code exposes (the gateway's and the
control plane's metric registries); a runbook section per alert in docs/operations.md."""

from __future__ import annotations

import json
import re
from typing import Any

import helm_python as helm
import kubernetes_validate
import promql_parser
import pytest

from controlplane.metrics import NAMES as CONTROLPLANE_NAMES
from gateway.metrics import GatewayMetrics
from gateway.settings import GatewaySettings
from tests.deploy.chart import CHART, ROOT, Obj, find, render

ON = {"monitoring": {"enabled": True}}
CRD_KINDS = {"ServiceMonitor", "PrometheusRule"}  # the Prometheus Operator's


def gateway_names() -> set[str]:
    out: set[str] = set()
    for metric in GatewayMetrics().all:
        names = [metric.name] + ([metric.alias] if metric.alias else [])
        for name in names:
            if metric.kind == "histogram":
                out.update(name + s for s in ("_bucket", "_sum", "_count"))
            else:
                out.add(name)
    return out


REGISTRY = gateway_names() | CONTROLPLANE_NAMES


def selectors(expr: str) -> list[str]:
    """The metric names ``expr`` reads (it must parse)."""
    names: list[str] = []

    def visit(node: Any) -> None:
        if isinstance(node, promql_parser.VectorSelector) and node.name:
            names.append(node.name)

    promql_parser.walk(promql_parser.parse(expr), pre_visit=visit)
    return names


# Grafana's variables, as Grafana substitutes them before Prometheus sees a query.
GRAFANA_VARIABLES = {"$__rate_interval": "5m", "$service": ".*"}


def grafana_to_promql(expr: str) -> str:
    for variable, value in GRAFANA_VARIABLES.items():
        expr = expr.replace(variable, value)
    assert "$" not in expr, f"an unknown Grafana variable in {expr}"
    return expr


@pytest.fixture(scope="module")
def objects() -> list[Obj]:
    return render(ON)


@pytest.fixture(scope="module")
def dashboard(objects: list[Obj]) -> dict[str, Any]:
    config_map = find(objects, "ConfigMap", "openeas-dashboard")
    assert list(config_map["data"]) == ["openeas.json"]
    parsed: dict[str, Any] = json.loads(config_map["data"]["openeas.json"])
    return parsed


def test_lint_is_clean_and_built_in_objects_validate(objects: list[Obj]) -> None:
    report = helm.lint(CHART, ON, strict=True, kube_version="v1.33.0")
    assert [m for m in report["messages"] if m["severity"] >= 2] == [] and report["errors"] == []
    for obj in objects:
        if obj["kind"] not in CRD_KINDS:
            assert kubernetes_validate.validate(obj, "1.33.0", strict=True)


def test_off_by_default_and_on_without_asking_the_cluster() -> None:
    kinds = [o["kind"] for o in render()]
    assert CRD_KINDS.isdisjoint(kinds)
    # No .Capabilities check: rendered offline, where no API version is known.
    template = (CHART / "templates" / "monitoring.yaml").read_text()
    code = re.sub(r"/\*.*?\*/", "", template, flags=re.S)  # its comment says why
    assert "Capabilities" not in code


@pytest.mark.parametrize(
    ("component", "path"),
    [("gateway", GatewaySettings().metrics_path), ("controlplane", "/metrics")],
)
def test_service_monitors_select_each_servers_service_and_metrics_path(
    objects: list[Obj], component: str, path: str
) -> None:
    monitor = find(objects, "ServiceMonitor", f"openeas-{component}")
    service = find(objects, "Service", f"openeas-{component}")
    assert monitor["metadata"]["namespace"] == service["metadata"]["namespace"]
    selected = monitor["spec"]["selector"]["matchLabels"]
    assert selected.items() <= service["metadata"]["labels"].items()
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["port"] in {p["name"] for p in service["spec"]["ports"]}
    assert endpoint["path"] == path
    # And the replicas' Triton metrics, with the same one value.
    assert find(objects, "ServiceMonitor", "openeas-replicas")


def test_the_dashboard_is_a_config_map_the_grafana_sidecar_loads(
    objects: list[Obj], dashboard: dict[str, Any]
) -> None:
    config_map = find(objects, "ConfigMap", "openeas-dashboard")
    assert config_map["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert dashboard["uid"] and dashboard["title"] == "OpenEAS"
    titles = " / ".join(p["title"] for p in dashboard["panels"]).lower()
    for topic in (
        "requests",
        "latency",
        "errors",
        "replicas",
        "cold start",
        "autoscaler",
        "leader",
        "reconcile",
        "api latency",
    ):
        assert topic in titles


def test_every_dashboard_query_parses_and_reads_series_the_code_exposes(
    dashboard: dict[str, Any],
) -> None:
    queries = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    assert len(queries) >= 15
    read: set[str] = set()
    for query in queries:
        names = selectors(grafana_to_promql(query))
        assert names, query
        assert set(names) <= REGISTRY, f"{set(names) - REGISTRY} in {query}"
        read.update(names)
    for variable in dashboard["templating"]["list"]:
        if variable["type"] == "query":
            found = re.fullmatch(r"label_values\((\w+), (\w+)\)", variable["query"]["query"])
            assert found is not None and found.group(1) in REGISTRY
    # Every panel with a query uses the dashboard's data source variable.
    for panel in dashboard["panels"]:
        if panel["type"] != "row":
            assert panel["datasource"]["uid"] == "${datasource}"
    # Not one half of the story: each family the operator needs is on it.
    for needed in (
        "openeas_gateway_requests_total",
        "openeas_gateway_cold_start_seconds_count",
        "openeas_controlplane_service_replicas",
        "openeas_controlplane_autoscaler_decisions_total",
        "openeas_controlplane_leader",
        "openeas_controlplane_reconcile_queue_depth",
    ):
        assert needed in read


def test_the_check_catches_a_misspelt_metric() -> None:
    with pytest.raises(ValueError):
        selectors("sum(rate(openeas_gateway_requests_total[5m])")  # unclosed
    assert not set(selectors("rate(openeas_gateway_request_total[5m])")) <= REGISTRY


def alerts(objects: list[Obj]) -> list[Obj]:
    rule = find(objects, "PrometheusRule", "openeas-alerts")
    return [r for group in rule["spec"]["groups"] for r in group["rules"]]


def test_each_alert_parses_names_real_series_and_has_a_runbook(objects: list[Obj]) -> None:
    rules = alerts(objects)
    assert {r["alert"] for r in rules} == {
        "OpenEASHighErrorRate",
        "OpenEASHighLatency",
        "OpenEASReplicasBelowDesired",
        "OpenEASNoLeader",
        "OpenEASStaleRouteTable",
    }
    operations = (ROOT / "docs" / "operations.md").read_text()
    headings = {
        re.sub(r"[^a-z0-9 -]", "", h.lower()).replace(" ", "-")
        for h in re.findall(r"^#+ (.+)$", operations, re.M)
    }
    for rule in rules:
        names = selectors(rule["expr"])
        assert names and set(names) <= REGISTRY, rule["alert"]
        assert rule["labels"]["severity"] in ("warning", "critical")
        url = rule["annotations"]["runbook_url"]
        assert url.endswith("docs/operations.md#" + rule["alert"].lower())
        assert rule["alert"].lower() in headings, f"no runbook section for {rule['alert']}"


def test_alert_thresholds_come_from_values() -> None:
    rules = alerts(
        render(
            {
                "monitoring": {
                    "enabled": True,
                    "alerts": {"errorRatio": 0.2, "latencyP99Seconds": 0.75},
                    "labels": {"release": "kube-prometheus"},
                }
            }
        )
    )
    by_name = {r["alert"]: r for r in rules}
    assert by_name["OpenEASHighErrorRate"]["expr"].endswith("> 0.2")
    assert by_name["OpenEASHighLatency"]["expr"].endswith("> 0.75")
    for rule in by_name.values():
        selectors(rule["expr"])


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"monitoring": {"enabled": "yes"}}, "at '/monitoring/enabled': got string"),
        ({"monitoring": {"alerts": {"errorRatio": 5}}}, "at '/monitoring/alerts/errorRatio'"),
        ({"monitoring": {"dashbord": {}}}, "additional properties 'dashbord' not allowed"),
    ],
)
def test_the_schema_refuses_bad_monitoring_values(values: Obj, message: str) -> None:
    with pytest.raises(helm.HelmValuesError) as failed:
        render(values)
    assert message in str(failed.value)
