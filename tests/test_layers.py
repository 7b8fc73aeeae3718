"""The import graph has visible floors (DESIGN.md, "Layers you can see"): the shared contract at
the bottom, the entry points at the top, nothing importing upward and no cycles between modules.
Read statically from the sources, so a lazy import inside a function counts too."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("contract", "processors", "controlplane", "gateway", "eascmd", "openeas", "migrations")

# What each package may import of ours, besides itself.
ALLOWED = {
    "contract": set(),
    "processors": {"contract"},
    "gateway": {"contract"},
    "eascmd": {"contract"},
    "controlplane": {"contract", "processors"},
    "migrations": {"controlplane"},
    "openeas": {"contract", "processors", "controlplane", "gateway", "eascmd", "migrations"},
}
# eascmd's whole import path: the standard library and our contract (every command must
# start fast, and it must install without the server's dependencies).
EASCMD_THIRD_PARTY: set[str] = set()


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found: set[str] = set()
    package = _module_name(path).rsplit(".", 0 if path.name == "__init__.py" else 1)[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1])
                base = f"{base}.{node.module}" if node.module else base
            # "from pkg import mod" may name a module: count both
            found.add(base)
            found |= {f"{base}.{alias.name}" for alias in node.names}
    return found


def _graph() -> dict[str, set[str]]:
    modules = {_module_name(p): p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")}
    return {name: {i for i in _imports(path) if i in modules} for name, path in modules.items()}


GRAPH = _graph()


@pytest.mark.parametrize("package", PACKAGES)
def test_a_package_imports_only_the_floors_below_it(package: str) -> None:
    upward = {
        (module, target)
        for module, targets in GRAPH.items()
        if module.split(".")[0] == package
        for target in targets
        if target.split(".")[0] not in ALLOWED[package] | {package}
    }
    assert upward == set()


def test_no_import_cycles() -> None:
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    cycles: list[list[str]] = []

    def visit(module: str, path: list[str]) -> None:
        state[module] = 1
        for target in sorted(GRAPH[module]):
            if state.get(target) == 1:
                cycles.append([*path[path.index(target) :], target])
            elif target not in state:
                visit(target, [*path, target])
        state[module] = 2

    for module in sorted(GRAPH):
        if module not in state:
            visit(module, [module])
    assert cycles == []


def test_eascmd_needs_no_server_library() -> None:
    third_party = {
        name.split(".")[0]
        for path in (ROOT / "eascmd").rglob("*.py")
        for name in _imports(path)
        if name.split(".")[0] not in PACKAGES
    }
    assert third_party - set(sys.stdlib_module_names) - {"__future__"} == EASCMD_THIRD_PARTY
