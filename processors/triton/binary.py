"""Where ``tritonserver`` is, and what it needs around it to start.

``openeas processor run triton`` and the test suite's ``triton_server`` fixture call
:func:`locate`. Lookup order: ``OPENEAS_TRITONSERVER`` (a path to the binary), then
``tritonserver`` on ``PATH`` (the NGC image), then the binary shipped in the
``nvidia-pytriton`` wheel (``pip install 'openeas[triton]'``: CPU-capable, for ``openeas up``
and tests).

The wheel's binary needs three things its own launcher normally provides: its bundled shared
libraries on ``LD_LIBRARY_PATH``; a backends directory that holds the python backend *stub*
for the running Python (the wheel ships stubs apart, per Python version, so we assemble a
copy in a cache directory once); and the running virtualenv first on ``PATH``, because the
stub runs models with the Python environment it finds there.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
import sys
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

ENV_BINARY = "OPENEAS_TRITONSERVER"
ENV_CACHE = "OPENEAS_CACHE_DIR"
_STUB = "triton_python_backend_stub"


class TritonserverNotFound(RuntimeError):
    """No usable tritonserver; the message says every way to provide one."""


@dataclass(frozen=True)
class Tritonserver:
    """A runnable tritonserver: its path, environment overrides and platform arguments."""

    binary: Path
    source: str  # how it was found: OPENEAS_TRITONSERVER, PATH or nvidia-pytriton
    env: dict[str, str] = field(default_factory=dict)  # complete values for the keys it sets
    args: list[str] = field(default_factory=list)  # e.g. --backend-directory=...

    def environ(self, base: Mapping[str, str]) -> dict[str, str]:
        """``base`` with this binary's overrides applied."""
        return {**base, **self.env}


def locate(environ: Mapping[str, str] | None = None) -> Tritonserver:
    """Find tritonserver; raise TritonserverNotFound naming all three ways to provide it."""
    env = os.environ if environ is None else environ
    explicit = env.get(ENV_BINARY)
    if explicit:
        path = Path(explicit)
        if not (path.is_file() and os.access(path, os.X_OK)):
            raise TritonserverNotFound(
                f"{ENV_BINARY}={explicit} is not an executable file; "
                "point it at a tritonserver binary or unset it"
            )
        return Tritonserver(binary=path, source=ENV_BINARY)
    on_path = shutil.which("tritonserver", path=env.get("PATH", os.defpath))
    if on_path:
        return Tritonserver(binary=Path(on_path), source="PATH")
    wheel = pytriton_dir()
    if wheel is not None and (wheel / "bin" / "tritonserver").is_file():
        return _from_wheel(wheel, env)
    raise TritonserverNotFound(
        f"tritonserver not found: set {ENV_BINARY} to its path, put tritonserver on PATH, "
        "or install the nvidia-pytriton wheel (pip install 'openeas[triton]')"
    )


def pytriton_dir() -> Path | None:
    """``<site-packages>/pytriton/tritonserver`` if the nvidia-pytriton wheel is installed."""
    spec = importlib.util.find_spec("pytriton")
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations))) / "tritonserver"


def cache_root(environ: Mapping[str, str]) -> Path:
    """Writable per-user cache: ``OPENEAS_CACHE_DIR``, else XDG's, else the temp dir."""
    if environ.get(ENV_CACHE):
        return Path(environ[ENV_CACHE])
    if environ.get("XDG_CACHE_HOME"):
        return Path(environ["XDG_CACHE_HOME"]) / "openeas"
    home = environ.get("HOME")
    if home and os.access(home, os.W_OK):
        return Path(home) / ".cache" / "openeas"
    return Path(tempfile.gettempdir()) / f"openeas-{os.getuid()}"


def _from_wheel(wheel: Path, environ: Mapping[str, str]) -> Tritonserver:
    python = f"{sys.version_info.major}.{sys.version_info.minor}"
    stub = wheel / "python_backend_stubs" / python / _STUB
    if not stub.is_file():
        raise TritonserverNotFound(
            f"nvidia-pytriton at {wheel.parent} has no python backend stub for Python {python}; "
            f"use a Python it supports or set {ENV_BINARY}"
        )
    backends = _backends_with_stub(wheel / "backends", stub, cache_root(environ))
    # The wheel's auditwheel-style vendored libraries sit next to the package.
    libs = wheel.parent.parent / "nvidia_pytriton.libs"
    args = [f"--backend-directory={backends}"]
    if (wheel / "caches").is_dir():
        args.append(f"--cache-directory={wheel / 'caches'}")
    return Tritonserver(
        binary=wheel / "bin" / "tritonserver",
        source="nvidia-pytriton",
        env={
            "LD_LIBRARY_PATH": _prepend(str(libs), environ.get("LD_LIBRARY_PATH")),
            "PATH": _prepend(str(Path(sys.executable).parent), environ.get("PATH")),
        },
        args=args,
    )


def _backends_with_stub(backends: Path, stub: Path, cache: Path) -> Path:
    """A copy of the wheel's backends dir with the stub in ``python/``, made once per wheel
    and Python; built aside and renamed into place so concurrent replicas never see half."""
    fingerprint = hashlib.sha256()
    for part in (backends, stub):
        stat = part.stat()
        fingerprint.update(f"{part}\0{stat.st_mtime_ns}\0{stat.st_size}\0".encode())
    target = cache / "tritonserver-backends" / fingerprint.hexdigest()[:16]
    if (target / "python" / _STUB).is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".staging-", dir=target.parent))
    try:
        shutil.copytree(backends, staging / "b")
        (staging / "b" / "python").mkdir(exist_ok=True)
        shutil.copy2(stub, staging / "b" / "python" / _STUB)
        try:
            (staging / "b").rename(target)
        except OSError:
            if not (target / "python" / _STUB).is_file():
                raise  # not a lost race: a real failure
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


def _prepend(entry: str, current: str | None) -> str:
    return entry if not current else f"{entry}{os.pathsep}{current}"
