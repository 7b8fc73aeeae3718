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
import secrets
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from processors import doorbell, exits, progress, repository, storage
from processors.base import READINESS_PATH, Ports, ProcessorError
from processors.exits import fail, say
from processors.triton import backends, binary, fences, flags, supervisor, warmup_files

if TYPE_CHECKING:
    from processors.triton import warmup


def run(
    params: Sequence[str], ports: Ports, model_cache: Path | None, warm_up: str | None = None
) -> int:
    """Pull if needed, then run tritonserver to its end; the process's exit code. With
    ``warm_up`` (``warm_up_data_path``), its requests are replayed once tritonserver is
    ready, before the ready file tells the runtime so."""
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
    replay: warmup.WarmUp | None = None
    if warm_up:
        # Its HTTP client only when asked for: urllib's stack is a good part of a start.
        from processors.triton import warmup

        try:
            requests = warmup_files.load(_local_files(warm_up, cache))
        except repository.PullFailed as e:
            return fail(e.exit_code, f"warm-up files pull failed: {e}")
        except (warmup_files.WarmUpFileError, OSError) as e:
            return fail(exits.WARM_UP_FAILED, f"warm_up_data_path: {e}")
        url = f"http://{_loopback(ports.host)}:{ports.http}"
        sink = progress.sink_from(os.environ)
        replay = warmup.WarmUp(requests, url, sink, warmup.ready_file(os.environ))
    say(f"serving {checked.model_repository} from {local} with {server.binary}")
    argv = tritonserver_argv(server, checked, local, ports, fences.new_key(), shm_prefix())
    failed: list[str] = []
    bell = doorbell.Doorbell.from_env(os.environ)
    host = _loopback(ports.host)

    def beside(child: subprocess.Popen[bytes]) -> None:
        """Once tritonserver runs: tell the runtime, warm up if asked, tell it when ready."""
        bell.ring(doorbell.SERVER_STARTED)
        if replay is None:
            if doorbell.wait_ready(host, ports.http, READINESS_PATH, child):
                bell.ring()
            return
        reason = replay.run(child)
        if reason is not None:
            failed.append(reason)
            child.terminate()  # a replica that cannot warm up never serves
        else:
            bell.ring()  # warmed up: the ready file is there

    try:
        watch = replay is not None or bell.fd is not None
        code = supervisor.supervise(argv, server.environ(os.environ), beside if watch else None)
    except OSError as e:  # exec failed: not a binary for this machine, no permission
        return fail(exits.NO_SERVER_BINARY, f"cannot start {server.binary}: {e.strerror}")
    return fail(exits.WARM_UP_FAILED, failed[0]) if failed else code


def _local_files(uri: str, cache: Path) -> Path:
    """The warm-up files as a local file or folder: a local path in place, ``oss://``
    pulled into the model cache like a repository (same code, same credentials)."""
    try:
        local = storage.resolve_local(uri)
    except storage.StorageError as e:
        raise warmup_files.WarmUpFileError(str(e)) from e
    if local is not None:
        return local
    return repository.local_repository(uri, cache, endpoint=os.environ.get("OSS_ENDPOINT") or None)


def _loopback(host: str) -> str:
    return "127.0.0.1" if host in ("0.0.0.0", "") else host


def tritonserver_argv(
    server: binary.Tritonserver,
    checked: flags.TritonFlags,
    local: Path,
    ports: Ports,
    admin_key: str,
    shm_prefix: str,
) -> list[str]:
    """The tritonserver command line: the user's flags on the local copy, then the
    platform's (tenants cannot pass these, so order carries no override), the admin APIs
    fenced by ``admin_key`` (:mod:`.fences`), and the python backend's shared memory named
    from ``shm_prefix`` (:func:`shm_prefix`)."""
    return [
        str(server.binary),
        *checked.normalised(model_repository=str(local)),
        *platform_args((), ports, admin_key, shm_prefix),
        *server.args,
    ]


def platform_args(
    params: Sequence[str], ports: Ports, admin_key: str, shm_prefix: str
) -> list[str]:
    """The platform's flags after the tenant's ``params``: ports and addresses, the admin
    APIs fenced by ``admin_key`` and the python backend's shm regions named from
    ``shm_prefix``. Also what an image running tritonserver itself is given."""
    return [
        *params,
        f"--http-port={ports.http}",
        f"--grpc-port={ports.grpc}",
        f"--metrics-port={ports.metrics}",
        f"--http-address={ports.host}",
        f"--grpc-address={ports.host}",
        f"--metrics-address={ports.host}",
        *fences.restricted_api_args(admin_key),
        f"--backend-config=python,{flags.SHM_PREFIX_SETTING}={shm_prefix}",
    ]


def shm_prefix() -> str:
    """A prefix of its own for a start's python-backend shared memory regions (tenants may
    not set it: :mod:`.flags`). Python backends before the bundled one number their regions
    ``triton_python_backend_shm_region_1``, ``_2``, … on every tritonserver alike, so two
    replicas on one host (the local runtime's) would open each other's; the bundled one
    appends a UUID, and the prefix keeps a replica's regions its own with either."""
    return f"openeas_{secrets.token_hex(6)}_"
