"""``bench/builds.py``: a ``--base`` checkout without a build (a fresh ``git worktree``) gets
its gateway compiled in place before a before/after run, so the run compares the change,
not a compiled gateway with a pure-Python one."""

from __future__ import annotations

import shutil
import subprocess
import zipfile
from pathlib import Path

import pytest

from bench.builds import build_files, compile_base, gateway_compiled, unpack_build
from gateway import native

ROOT = Path(__file__).resolve().parents[2]
SO = ".cpython-311-x86_64-linux-gnu.so"


@pytest.mark.parametrize(
    ("member", "kept"),
    [
        (f"gateway/http/server{SO}", True),
        (f"9b02a299150c10e1f75e__mypyc{SO}", True),  # the modules' shared runtime, at the root
        ("gateway/compiled.txt", True),  # what they were compiled from: without it, not loaded
        ("gateway/http/server.py", False),  # the checkout's own sources stay as they are
        ("controlplane/compiled.txt", False),
        ("openeas-0.1.0.dist-info/RECORD", False),
    ],
)
def test_a_build_in_place_is_the_extensions_and_their_record(member: str, kept: bool) -> None:
    assert build_files([member]) == ([member] if kept else [])


def test_a_wheels_build_lands_beside_the_sources_it_came_from(tmp_path: Path) -> None:
    wheel, tree = tmp_path / "openeas.whl", tmp_path / "tree"
    (tree / "gateway" / "http").mkdir(parents=True)
    (tree / "gateway" / "http" / "server.py").write_text("# the checkout's source\n")
    with zipfile.ZipFile(wheel, "w") as z:
        z.writestr(f"gateway/http/server{SO}", b"ELF")
        z.writestr("gateway/compiled.txt", "http.server 0123\n")
        z.writestr("gateway/http/server.py", "# the wheel's copy\n")
        z.writestr(f"abc__mypyc{SO}", b"ELF")
    assert sorted(unpack_build(wheel, tree)) == sorted(
        [f"gateway/http/server{SO}", "gateway/compiled.txt", f"abc__mypyc{SO}"]
    )
    assert (tree / "gateway" / "http" / f"server{SO}").read_bytes() == b"ELF"
    assert (tree / f"abc__mypyc{SO}").exists()
    assert (tree / "gateway" / "http" / "server.py").read_text() == "# the checkout's source\n"


def sources_only(tmp_path: Path) -> Path:
    """The checkout's tracked files and nothing built: what `git worktree add` makes."""
    tree = tmp_path / "worktree"
    listed = subprocess.run(
        ["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    for name in listed:
        if (ROOT / name).is_file():
            (tree / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, tree / name)
    return tree


def test_a_checkout_reads_as_this_process_runs_it_and_a_fresh_one_as_pure(
    tmp_path: Path,
) -> None:
    assert gateway_compiled(ROOT) == native.compiled()
    assert not gateway_compiled(sources_only(tmp_path))


def test_a_commit_from_before_the_build_step_is_left_pure_python(tmp_path: Path) -> None:
    (tmp_path / "gateway").mkdir()
    (tmp_path / "gateway" / "__init__.py").write_text("")
    assert compile_base(tmp_path).endswith("pure Python (that commit has no build step)")
    assert not list(tmp_path.rglob("*.so"))


@pytest.mark.slow
@pytest.mark.network  # pip wheel in an isolated environment: fetches setuptools and mypy
def test_a_fresh_worktree_is_compiled_in_place_before_it_is_measured(tmp_path: Path) -> None:
    if not native.compiled():
        pytest.skip("this checkout runs pure Python (OPENEAS_PURE_PYTHON=1 or no build)")
    tree = sources_only(tmp_path)
    assert compile_base(tree) == f"{tree}: gateway compiled now"
    assert gateway_compiled(tree)
    assert compile_base(tree) == f"{tree}: gateway compiled"  # built once, not again
