"""EAS's JSON as written, table-style: every field EAS documents is accepted (and what it
means is checked), EAS's other spellings read as the nested form, contradictions and typos
refused with the field and the nearest name, and describe's list of fields this runtime
does not honour."""

from __future__ import annotations

from typing import Any

import pytest

from controlplane.model import eas_fields
from controlplane.model.eas_spec import RollingStrategy
from controlplane.model.errors import InvalidSpec
from controlplane.model.spec import StoredSpec, split_token, validate_spec

REPO = "oss://bucket/models/triton/"


def issue_config(**extra: Any) -> dict[str, Any]:
    """Issue 58's config, as EAS's Triton page writes it."""
    return {
        "metadata": {
            "name": "triton_mnist",
            "instance": 1,
            "cpu": 2,
            "memory": 4000,
            "workspace_id": "ws-1",
        },
        "cloud": {"computing": {"instance_type": "ecs.gn6i-c4g1.xlarge"}},
        "containers": [
            {
                "image": "registry/pai-eas/tritonserver:25.03-py3",
                "command": "tritonserver --model-repository=/models",
                "port": 8000,
            }
        ],
        "storage": [{"mount_path": "/models", "oss": {"path": REPO, "readOnly": False}}],
        "labels": {"$SYSTEM_SERVICE_DEPLOY_TYPE": "triton"},
        **extra,
    }


def stored(data: dict[str, Any]) -> StoredSpec:
    return split_token(validate_spec(data))[0]


def problems(data: dict[str, Any]) -> dict[str, str]:
    with pytest.raises(InvalidSpec) as e:
        validate_spec(data)
    return {p.field: f"{p.message} | {p.fix}" for p in e.value.problems}


def test_the_issue_config_is_a_triton_service_pulling_its_mount() -> None:
    spec = stored(issue_config())
    assert spec.name == "triton_mnist"
    work = spec.workload
    assert (work.processor, work.params) == ("triton", [f"--model-repository={REPO}"])
    # shown as written
    public = spec.public()
    assert public["containers"] == issue_config()["containers"]
    assert public["storage"] == issue_config()["storage"]
    assert public["labels"] == {"$SYSTEM_SERVICE_DEPLOY_TYPE": "triton"}
    assert public["metadata"]["workspace_id"] == "ws-1"
    assert StoredSpec.model_validate(public) == spec  # a row loads as it was stored


EVERY_FIELD: dict[str, Any] = issue_config(
    autoscaler={"min": 1, "max": 3, "strategies": {"qps": 10, "cpu": 80}},
)
EVERY_FIELD["metadata"].update(
    {
        "gpu": 1,
        "rpc": {"keepalive": 3000, "max_queue_size": 10, "rate_limit": 5, "enable_sigterm": True},
        "rolling_strategy": {"max_surge": "25%", "max_unavailable": 1},
        "eas": {"termination_grace_period": 45},
    }
)
EVERY_FIELD["cloud"]["computing"]["instances"] = [{"type": "ecs.gn7i-c8g1.2xlarge"}]
EVERY_FIELD["containers"][0].update(
    {
        "env": [{"name": "LOG_LEVEL", "value": "info"}],
        "prepare": {"pythonRequirements": ["numpy==1.26.4"]},
        "startup_check": {"http_get": {"path": "/v2/health/live", "port": 8000}},
        "liveness_check": {"tcp_socket": {"port": 8000}, "period_seconds": 10},
        "readiness_check": {
            "exec": {"command": ["curl", "-f", "localhost:8000/v2/health/ready"]},
            "initial_delay_seconds": 5,
            "timeout_seconds": 2,
            "failure_threshold": 3,
            "success_threshold": 1,
        },
    }
)
EVERY_FIELD["storage"] += [
    {"mount_path": "/data", "nfs": {"server": "nfs.example", "path": "/share", "readOnly": True}},
    {"mount_path": "/dev/shm", "empty_dir": {"medium": "memory", "size_limit": 2}},
]


def test_every_documented_field_is_accepted() -> None:
    spec = stored(EVERY_FIELD)
    assert spec.metadata.rpc.enable_sigterm is True
    assert spec.metadata.eas is not None and spec.metadata.eas.termination_grace_period == 45
    assert spec.cloud is not None and spec.cloud.computing is not None
    assert spec.cloud.computing.types == ["ecs.gn6i-c4g1.xlarge", "ecs.gn7i-c8g1.2xlarge"]
    assert spec.autoscaler is not None
    assert [s.metricName for s in spec.autoscaler.scaleStrategies] == ["qps", "cpu"]


@pytest.mark.parametrize(
    ("written", "nested"),
    [
        ({"rpc.keepalive": 3000}, {"rpc": {"keepalive": 3000}}),
        (
            {"rpc.keepalive": 3000, "rpc": {"max_queue_size": 5}},
            {"rpc": {"keepalive": 3000, "max_queue_size": 5}},
        ),
        ({"rolling_strategy.max_surge": 2}, {"rolling_strategy": {"max_surge": 2}}),
        ({"eas.termination_grace_period": 30}, {"eas": {"termination_grace_period": 30}}),
        ({"rpc.keepalive": 3000, "rpc": {"keepalive": 3000}}, {"rpc": {"keepalive": 3000}}),
    ],
)
def test_dotted_metadata_keys_mean_the_nested_ones(
    written: dict[str, Any], nested: dict[str, Any]
) -> None:
    base = {
        "name": "svc",
        "processor": "triton",
        "processor_params": [f"--model-repository={REPO}"],
    }
    assert stored({**base, "metadata": written}) == stored({**base, "metadata": nested})


def test_the_short_autoscaler_form_is_scale_strategies() -> None:
    base = {
        "name": "svc",
        "processor": "triton",
        "processor_params": [f"--model-repository={REPO}"],
    }
    short = stored({**base, "autoscaler": {"min": 1, "max": 3, "strategies": {"qps": 10}}})
    long = stored(
        {
            **base,
            "autoscaler": {
                "min": 1,
                "max": 3,
                "scaleStrategies": [{"metricName": "qps", "threshold": 10}],
            },
        }
    )
    assert short == long


@pytest.mark.parametrize(
    ("change", "field", "words"),
    [
        ({"metadata": {"name": "a", "rpc.keepalive": 1}}, "body", ""),
        ({"name": "other"}, "body", "metadata.name"),
        ({"metadata": {"rpc.keepalive": 1, "rpc": {"keepalive": 2}}}, "body", "write it once"),
        ({"metadata": {"rolling_stratgy": {}}}, "metadata.rolling_stratgy", "'rolling_strategy'"),
        ({"contaners": []}, "contaners", "did you mean 'containers'"),
        ({"storage": [{"mount_path": "/m"}]}, "storage[0]", "exactly one of oss, nfs"),
        (
            {"storage": [{"mount_path": "/m", "oss": {"path": REPO, "read_only": True}}]},
            "storage[0].oss.read_only",
            "'readOnly'",
        ),
        (
            {
                "containers": [
                    {
                        "image": "i",
                        "command": "tritonserver --model-repository=/models --http-port=9000",
                    }
                ]
            },
            "containers[0].command",
            "http-port",
        ),
        ({"processor": "triton"}, "processor", "both say what runs"),
        (
            {"metadata": {"name": "x", "rolling_strategy": {"max_surge": "abc"}}},
            "metadata.rolling_strategy",
            "percentage",
        ),
        (
            {"autoscaler": {"min": 1, "max": 2, "strategies": {"qps": 1}, "scaleStrategies": []}},
            "body",
            "not both",
        ),
    ],
)
def test_contradictions_and_typos_are_refused_with_the_field(
    change: dict[str, Any], field: str, words: str
) -> None:
    data = {**issue_config(), **change}
    if "metadata" in change and "name" not in change["metadata"]:
        data["metadata"] = {**issue_config()["metadata"], **change["metadata"]}
    if field == "body" and not words:
        data.pop("containers")  # nothing to run and no processor: reported as such
        field, words = "processor", "nothing to run"
    found = problems(data)
    assert field in found, found
    assert words in found[field], found


def test_a_container_that_is_not_triton_is_a_container() -> None:
    spec = stored(
        {
            "metadata": {"name": "web"},
            "containers": [{"image": "python:3.11", "script": "python app.py", "port": 8000}],
        }
    )
    work = spec.workload
    assert work.processor == "container" and work.container is not None
    assert work.container.argv == ["sh", "-c", "python app.py"]


@pytest.mark.parametrize(
    ("surge", "unavailable", "replicas", "counts"),
    [
        (None, None, 4, (1, 0)),
        ("25%", "25%", 10, (3, 2)),
        (2, 0, 3, (2, 0)),
        ("50%", 1, 1, (1, 1)),
    ],
)
def test_rolling_strategy_counts(
    surge: Any, unavailable: Any, replicas: int, counts: tuple[int, int]
) -> None:
    strategy = RollingStrategy(max_surge=surge, max_unavailable=unavailable)
    assert strategy.counts(replicas) == counts


def test_describe_says_which_fields_the_local_runtime_does_not_honour_and_why() -> None:
    spec = stored(EVERY_FIELD)
    local = {n["field"]: n["reason"] for n in eas_fields.not_honoured(spec, "local")}
    k8s = {n["field"]: n["reason"] for n in eas_fields.not_honoured(spec, "kubernetes")}
    assert "runs no images" in local["containers[].image"]
    assert "instance types" in local["cloud.computing.instance_type"]
    assert "containers[].image" not in k8s and "storage[].nfs" not in k8s
    assert "workspaces" in k8s["metadata.workspace_id"]
    assert "into the image" in k8s["containers[].prepare"]
    # nothing honoured is listed; nothing absent is listed
    honoured = {f.path for f in eas_fields.FIELDS if f.status == "honoured"}
    assert not honoured & set(local)
    bare = stored(
        {"name": "svc", "processor": "triton", "processor_params": [f"--model-repository={REPO}"]}
    )
    assert eas_fields.not_honoured(bare, "local") == []


def test_the_docs_table_is_the_module_table() -> None:
    from pathlib import Path

    doc = (Path(__file__).resolve().parents[2] / "docs" / "spec.md").read_text()
    assert eas_fields.table() in doc


def test_sidecars_are_noted_on_the_local_runtime_only() -> None:
    body = issue_config()
    body["containers"].append({"image": "registry/agent:1", "command": "agent"})
    spec = stored(body)
    assert spec.workload.processor == "triton"  # the first container serves
    local = {n["field"] for n in eas_fields.not_honoured(spec, "local")}
    k8s = {n["field"] for n in eas_fields.not_honoured(spec, "kubernetes")}
    assert "containers[1:]" in local and "containers[1:]" not in k8s


def test_a_command_with_an_unclosed_quote_is_refused_with_the_field() -> None:
    body = issue_config(containers=[{"image": "i", "command": "tritonserver '--model-repository"}])
    assert "close its quotes" in problems(body)["containers[0]"]


@pytest.mark.parametrize(("ready", "limit"), [(0, 5), (1, 5), (3, 15)])
def test_rate_limit_is_per_instance_at_the_gateway(ready: int, limit: int) -> None:
    from controlplane.store import route_feed
    from controlplane.store.tables import ServiceRow

    spec = stored({**issue_config(), "metadata": {"name": "triton_mnist", "rpc.rate_limit": 5}})
    replicas: list[dict[str, Any]] = [
        {"state": "Running", "endpoint": f"http://10.0.0.{i}:8000"} for i in range(ready)
    ]
    replicas.append({"state": "Pending", "endpoint": None})
    row = ServiceRow(
        name="triton_mnist", spec=spec, replicas=replicas, token_sha256="0" * 64, status="Running"
    )
    row.stopped, row.deleting = False, False
    assert route_feed._route(row, 600_000).rate_limit == limit
