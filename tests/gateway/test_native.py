"""The gateway's compiled hot path (gateway/native.py): what the suite runs is the build a
user gets, a build older than its sources never runs, and the sources still work alone."""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from gateway import native

ROOT = Path(__file__).resolve().parents[2]
PURE = os.environ.get(native.PURE_ENV) == "1"


@pytest.mark.skipif(PURE, reason=f"{native.PURE_ENV}=1: running from source on purpose")
def test_the_hot_path_runs_compiled() -> None:
    assert not native.stale(), "sources changed since the build: ./dev test rebuilds"
    for name in native.COMPILED:
        module = __import__(f"gateway.{name}", fromlist=["_"])
        assert not str(module.__file__).endswith(".py"), f"gateway.{name} is not compiled"
    assert native.compiled()


@pytest.mark.parametrize("name", native.COMPILED)
def test_compiled_modules_hold_no_coroutines(name: str) -> None:
    tree = ast.parse((ROOT / "gateway" / (name.replace(".", "/") + ".py")).read_text())
    found = [
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.AsyncFunctionDef | ast.Await | ast.AsyncWith | ast.AsyncFor)
    ]
    assert found == [], f"gateway.{name} lines {found}: coroutines stay interpreted"


def _copy_of_the_build(tmp: Path) -> Path:
    """The package as built in place (sources, extensions and mypyc's shared library)."""
    shutil.copytree(ROOT / "gateway", tmp / "gateway", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(ROOT / "contract", tmp / "contract")
    for lib in ROOT.glob("*__mypyc*"):
        shutil.copy2(lib, tmp)
    return tmp


def _which(tree: Path, **env: str) -> subprocess.CompletedProcess[str]:
    code = "import gateway.http.proxy, gateway.http.server as s; print(s.__file__)"
    return subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tree,
        env={**os.environ, "PYTHONPATH": str(tree), **env},
    )


@pytest.mark.skipif(PURE or not native.compiled(), reason="no compiled build to go stale")
def test_a_source_other_than_what_was_compiled_runs_all_of_them_from_source(
    tmp_path: Path,
) -> None:
    tree = _copy_of_the_build(tmp_path)
    fresh = _which(tree, **{native.PURE_ENV: ""})
    assert fresh.returncode == 0, fresh.stderr
    assert not fresh.stdout.strip().endswith(".py") and fresh.stderr == ""

    # An edit that keeps the build's mtime (a restore, or saved while it compiled) too.
    edited = tree / "gateway" / "http" / "upstream.py"
    built = edited.stat()
    edited.write_text(edited.read_text() + "\n# edited\n")
    os.utime(edited, ns=(built.st_atime_ns, built.st_mtime_ns))
    stale = _which(tree, **{native.PURE_ENV: ""})
    assert stale.returncode == 0, stale.stderr
    assert stale.stdout.strip() == str(
        tree / "gateway" / "http" / "server.py"
    )  # all, not only the one
    assert "upstream.py not what was compiled" in stale.stderr
    assert "./dev" in stale.stderr  # and how to rebuild

    again = _copy_of_the_build(tmp_path / "again")
    forced = _which(again, **{native.PURE_ENV: "1"})
    assert forced.stdout.strip().endswith("server.py") and forced.stderr == ""
    (again / "gateway" / native.RECORD).unlink()  # extensions of no recorded build
    leftover = _which(again, **{native.PURE_ENV: ""})
    assert leftover.stdout.strip().endswith("server.py"), leftover.stderr


def test_the_sources_alone_proxy_byte_exact() -> None:
    """The fall-back is a working gateway: the repeat-path tests, interpreted."""
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly",
         str(ROOT / "tests" / "gateway" / "test_repeat.py")],
        capture_output=True, text=True, timeout=300, cwd=ROOT,
        env={**os.environ, native.PURE_ENV: "1", "PYTEST_ADDOPTS": ""},
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert " passed" in done.stdout
