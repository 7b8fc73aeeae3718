"""Build step beyond pyproject.toml: the gateway's per-request modules compiled with mypyc
(see gateway/native.py for which, and why) and its one C module. OPENEAS_PURE_PYTHON=1
builds without them."""

import importlib.util
import os

from setuptools import Extension, setup

# Loaded by path: importing the package here would run its import-time checks.
_spec = importlib.util.spec_from_file_location("_native", os.path.join("gateway", "native.py"))
assert _spec is not None and _spec.loader is not None
native = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(native)


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
record = os.path.join("gateway", native.RECORD)
if os.environ.get(native.PURE_ENV) == "1":
    if os.path.exists(record):
        os.remove(record)  # extensions left from an earlier build are not this one's
else:
    from mypyc.build import mypycify

    # Recorded first: a source edited while it compiles no longer matches its build.
    with open(record, "w") as f:
        f.write(native.record_lines(native.COMPILED, "gateway"))
    ext_modules = mypycify([*MYPY_OPTIONS, *native.sources()], opt_level="3")
    # A socket write that holds the GIL (gateway/http/writes.py says why).
    ext_modules.append(Extension("gateway.http._nowait", native.C_SOURCES))

setup(ext_modules=ext_modules)
