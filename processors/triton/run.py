"""``openeas processor run triton``: what runs inside every replica of a triton service.

The local runtime starts it as a process and the kubernetes runtime as a container's command
(both from :func:`processors.triton.plan.plan`). It validates the user's flags again (the
replica may run a newer version than the one that accepted the spec), makes the model
repository local (pulling ``oss://`` into the shared model cache), rewrites
``--model-repository`` to that copy, adds the platform's ports, addresses and plugin
directories and the admin-API fences (:mod:`.fences`), and supervises tritonserver until
it exits.

Exit codes: :mod:`processors.exits` (tritonserver's own code passes through).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from processors import exits, repository
from processors.base import Ports, ProcessorError
from processors.exits import fail, say
from processors.triton import backends, binary, fences, flags, supervisor


def run(params: Sequence[str], ports: Ports, model_cache: Path | None) -> int:
    """Pull if needed, then run tritonserver to its end; the process's exit code."""
    try:
        checked = flags.parse(params)
    except ProcessorError as e:
        return fail(exits.BAD_PARAMS, e.one_line())
    try:
        server = binary.locate()
    except binary.TritonserverNotFound as e:
        return fail(exits.NO_SERVER_BINARY, str(e))
    cache = model_cache or repository.default_cache(os.environ)
    try:
        local = repository.local_repository(
            checked.model_repository,
            cache,
            endpoint=os.environ.get("OSS_ENDPOINT") or None,
        )
    except repository.PullFailed as e:
        return fail(e.exit_code, f"model pull failed: {e}")
    problem = backends.missing(local, backends.directory(server.args))
    if problem is not None:
        return fail(exits.BACKEND_MISSING, problem)
    say(f"serving {checked.model_repository} from {local} with {server.binary}")
    argv = tritonserver_argv(server, checked, local, ports, fences.new_key())
    try:
        return supervisor.supervise(argv, server.environ(os.environ))
    except OSError as e:  # exec failed: not a binary for this machine, no permission
        return fail(exits.NO_SERVER_BINARY, f"cannot start {server.binary}: {e.strerror}")


def tritonserver_argv(
    server: binary.Tritonserver,
    checked: flags.TritonFlags,
    local: Path,
    ports: Ports,
    admin_key: str,
) -> list[str]:
    """The tritonserver command line: the user's flags on the local copy, then the
    platform's (tenants cannot pass these, so order carries no override), the admin APIs
    fenced by ``admin_key`` (:mod:`.fences`)."""
    return [
        str(server.binary),
        *checked.normalised(model_repository=str(local)),
        f"--http-port={ports.http}",
        f"--grpc-port={ports.grpc}",
        f"--metrics-port={ports.metrics}",
        f"--http-address={ports.host}",
        f"--grpc-address={ports.host}",
        f"--metrics-address={ports.host}",
        *fences.restricted_api_args(admin_key),
        *server.args,
    ]
