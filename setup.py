"""Build step beyond pyproject.toml: the gateway's per-request modules compiled with mypyc
(see gateway/native.py for which, and why). OPENEAS_PURE_PYTHON=1 builds without them."""

import importlib.util
import os

from setuptools import setup


def _compiled_sources() -> list[str]:
    # Loaded by path: importing the package here would run its import-time checks.
    spec = importlib.util.spec_from_file_location("_native", os.path.join("gateway", "native.py"))
    assert spec is not None and spec.loader is not None
    native = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(native)
    return [os.path.join("gateway", f"{name}.py") for name in native.COMPILED]


# The same build wherever it runs: third-party packages are not looked at (their types are
# Any, as in a fresh build environment), so the strict checks that Any trips are off here;
# the full strict check is the test command's mypy.
MYPY_OPTIONS = [
    "--no-site-packages",
    "--allow-subclassing-any",
    "--no-warn-return-any",
    "--no-warn-unused-ignores",
    "--allow-untyped-decorators",
]

ext_modules = []
if os.environ.get("OPENEAS_PURE_PYTHON") != "1":
    from mypyc.build import mypycify

    ext_modules = mypycify([*MYPY_OPTIONS, *_compiled_sources()], opt_level="3")

setup(ext_modules=ext_modules)
