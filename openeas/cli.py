"""``openeas``: the one entry point of every deployable (``[project.scripts]``).

The first argument picks a command; each command lives with the code it runs and is imported
only when chosen, so ``openeas processor run`` in a replica does not import the servers.
To add a command, add one line to ``COMMANDS``: ``"name": "package.module:function"``, where
the function takes the remaining arguments (``list[str]``) and returns the exit code, and
one line to ``SUMMARIES`` for ``openeas --help`` (which imports none of them, to stay fast).
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable
from typing import cast

COMMANDS: dict[str, str] = {
    "up": "openeas.up:main",
    "controlplane": "controlplane.cli:controlplane_main",
    "gateway": "gateway.cli:main",
    "migrate": "controlplane.cli:migrate_main",
    "manifests": "controlplane.manifest_cli:main",
    "processor": "processors.cli:main",
    "secrets": "controlplane.secrets_cli:main",
    "gc": "controlplane.gc_cli:main",
}

SUMMARIES: dict[str, str] = {
    "up": "the whole platform on this machine: API, gateway, console, local replicas (SQLite)",
    "controlplane": "the REST API and the reconciler, for a cluster (settings: OPENEAS_*)",
    "gateway": "the /api/predict/<service> proxy in front of the replicas (OPENEAS_GATEWAY_*)",
    "migrate": "upgrade (or step back) the control plane's database schema",
    "manifests": "print the Kubernetes objects a service config becomes (a dry run)",
    "processor": "what a replica runs: pull a model repository, run tritonserver",
    "secrets": "create the platform's generated Secrets once (the chart's install hook)",
    "gc": "list, or delete with --confirm, replicas whose service has no database row",
}


def usage() -> str:
    width = max(map(len, COMMANDS))
    lines = [f"  {name.ljust(width)}  {SUMMARIES[name]}" for name in COMMANDS]
    return "\n".join(
        [
            "usage: openeas <command> [args...]",
            "",
            "OpenEAS: EAS-compatible serving for NVIDIA Triton.",
            "",
            "commands: (each one a deployable; 'openeas <command> --help' for its options)",
            *lines,
            "",
            "Services are managed with 'eascmd' (eascmd --help).",
        ]
    )


def main(argv: list[str] | None = None) -> int:
    """Dispatch ``openeas <command> <args…>``; the process exit code."""
    args = sys.argv[1:] if argv is None else argv
    known = ", ".join(sorted(COMMANDS))
    if not args or args[0] in ("-h", "--help"):
        print(usage(), file=sys.stdout if args else sys.stderr)
        return 0 if args else 2
    if args[0] not in COMMANDS:
        print(f"openeas: unknown command {args[0]!r}; commands: {known}", file=sys.stderr)
        return 2
    return _load(COMMANDS[args[0]])(args[1:])


def _load(target: str) -> Callable[[list[str]], int]:
    module, _, function = target.partition(":")
    return cast(Callable[[list[str]], int], getattr(importlib.import_module(module), function))


if __name__ == "__main__":
    sys.exit(main())
