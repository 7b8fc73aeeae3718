"""Whether a checkout's gateway runs compiled, and its build, for before/after benches.

The gateway's per-request modules are compiled in place at install (``setup.py``, mypyc);
a fresh ``git worktree`` has their sources but no build, so a ``--base`` gateway run from
it is pure Python, about a quarter slower per call, and a before/after figure would measure
the build, not the change. :func:`compile_base` builds such a checkout in place, the way
``pip install -e`` would (a wheel built in pip's isolated build environment, its extensions
unpacked beside their sources), and says how each gateway runs.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

# gateway/native.py by path: run as scripts, the benches' folder comes first on the path and
# `import gateway` would find bench/gateway.py (setup.py loads it the same way).
_spec = importlib.util.spec_from_file_location(
    "_native", Path(__file__).resolve().parent.parent / "gateway" / "native.py"
)
assert _spec is not None and _spec.loader is not None
native = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(native)
RECORD = f"gateway/{native.RECORD}"  # the build's record of what it compiled


def gateway_compiled(tree: Path) -> bool:
    """Whether a process started on checkout ``tree`` (as the benches start them, with
    ``PYTHONPATH``) runs the gateway's per-request path compiled."""
    code = "from gateway import native; print(native.compiled())"
    env = dict(os.environ, PYTHONPATH=str(tree))
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=tree, env=env, capture_output=True, text=True
    )
    return done.stdout.strip() == "True"


def build_files(names: list[str]) -> list[str]:
    """The members of a wheel of the project that make its build in place: the compiled
    extensions and the gateway's record of what they were compiled from."""
    return [n for n in names if n.endswith(".so") or n == RECORD]


def unpack_build(wheel: Path, tree: Path) -> list[str]:
    """Unpack ``wheel``'s build into checkout ``tree``, beside the sources it came from."""
    with zipfile.ZipFile(wheel) as z:
        members = build_files(z.namelist())
        for name in members:
            z.extract(name, tree)
    return members


def compile_base(tree: Path) -> str:
    """Build checkout ``tree``'s gateway in place if it has a build step and no build; a
    line saying how its gateway runs."""
    if gateway_compiled(tree):
        return f"{tree}: gateway compiled"
    if not (tree / "gateway" / "native.py").exists():
        return f"{tree}: gateway pure Python (that commit has no build step)"
    if os.environ.get(native.PURE_ENV) == "1":
        return f"{tree}: gateway pure Python ({native.PURE_ENV}=1)"
    with tempfile.TemporaryDirectory(prefix="openeas-base-build-") as out:
        argv = [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", out, str(tree)]
        done = subprocess.run(argv, capture_output=True, text=True)
        wheels = list(Path(out).glob("*.whl"))
        if done.returncode or len(wheels) != 1:
            return f"{tree}: gateway pure Python (its build failed: {done.stderr[-300:]})"
        unpack_build(wheels[0], tree)
    how = "compiled now" if gateway_compiled(tree) else "pure Python (built, yet not loaded)"
    return f"{tree}: gateway {how}"


def announce(root: Path, base: Path | None) -> None:
    """Print how each gateway of a run runs, the ``--base`` one built first if it can be."""
    print(f"{root}: gateway {'compiled' if gateway_compiled(root) else 'pure Python'}")
    if base is not None:
        print(compile_base(base.resolve()), flush=True)
