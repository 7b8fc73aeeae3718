"""The suite's own rules (tests/conftest.py), checked on a run of pytest in a process of its
own: under ``CI=true`` a skip fails the run."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# Skips whenever the gateway runs from source, as OPENEAS_PURE_PYTHON=1 makes it.
SKIPPING = "tests/gateway/test_native.py::test_the_hot_path_runs_compiled"


def run(**env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", SKIPPING],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        env={**os.environ, "OPENEAS_PURE_PYTHON": "1", "PYTEST_ADDOPTS": "", **env},
    )


def test_a_skip_fails_the_run_under_ci() -> None:
    done = run(CI="true")
    assert done.returncode != 0, done.stdout
    assert "skipped under CI=true" in done.stdout


def test_a_skip_is_a_skip_elsewhere() -> None:
    done = run(CI="")
    assert done.returncode == 0, done.stdout
    assert "1 skipped" in done.stdout
