"""``eascmd`` in EAS's own spellings against a live control plane: ``autoscale -D`` (the
short autoscaler form), ``modify -Dmetadata.…`` and ``<region>/<service>`` names, beside
today's flags."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx

from tests.controlplane.conftest import ADMIN, LiveServer, seed_spec
from tests.controlplane.test_eascmd_cli import eascmd, write

__all__ = ["eascmd"]


def created(eascmd: Any, tmp_path: Path) -> None:
    assert eascmd("create", write(tmp_path, seed_spec()), "--no-wait")[0] == 0


def written(live_api: LiveServer) -> dict[str, Any]:
    """The spec as describe shows it."""
    r = httpx.get(
        f"{live_api.url}/api/v2/services/local/triton_test",
        headers={"Authorization": f"Bearer {ADMIN}"},
    )
    config: dict[str, Any] = json.loads(r.json()["ServiceConfig"])
    return config


def test_autoscale_takes_eas_d_forms(eascmd: Any, live_api: LiveServer, tmp_path: Path) -> None:
    created(eascmd, tmp_path)
    code, out, err = eascmd(
        "autoscale",
        "triton_test",
        "-Dmin=1",
        "-Dmax=3",
        "-Dstrategies.qps=10",
        "-Dstrategies.cpu=80",
    )
    assert code == 0, err
    assert "[OK] Service triton_test is autoscaled" in out
    auto = written(live_api)["autoscaler"]
    assert (auto["min"], auto["max"]) == (1, 3)
    assert auto["scaleStrategies"] == [
        {"metricName": "qps", "threshold": 10.0},
        {"metricName": "cpu", "threshold": 80.0},
    ]
    # beside the flags: -D sets the field it names
    code, _, err = eascmd(
        "autoscale", "triton_test", "--min", "1", "--max", "4", "--strategy", "qps=5", "-Dmax=6"
    )
    assert code == 0, err
    assert written(live_api)["autoscaler"]["max"] == 6
    # a typo in EAS's form is refused with the field
    code, _, err = eascmd("autoscale", "triton_test", "-Dmin=1", "-Dmax=3", "-Dstrategies.qsp=1")
    assert code != 0 and "scaleStrategies[0].metricName" in err and "'qps'" in err


def test_modify_with_dotted_metadata_and_region_names(
    eascmd: Any, live_api: LiveServer, tmp_path: Path
) -> None:
    created(eascmd, tmp_path)
    code, _, err = eascmd("modify", "local/triton_test", "-Dmetadata.instance=2", "--no-wait")
    assert code == 0, err
    assert written(live_api)["metadata"]["instance"] == 2
    code, _, err = eascmd("modify", "triton_test", "-Dmetadata.rpc.keepalive=3000", "--no-wait")
    assert code == 0, err
    assert written(live_api)["metadata"]["rpc"]["keepalive"] == 3000
    # <region>/<service>: the region is the cluster; another one holds no such service
    code, out, err = eascmd("desc", "cn-shanghai/triton_test")
    assert code != 0 and "unknown cluster 'cn-shanghai'" in out + err


def test_desc_shows_containers_mounts_labels_and_what_is_not_honoured(
    eascmd: Any, tmp_path: Path
) -> None:
    from tests.controlplane.test_eas_spec import issue_config

    assert eascmd("create", write(tmp_path, issue_config()), "--no-wait")[0] == 0
    code, out, err = eascmd("desc", "triton_mnist")
    assert code == 0, err
    assert "| Container[0]     | registry/pai-eas/tritonserver:25.03-py3: " in out
    assert "tritonserver --model-repository=/models" in out
    assert "/models <- oss://bucket/models/triton/" in out
    assert "$SYSTEM_SERVICE_DEPLOY_TYPE=triton" in out
    assert "| containers[].image" in out and "runs no images" in out


def test_list_filters_on_labels(eascmd: Any, tmp_path: Path) -> None:
    for name, team in (("vision_a", "vision"), ("speech_a", "speech")):
        body = seed_spec(name=name, labels={"team": team})
        assert eascmd("create", write(tmp_path, body, f"{name}.json"), "--no-wait")[0] == 0
    code, out, err = eascmd("list", "--label", "team:vision")
    assert code == 0, err
    assert "vision_a" in out and "speech_a" not in out
