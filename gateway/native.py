"""Which gateway modules are compiled, and the fall-back to their sources.

The per-request path of the gateway — the callbacks of :mod:`gateway.http.server`,
:mod:`gateway.http.upstream` and :mod:`gateway.http.proxy` and what they call — is compiled to C
by mypyc when the package is built (``setup.py``): the same typed Python, fewer
instructions per call (docs/performance.md). Coroutines are never in
these modules: they stay interpreted (mypyc's coroutines are where its bugs have been).

The build records the digest of each source it compiled (``RECORD``, written by
``setup.py`` before compiling). Every module built as an extension is skipped for its
source, all of them together (they call each other natively), when ``OPENEAS_PURE_PYTHON=1``
or when any source differs from what was compiled (an edited checkout: ``./dev``
rebuilds), or the record is missing (a leftover build) — so what runs is never other than
what is read. :func:`use_sources_if_needed` runs once, from ``gateway/__init__.py``,
before any of them is imported. ``python gateway/native.py`` prints the sources to compile,
the C one too (for ``./dev``).
"""

from __future__ import annotations

import hashlib
import importlib.abc
import importlib.machinery
import importlib.util
import logging
import os
import sys
from collections.abc import Sequence
from types import ModuleType

# Modules under gateway/ built with mypyc, dotted below it: synchronous code only.
COMPILED = (
    "admission",
    "http.derived",
    "http.headers",
    "http.http1",
    "http.pool",
    "http.problems",
    "http.proxy",
    "http.router",
    "http.server",
    "http.splice",
    "http.upstream",
    "http.writes",
    "http.yielding",
    "metrics",
    "mirroring.mirror",
    "routing.auth",
    "routing.balancer",
    "routing.limits",
    "routing.paths",
    "routing.route_table",
    "routing.traffic",
)
# Written in C (setup.py builds it beside them; gateway/http/writes.py falls back to Python).
C_SOURCES = ["gateway/http/_nowait.c"]
PURE_ENV = "OPENEAS_PURE_PYTHON"
RECORD = "compiled.txt"  # beside this file: "<dotted module> <sha256 of its source>" per line

HERE = os.path.dirname(os.path.abspath(__file__))
log = logging.getLogger(__name__)


def sources() -> list[str]:
    """The compiled modules' sources, from the project's root (where ``setup.py`` runs)."""
    return [f"gateway/{_path(name)}" for name in COMPILED]


def _path(name: str) -> str:
    """The source of a module named dotted below ``gateway`` (``http.server``), relative to
    the package."""
    return name.replace(".", "/") + ".py"


def digest(path: str) -> str:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def record_lines(names: Sequence[str], directory: str = HERE) -> str:
    """The build record of ``names`` (``setup.py`` writes it before compiling them)."""
    return "".join(f"{n} {digest(os.path.join(directory, _path(n)))}\n" for n in names)


def _built() -> list[str]:
    """The modules here that have an extension beside their source."""
    names = set()
    for folder, _, entries in os.walk(HERE):
        below = os.path.relpath(folder, HERE).replace(os.sep, ".")
        for entry in entries:
            for suffix in importlib.machinery.EXTENSION_SUFFIXES:
                name = entry.removesuffix(suffix)
                if name != entry and os.path.exists(os.path.join(folder, name + ".py")):
                    names.add(name if below == "." else f"{below}.{name}")
    return sorted(names)


def stale(built: Sequence[str] | None = None) -> list[str]:
    """The built modules whose source is not what was compiled (or of no recorded build)."""
    built = _built() if built is None else built
    try:
        with open(os.path.join(HERE, RECORD)) as f:
            recorded = dict(line.split() for line in f if line.strip())
    except OSError:
        recorded = {}
    return [n for n in built if recorded.get(n) != digest(os.path.join(HERE, _path(n)))]


class _Sources(importlib.abc.MetaPathFinder):
    """Finds the compiled modules' ``.py`` files ahead of their extensions."""

    def __init__(self, names: Sequence[str]) -> None:
        self.names = {f"gateway.{n}": os.path.join(HERE, _path(n)) for n in names}

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        source = self.names.get(fullname)
        return importlib.util.spec_from_file_location(fullname, source) if source else None


def use_sources_if_needed() -> None:
    if any(isinstance(f, _Sources) for f in sys.meta_path):
        return
    built = _built()
    if not built:
        return
    if os.environ.get(PURE_ENV) == "1":
        sys.meta_path.insert(0, _Sources(built))
        return
    changed = stale(built)
    if changed:
        log.warning(
            "gateway: %s not what was compiled; running every compiled module from source "
            "(slower) until rebuilt: ./dev up|test, or pip install -e .",
            ", ".join(_path(n) for n in changed),
        )
        sys.meta_path.insert(0, _Sources(built))


def compiled() -> bool:
    """Whether the gateway's per-request path runs compiled in this process."""
    server = importlib.import_module("gateway.http.server")
    return not (server.__file__ or "").endswith(".py")


if __name__ == "__main__":
    print("\n".join([*sources(), *C_SOURCES]))
