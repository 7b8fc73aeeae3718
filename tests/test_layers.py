"""The import graph has visible floors (docs/architecture.md, "Layout: floors that import only
downward"): the shared contract at the bottom, the entry points at the top, nothing importing
upward and no cycles between modules; inside the gateway and the control plane, wings import
only the floors below them. Read statically from the sources, so a lazy import inside a function
counts too.

``python tests/test_layers.py`` prints, per package, its modules, its floors (the longest
chain of imports inside it), its upward imports, its cycles and the folders of it that import
each other."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = (
    "contract",
    "startup",
    "processors",
    "controlplane",
    "gateway",
    "eascmd",
    "openeas",
    "migrations",
)

# What each package may import of ours, besides itself.
ALLOWED = {
    "contract": set(),
    "startup": set(),
    "processors": {"contract"},
    "gateway": {"contract", "startup"},
    "eascmd": {"contract"},
    "controlplane": {"contract", "startup", "processors"},
    "migrations": {"controlplane"},
    "openeas": {"contract", "processors", "controlplane", "gateway", "eascmd", "migrations"},
}
# The gateway's wings and what each may import of the gateway besides itself: routing at the
# bottom, the one admission core above it, the doors on top; neither door imports the other's
# admission. (The HTTP door and mirroring still use each other: a mirror's copy is an HTTP
# exchange, and the proxy starts it.)
GATEWAY_SHARED = {"gateway.metrics", "gateway.settings", "gateway.wake", "gateway.admission"}
GATEWAY_WINGS = {
    "gateway.routing": set(),
    "gateway.admission": {"gateway.routing", "gateway.wake"},
    "gateway.mirroring": {"gateway.routing", "gateway.http", "gateway.metrics"},
    # the gRPC relay writes and yields as the HTTP door does (its socket-level helpers only)
    "gateway.grpc": {"gateway.routing", "gateway.http.writes", "gateway.http.yielding"}
    | GATEWAY_SHARED,
    "gateway.http": {"gateway.routing", "gateway.mirroring"} | GATEWAY_SHARED,
}
# The control plane's wings, bottom up: the stored values, the store, the runtimes, elasticity,
# the reconciler (which runs the autoscalers), the API. The modules left at the package's top
# are its entry points (server, CLIs) and two shared leaves the wings may read.
CONTROLPLANE_SHARED = {"controlplane.metrics", "controlplane.settings"}
_MODEL = {"controlplane.model"}
_STORE = _MODEL | {"controlplane.store"}
_RUNTIME = _STORE | {"controlplane.runtime"}
CONTROLPLANE_WINGS = {
    "controlplane.model": set(),
    "controlplane.store": _MODEL,
    "controlplane.runtime": _STORE,
    "controlplane.elasticity": _RUNTIME | {"controlplane.metrics"},
    "controlplane.reconcile": _RUNTIME | {"controlplane.elasticity", "controlplane.metrics"},
    "controlplane.api": _RUNTIME | {"controlplane.elasticity"} | CONTROLPLANE_SHARED,
}
WINGS = GATEWAY_WINGS | CONTROLPLANE_WINGS
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


def _within(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


@pytest.mark.parametrize("wing", sorted(WINGS))
def test_a_wing_imports_only_the_floors_below_it(wing: str) -> None:
    package = wing.split(".")[0]
    allowed = WINGS[wing] | {wing}
    upward = {
        (module, target)
        for module, targets in GRAPH.items()
        if _within(module, wing)
        for target in targets
        if _within(target, package) and target != package
        if not any(_within(target, a) for a in allowed)
    }
    assert upward == set()


def cycles(modules: set[str] | None = None) -> list[list[str]]:
    """The import cycles among ``modules`` (default: all)."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    found: list[list[str]] = []

    def visit(module: str, path: list[str]) -> None:
        state[module] = 1
        for target in sorted(GRAPH[module]):
            if state.get(target) == 1:
                found.append([*path[path.index(target) :], target])
            elif target not in state:
                visit(target, [*path, target])
        state[module] = 2

    for module in sorted(modules if modules is not None else GRAPH):
        if module not in state:
            visit(module, [module])
    return found


def test_no_import_cycles() -> None:
    assert cycles() == []


def test_eascmd_needs_no_server_library() -> None:
    third_party = {
        name.split(".")[0]
        for path in (ROOT / "eascmd").rglob("*.py")
        for name in _imports(path)
        if name.split(".")[0] not in PACKAGES
    }
    assert third_party - set(sys.stdlib_module_names) - {"__future__"} == EASCMD_THIRD_PARTY


def _floors(modules: set[str]) -> int:
    """The longest chain of imports among ``modules``."""
    depth: dict[str, int] = {}

    def floors(module: str) -> int:
        if module not in depth:
            depth[module] = 0  # (no cycles: a module is not below itself)
            below = [t for t in GRAPH[module] & modules if t != module]
            depth[module] = 1 + max(map(floors, below), default=0)
        return depth[module]

    return max(map(floors, modules))


def report() -> str:
    """Per package: modules, floors, upward imports, cycles, and its folders that import
    each other (the figures of a layering change's closing note)."""

    def folder(module: str) -> str:
        is_package = (ROOT / module.replace(".", "/") / "__init__.py").exists()
        return module if is_package else module.rsplit(".", 1)[0]

    lines = [f"{'package':14}{'modules':>8}{'floors':>8}{'upward':>8}{'cycles':>8}  two-way"]
    for package in PACKAGES:
        modules = {m for m in GRAPH if m.split(".")[0] == package}
        upward = sum(
            1
            for m in modules
            for t in GRAPH[m]
            if t.split(".")[0] not in ALLOWED[package] | {package}
        )
        edges = {(folder(m), folder(t)) for m in modules for t in GRAPH[m] & modules}
        two_way = sorted({tuple(sorted(e)) for e in edges if e[0] != e[1] and e[::-1] in edges})
        lines.append(
            f"{package:14}{len(modules):8}{_floors(modules):8}{upward:8}"
            f"{len(cycles(modules)):8}  {', '.join(' <-> '.join(e) for e in two_way) or '-'}"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    print(report())
