"""``eascmd`` against a live control plane over HTTP (SQLite and PostgreSQL)."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from eascmd import cli
from tests.controlplane.conftest import ADMIN, LiveServer, seed_spec

SEED = Path(__file__).resolve().parents[1] / "data" / "seed_triton.config"


@pytest.fixture
def eascmd(
    live_api: LiveServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> Any:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    for var in ("EAS_ENDPOINT", "EAS_TOKEN", "EAS_REGION"):
        monkeypatch.delenv(var, raising=False)

    def run(*argv: str) -> tuple[int, str, str]:
        code = cli.main(list(argv))
        out, err = capsys.readouterr()
        return code, out, err

    assert run("config", "-e", live_api.url, "-k", ADMIN)[0] == 0
    return run


def write(tmp_path: Path, spec: dict[str, Any], name: str = "triton.config") -> str:
    path = tmp_path / name
    path.write_text(json.dumps(spec, indent=2))
    return str(path)


def test_config_is_saved_private(eascmd: Any, tmp_path: Path) -> None:
    saved = tmp_path / "home" / ".eascmd" / "config"
    assert stat.S_IMODE(saved.stat().st_mode) == 0o600
    assert json.loads(saved.read_text())["token"] == ADMIN


def test_create_prints_the_seed_table(eascmd: Any, tmp_path: Path) -> None:
    code, out, _ = eascmd("create", write(tmp_path, seed_spec()), "--no-wait")
    assert code == 0
    lines = out.splitlines()
    assert lines[0].startswith("[RequestId]: ")
    assert lines[1] == lines[5] and set(lines[1]) == {"+", "-"}
    assert lines[2].startswith("| Internet Endpoint | http://gateway.example:8080/api/predict/")
    assert lines[3].startswith("| Intranet Endpoint | http://openeas-gateway.")
    assert lines[4].startswith("| Token             | ")
    assert len({len(line) for line in lines[1:6]}) == 1  # a rectangular table


def test_seed_config_pasted_from_the_blog_is_refused_with_fixes(eascmd: Any) -> None:
    code, out, err = eascmd("create", str(SEED))
    assert code == 2 and out == ""
    assert "nothing was created" in err
    assert '"--model-repository=oss://triton-model-repo/models",' in err
    assert "Traceback" not in err
    assert eascmd("list")[1].strip() == "No services."


def test_server_side_errors_name_field_and_fix(eascmd: Any, tmp_path: Path) -> None:
    bad = seed_spec(metadata={"instance": "two", "gpu_memory": 3})
    code, _, err = eascmd("create", write(tmp_path, bad))
    assert code == 1
    assert "metadata.instance" in err and "metadata.gpu_memory" in err
    assert "remove it" in err


def test_desc_list_modify_stop_start_events_delete(eascmd: Any, tmp_path: Path) -> None:
    assert eascmd("create", write(tmp_path, seed_spec()), "--no-wait")[0] == 0
    code, out, _ = eascmd("desc", "triton_test")
    assert code == 0 and "| Status " in out and "Creating" in out

    assert eascmd("modify", "triton_test", "-Dmetadata.instance=2", "--no-wait")[0] == 0
    patch = write(tmp_path, {"metadata": {"cpu": 2}}, "patch.json")
    assert eascmd("modify", "triton_test", "-s", patch, "--no-wait")[0] == 0
    _, out, _ = eascmd("desc", "triton_test")
    assert "3 (observed 0)" in out  # two modifications, two new generations

    code, out, _ = eascmd("list")
    assert code == 0 and "triton_test" in out and "1 of 1 service(s)" in out
    assert eascmd("stop", "triton_test")[1] == "[OK] Service triton_test is stopping\n"
    assert eascmd("start", "triton_test")[0] == 0
    _, out, _ = eascmd("events", "triton_test")
    for reason in ("Created", "Updated", "Stopping", "Starting"):
        assert reason in out
    rotated = eascmd("token", "triton_test", "--rotate")[1].strip()
    assert eascmd("token", "triton_test")[1].strip() == rotated
    assert eascmd("delete", "triton_test")[0] == 0
    assert "Deleting" in eascmd("desc", "triton_test")[1]


def test_unknown_service_and_bad_overrides(eascmd: Any) -> None:
    code, _, err = eascmd("desc", "nope")
    assert code == 1 and "no service named 'nope'" in err
    code, _, err = eascmd("modify", "nope", "-Dmetadata")
    assert code == 2 and "-Dkey.path=value" in err


def test_unreachable_control_plane_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    monkeypatch.setenv("EAS_ENDPOINT", "http://127.0.0.1:9")
    monkeypatch.setenv("EAS_TOKEN", "x")
    monkeypatch.setenv("HOME", str(tmp_path))
    assert cli.main(["list"]) == 1
    assert "cannot reach the control plane at http://127.0.0.1:9" in capsys.readouterr().err


def test_console_script_without_profile(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("EAS_")} | {
        "HOME": str(tmp_path)
    }
    eascmd = Path(sys.executable).parent / "eascmd"
    done = subprocess.run([str(eascmd), "list"], env=env, capture_output=True, text=True)
    assert done.returncode == 2
    assert "eascmd config -e <endpoint> -k <admin token>" in done.stderr


def test_lint_fix_turns_the_pasted_seed_into_a_config_create_accepts(
    eascmd: Any, tmp_path: Path
) -> None:
    pasted = tmp_path / "triton.config"
    pasted.write_bytes(SEED.read_bytes())
    assert eascmd("lint", str(pasted), "--fix")[0] == 0
    code, out, err = eascmd("create", str(tmp_path / "triton.fixed.config"), "--no-wait")
    assert (code, err) == (0, "")
    assert "/api/predict/triton_test" in out


def test_groups_and_release(eascmd: Any, tmp_path: Path) -> None:
    for name, extra in (("blue", {"traffic_state": "grouping"}), ("green", {})):
        spec = seed_spec(name=name, metadata={"instance": 1, "group": "g", **extra})
        assert eascmd("create", write(tmp_path, spec, f"{name}.config"), "--no-wait")[0] == 0
    code, out, _ = eascmd("release", "green", "--state", "grouping", "--weight", "300")
    assert (code, out.strip()) == (0, "[OK] Service green: grouping, weight 300")
    code, out, _ = eascmd("group", "list")
    assert code == 0 and "| g " in out and "blue, green" in out
    code, out, _ = eascmd("group", "desc", "g")
    assert code == 0 and "/api/predict/g" in out
    rows = {line.split("|")[1].strip(): line for line in out.splitlines() if "| " in line}
    assert "| grouping " in rows["green"] and "| 300 " in rows["green"]
    code, out, _ = eascmd("group", "mode", "g", "auto")
    assert out.strip() == "[OK] Group g splits traffic by members' running instances"
    token = eascmd("group", "token", "g")[1].strip()
    assert len(token) >= 32 and token not in eascmd("group", "desc", "g")[1]
    assert eascmd("group", "token", "g", "--rotate")[1].strip() != token
    code, _, err = eascmd("group", "desc", "nope")
    assert code == 1 and "no group named 'nope'" in err


def test_mirror(eascmd: Any, tmp_path: Path) -> None:
    for name in ("v1", "v2", "v3"):
        spec = seed_spec(name=name)
        assert eascmd("create", write(tmp_path, spec, f"{name}.config"), "--no-wait")[0] == 0
    code, out, _ = eascmd("mirror", "v1", "--ratio", "10", "--target", "v2", "--target", "v3")
    assert (code, out.strip()) == (0, "[OK] Service v1 mirror: 10% to v2, v3, compared byte-equal")
    code, out, _ = eascmd("mirror", "v1", "--ratio", "5", "--target", "v2", "--tolerance", "1e-3")
    assert out.strip() == "[OK] Service v1 mirror: 5% to v2, compared within 0.001"
    assert "| Mirror           | 5% to v2, compared within 0.001" in eascmd("desc", "v1")[1]
    code, _, err = eascmd("mirror", "v1", "--ratio", "5", "--target", "nope")
    assert code == 1 and "Target[0]" in err and "no service named 'nope'" in err, err
    assert eascmd("mirror", "v1", "--ratio", "5")[0] == 2  # no target
    code, out, _ = eascmd("mirror", "v1", "--off")
    assert (code, out.strip()) == (0, "[OK] Service v1 mirror: off")


def test_autoscale_sets_shows_refuses_and_removes(eascmd: Any, tmp_path: Path) -> None:
    assert eascmd("create", "--no-wait", write(tmp_path, seed_spec()))[0] == 0
    code, out, _ = eascmd(
        "autoscale", "triton_test", "--min", "1", "--max", "4",
        "--strategy", "qps=100", "--strategy", "concurrency=2.5", "--scale-down-window", "60",
    )  # fmt: skip
    assert code == 0, out
    assert "min 1, max 4: qps=100, concurrency=2.5 (windows: up 0 s, down 60 s)" in out
    code, out, _ = eascmd("desc", "triton_test")
    assert "| Autoscaler " in out and "| LastDecision " in out

    code, _, err = eascmd(
        "autoscale", "triton_test", "--min", "5", "--max", "2", "--strategy", "qps=1"
    )
    assert code == 1 and "autoscaler.max: max (2) is below min (5)" in err
    code, _, err = eascmd(
        "autoscale", "triton_test", "--min", "1", "--max", "2", "--strategy", "qps"
    )
    assert code == 2 and "expected METRIC=THRESHOLD" in err
    code, _, err = eascmd("autoscale", "triton_test", "--max", "2")
    assert code == 2 and "--off" in err

    code, out, _ = eascmd("autoscale", "triton_test", "--off")
    assert code == 0 and "removed; instances stay at 1" in out
    assert "Autoscaler" not in eascmd("desc", "triton_test")[1]


def test_autoscale_to_zero_with_its_on_zero_values(eascmd: Any, tmp_path: Path) -> None:
    assert eascmd("create", "--no-wait", write(tmp_path, seed_spec()))[0] == 0
    code, out, err = eascmd(
        "autoscale", "triton_test", "--min", "0", "--max", "3", "--strategy", "qps=100",
        "--scale-down-grace-period", "30", "--scale-up-activation-replicas", "2",
    )  # fmt: skip
    assert code == 0, err
    assert "min 0, max 3: qps=100" in out
    assert "to zero after 30 s without requests, a request wakes 2" in out
    _, desc, _ = eascmd("desc", "triton_test")
    assert "to zero after 30 s without requests, a request wakes 2" in desc
    code, _, err = eascmd(
        "autoscale", "triton_test", "--min", "1", "--max", "3", "--strategy", "qps=100",
        "--scale-down-grace-period", "30",
    )  # fmt: skip
    assert code == 1 and "autoscaler.behavior.onZero: onZero applies only" in err, err
    code, _, err = eascmd(
        "autoscale", "triton_test", "--min", "0", "--max", "3", "--strategy", "qps=100",
        "--scale-up-activation-replicas", "4",
    )  # fmt: skip
    assert code == 1 and "onZero.scaleUpActivationReplicas: 4 replicas" in err, err
    code, out, _ = eascmd(
        "autoscale", "triton_test", "--min", "0", "--max", "3", "--strategy", "qps=100"
    )
    assert code == 0 and "to zero after 600 s without requests, a request wakes 1" in out


def test_desc_of_a_service_at_zero_says_so() -> None:
    from eascmd import render

    svc = {
        "ServiceName": "s", "Region": "local", "Status": "ScaledToZero",
        "Reason": "ScaledToZero", "Message": "scaled to zero, wakes on request",
        "TotalInstance": 0, "PendingInstance": 0, "RunningInstance": 0,
        "InternetEndpoint": "", "IntranetEndpoint": "", "Generation": 3,
        "ObservedGeneration": 3, "CreateTime": "", "UpdateTime": "",
        "ServiceConfig": {"autoscaler": {"min": 0, "max": 2, "scaleStrategies": [
            {"metricName": "qps", "threshold": 10}]}},
    }  # fmt: skip
    out = render.describe(svc)
    assert "| Status           | ScaledToZero " in out
    assert "| Message          | scaled to zero, wakes on request " in out
    assert "to zero after 600 s without requests" in out


def test_cronscale_sets_shows_refuses_and_removes(eascmd: Any, tmp_path: Path) -> None:
    assert eascmd("create", "--no-wait", write(tmp_path, seed_spec()))[0] == 0
    code, _, err = eascmd("cronscale", "triton_test")
    assert code == 1 and "no scheduled scaler" in err
    cron = {
        "ExcludeDates": ["* * * * * 6,0"],
        "ScaleJobs": [
            {"Name": "peak", "Schedule": "0 0 8 * * *", "TargetSize": 3},
            {"Schedule": "0 0 20 * * *", "TargetSize": 1, "TimeZone": "Asia/Shanghai"},
        ],
    }
    code, out, err = eascmd("cronscale", "local/triton_test", "-s", write(tmp_path, cron, "c.json"))
    assert code == 0, err
    assert "[OK] Service triton_test scales on schedule: 2 job(s)" in out
    assert "| peak  | 0 0 8 * * *  | 3          | UTC           | Waiting | -       |" in out
    assert "| job-2 | 0 0 20 * * * | 1          | Asia/Shanghai | Waiting | -       |" in out
    assert "ExcludeDates: * * * * * 6,0" in out
    assert "| job-2 " in eascmd("cronscale", "triton_test")[1]

    bad = {"ScaleJobs": [{"Schedule": "0 8 * * *", "TargetSize": 1}]}
    code, _, err = eascmd("cronscale", "triton_test", "-s", write(tmp_path, bad, "bad.json"))
    assert code == 1 and "ScaleJobs[0].Schedule" in err and "write 6" in err
    code, out, _ = eascmd("cronscale", "triton_test", "--off")
    assert code == 0 and "removed" in out
    assert eascmd("cronscale", "triton_test")[0] == 1
