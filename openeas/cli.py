"""``openeas``: the one entry point of every deployable (``[project.scripts]``).

The first argument picks a command; each command lives with the code it runs and is imported
only when chosen, so ``openeas processor run`` in a replica does not import the servers.
To add a command, add one line to ``COMMANDS``: ``"name": "package.module:function"``, where
the function takes the remaining arguments (``list[str]``) and returns the exit code.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable
from typing import cast

COMMANDS: dict[str, str] = {
    "processor": "processors.cli:main",
    "migrate": "controlplane.cli:migrate_main",
    "controlplane": "controlplane.cli:controlplane_main",
    "gateway": "gateway.cli:main",
    "up": "openeas.up:main",
    "manifests": "controlplane.runtime.kubernetes.manifest_cli:main",
}


def main(argv: list[str] | None = None) -> int:
    """Dispatch ``openeas <command> <args…>``; the process exit code."""
    args = sys.argv[1:] if argv is None else argv
    known = ", ".join(sorted(COMMANDS))
    if not args or args[0] in ("-h", "--help"):
        print(f"usage: openeas <command> [args...]\ncommands: {known}")
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
