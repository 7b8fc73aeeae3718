"""processors.triton.binary: OPENEAS_TRITONSERVER, then PATH, then the nvidia-pytriton wheel."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from processors.triton import binary

PYTHON = f"{sys.version_info.major}.{sys.version_info.minor}"


def _executable(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n")
    path.chmod(0o755)
    return path


def _fake_wheel(root: Path, *, stub_for: str = PYTHON) -> Path:
    """The layout nvidia-pytriton installs: site-packages/pytriton/tritonserver/… and
    site-packages/nvidia_pytriton.libs/."""
    server = root / "pytriton" / "tritonserver"
    _executable(server / "bin" / "tritonserver")
    (server / "backends" / "python").mkdir(parents=True)
    (server / "backends" / "python" / "libtriton_python.so").write_bytes(b"\x7fELF")
    _executable(server / "python_backend_stubs" / stub_for / "triton_python_backend_stub")
    (server / "caches" / "local").mkdir(parents=True)
    (root / "nvidia_pytriton.libs").mkdir()
    return server


@pytest.fixture
def no_wheel(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(binary, "pytriton_dir", lambda: None)


@pytest.mark.usefixtures("no_wheel")
def test_explicit_binary_comes_first(tmp_path: Path) -> None:
    explicit = _executable(tmp_path / "mine" / "tritonserver")
    _executable(tmp_path / "bin" / "tritonserver")
    found = binary.locate({binary.ENV_BINARY: str(explicit), "PATH": str(tmp_path / "bin")})
    assert (found.binary, found.source, found.env, found.args) == (
        explicit,
        "OPENEAS_TRITONSERVER",
        {},
        [],
    )


@pytest.mark.usefixtures("no_wheel")
def test_explicit_binary_that_is_not_executable_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "tritonserver").write_text("")
    with pytest.raises(binary.TritonserverNotFound, match="is not an executable file"):
        binary.locate({binary.ENV_BINARY: str(tmp_path / "tritonserver")})


@pytest.mark.usefixtures("no_wheel")
def test_path_comes_second(tmp_path: Path) -> None:
    on_path = _executable(tmp_path / "bin" / "tritonserver")
    found = binary.locate({"PATH": f"{tmp_path / 'empty'}{os.pathsep}{tmp_path / 'bin'}"})
    assert (found.binary, found.source, found.args) == (on_path, "PATH", [])


def test_wheel_comes_last_with_its_libs_stub_and_python(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    wheel = _fake_wheel(tmp_path / "site-packages")
    monkeypatch.setattr(binary, "pytriton_dir", lambda: wheel)
    env = {"PATH": str(tmp_path / "nothing"), binary.ENV_CACHE: str(tmp_path / "cache")}

    found = binary.locate(env)

    assert found.source == "nvidia-pytriton"
    assert found.binary == wheel / "bin" / "tritonserver"
    libs = tmp_path / "site-packages" / "nvidia_pytriton.libs"
    assert found.env["LD_LIBRARY_PATH"] == str(libs)
    venv_bin = str(Path(sys.executable).parent)
    assert found.env["PATH"] == f"{venv_bin}{os.pathsep}{tmp_path / 'nothing'}"
    backends = Path(found.args[0].removeprefix("--backend-directory="))
    assert backends.parent.parent == tmp_path / "cache"
    assert (backends / "python" / "triton_python_backend_stub").stat().st_mode & 0o111
    assert (backends / "python" / "libtriton_python.so").read_bytes() == b"\x7fELF"
    assert found.args[1] == f"--cache-directory={wheel / 'caches'}"
    # made once: a second lookup reuses the copy; nothing half-built is left beside it
    assert binary.locate(env).args == found.args
    assert [p.name for p in backends.parent.iterdir()] == [backends.name]
    assert found.environ({"HOME": "/h", "PATH": "/x"})["HOME"] == "/h"


def test_wheel_without_a_stub_for_this_python_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    wheel = _fake_wheel(tmp_path, stub_for="2.7")
    monkeypatch.setattr(binary, "pytriton_dir", lambda: wheel)
    with pytest.raises(
        binary.TritonserverNotFound, match=f"no python backend stub for Python {PYTHON}"
    ):
        binary.locate({"PATH": "", binary.ENV_CACHE: str(tmp_path / "cache")})


@pytest.mark.usefixtures("no_wheel")
def test_nothing_found_names_all_three_ways(tmp_path: Path) -> None:
    with pytest.raises(binary.TritonserverNotFound) as caught:
        binary.locate({"PATH": str(tmp_path)})
    message = str(caught.value)
    for way in ("OPENEAS_TRITONSERVER", "PATH", "nvidia-pytriton"):
        assert way in message


def test_the_installed_wheel_is_found(tmp_path: Path) -> None:
    found = binary.locate({"PATH": "/usr/bin:/bin", binary.ENV_CACHE: str(tmp_path)})
    assert found.source == "nvidia-pytriton"
    assert os.access(found.binary, os.X_OK)


def test_cache_root_prefers_the_setting_then_xdg(tmp_path: Path) -> None:
    assert binary.cache_root({binary.ENV_CACHE: "/c", "XDG_CACHE_HOME": "/x"}) == Path("/c")
    assert binary.cache_root({"XDG_CACHE_HOME": "/x"}) == Path("/x/openeas")
    assert binary.cache_root({"HOME": str(tmp_path)}) == tmp_path / ".cache" / "openeas"
