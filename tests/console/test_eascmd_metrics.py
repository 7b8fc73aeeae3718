"""``eascmd metrics``: the console's chart data as a table in the terminal."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from eascmd import render
from tests.controlplane.conftest import seed_spec
from tests.controlplane.test_eascmd_cli import write


def test_the_table_shows_each_step_and_what_is_unknown() -> None:
    point = {
        "Time": 1_764_563_400.0,  # 2025-12-01 04:30:00 UTC
        "RequestsPerSecond": 12.5,
        "ErrorsPerSecond": 0.0,
        "LatencyP50Ms": 3.2,
        "LatencyP99Ms": 48.0,
        "Replicas": 2,
    }
    quiet = point | {"Time": point["Time"] + 10, "LatencyP50Ms": None, "LatencyP99Ms": None}
    out = render.metrics({"Points": [point, quiet | {"Replicas": None}], "Leading": True})
    lines = out.splitlines()
    assert "| Time (UTC) | Requests/s | 5xx/s | p50    | p99   | Replicas |" in lines
    assert "| 04:30:00   | 12.5       | 0     | 3.2 ms | 48 ms | 2        |" in lines
    assert "| 04:30:10   | 12.5       | 0     | -      | -     | -        |" in lines
    assert "does not lead" not in out


def test_eascmd_metrics_reads_the_api(eascmd: Any, tmp_path: Path) -> None:
    assert eascmd("create", write(tmp_path, seed_spec()), "--no-wait")[0] == 0
    code, out, _ = eascmd("metrics", "triton_test", "--window", "60")
    assert code == 0 and out.count(" ms |") == 0 and len(out.splitlines()) == 6 + 4 + 1
    assert "does not lead" in out  # this control plane runs no reconciler
    code, _, err = eascmd("metrics", "triton_test", "--window", "5")
    assert code == 1 and "window" in err
