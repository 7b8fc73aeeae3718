"""Which gateway modules are compiled, and the fall-back to their sources.

The per-request path of the gateway — the callbacks of :mod:`gateway.server`,
:mod:`gateway.upstream` and :mod:`gateway.proxy` and what they call — is compiled to C
by mypyc when the package is built (``setup.py``): the same typed Python, at about half
the instructions per call (``bench/hotpath.py --callgrind``). Coroutines are never in
these modules: they stay interpreted (mypyc's coroutines are where its bugs have been).

A compiled module is skipped for its source, all of them together (they call each other
natively), when ``OPENEAS_PURE_PYTHON=1`` or when a source is newer than its build (an
edited checkout: ``./dev`` rebuilds) — so what runs is never older than what is read.
:func:`use_sources_if_needed` runs once, from ``gateway/__init__.py``, before any of
them is imported. ``python gateway/native.py`` prints their source paths (for ``./dev``).
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import logging
import os
import sys
from collections.abc import Sequence
from types import ModuleType

# Modules under gateway/ built with mypyc: synchronous code only.
COMPILED = (
    "auth",
    "balancer",
    "headers",
    "http1",
    "limits",
    "metrics",
    "mirror",
    "paths",
    "pool",
    "problems",
    "proxy",
    "route_table",
    "router",
    "server",
    "traffic",
    "upstream",
    "writes",
)
PURE_ENV = "OPENEAS_PURE_PYTHON"
# A build is older than its source by more than this: an edit, not the order in which an
# installer happened to write the files.
STALE_AFTER_S = 2.0

HERE = os.path.dirname(os.path.abspath(__file__))
log = logging.getLogger(__name__)


def sources() -> list[str]:
    return [os.path.join(HERE, f"{name}.py") for name in COMPILED]


def _extension(name: str) -> str | None:
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        path = os.path.join(HERE, name + suffix)
        if os.path.exists(path):
            return path
    return None


def stale() -> list[str]:
    """The compiled modules whose source changed after they were built."""
    out = []
    for name in COMPILED:
        built = _extension(name)
        source = os.path.join(HERE, f"{name}.py")
        if built is not None and os.stat(source).st_mtime > os.stat(built).st_mtime + STALE_AFTER_S:
            out.append(name)
    return out


class _Sources(importlib.abc.MetaPathFinder):
    """Finds the compiled modules' ``.py`` files ahead of their extensions."""

    def __init__(self, names: Sequence[str]) -> None:
        self.names = {f"gateway.{n}": os.path.join(HERE, f"{n}.py") for n in names}

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        source = self.names.get(fullname)
        return importlib.util.spec_from_file_location(fullname, source) if source else None


def use_sources_if_needed() -> None:
    if any(isinstance(f, _Sources) for f in sys.meta_path):
        return
    if os.environ.get(PURE_ENV) == "1":
        sys.meta_path.insert(0, _Sources(COMPILED))
        return
    changed = stale()
    if changed:
        log.warning(
            "gateway: %s changed since it was compiled; running all compiled modules from "
            "source (slower) until rebuilt: ./dev up|test, or pip install -e .",
            ", ".join(f"{n}.py" for n in changed),
        )
        sys.meta_path.insert(0, _Sources(COMPILED))


def compiled() -> bool:
    """Whether the gateway's per-request path runs compiled in this process."""
    server = importlib.import_module("gateway.server")
    return not (server.__file__ or "").endswith(".py")


if __name__ == "__main__":
    print("\n".join(os.path.relpath(p) for p in sources()))
