"""The benches are scripts: each loaded here as a module under a name of the test's own,
with ``bench/`` on the path while it loads (they import their siblings as a script does),
and under a name that does not hide the project's package it is named like (``gateway``)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

BENCH = Path(__file__).resolve().parents[2] / "bench"


def load_bench(script: str, as_name: str) -> ModuleType:
    """``bench/<script>`` as the module ``as_name``."""
    sys.path.insert(0, str(BENCH))
    try:
        spec = importlib.util.spec_from_file_location(as_name, BENCH / script)
        assert spec is not None and spec.loader is not None
        module = sys.modules[spec.name] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(BENCH))
