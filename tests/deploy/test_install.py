"""A fresh install is quiet: the project's metadata draws no warning from the build backend
(a deprecated license table and the editable-install notice once printed screens of them
before anything useful)."""

from __future__ import annotations

import subprocess
import sys
import venv
from pathlib import Path

import pytest

from tests.deploy.chart import ROOT


@pytest.mark.slow
@pytest.mark.network  # builds in an isolated environment: fetches setuptools from the index
def test_editable_install_prints_no_warning(tmp_path: Path) -> None:
    target = tmp_path / "venv"
    venv.create(target, with_pip=False)
    # This environment's (current) pip, installing into the fresh one: old bundled pips hide
    # the backend's output, so they would pass whatever the metadata says.
    python = str(target / "bin" / "python")
    done = subprocess.run(
        [sys.executable, "-m", "pip", "--python", python, "install", "--no-deps", "-e", str(ROOT)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    log = done.stdout + done.stderr
    assert done.returncode == 0, log
    assert "Successfully installed openeas" in log
    warnings = [line for line in log.splitlines() if "warning" in line.lower()]
    assert warnings == [], log
