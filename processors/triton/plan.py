"""The replica plan of a ``triton`` service: what a runtime starts for each replica.

The control plane's reconciler calls :func:`plan` (through the processor registry) when it
computes the desired replicas. Pure. The replica runs ``openeas processor run triton``, which
pulls the model repository and then starts tritonserver, so the same plan serves the local
runtime (``command``, a process of this Python) and the kubernetes runtime (``openeas_args``
under the image's ``openeas`` entry point).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from processors.base import Ports, Pull, ReplicaPlan
from processors.storage.uri import resolve_local
from processors.triton import flags


def run_args(params: Sequence[str], ports: Ports) -> list[str]:
    """Arguments of ``openeas`` that run one replica with the platform's ports."""
    return [
        "processor",
        "run",
        "triton",
        "--http-port",
        str(ports.http),
        "--grpc-port",
        str(ports.grpc),
        "--metrics-port",
        str(ports.metrics),
        "--host",
        ports.host,
        "--",
        *params,
    ]


def plan(
    params: Sequence[str], ports: Ports, oss_endpoint: str | None, model_dir: str | None
) -> ReplicaPlan:
    """Plan for one replica; ``oss_endpoint`` (the spec's) overrides ``OSS_ENDPOINT``. With
    ``model_dir``, a remote repository is pulled there by the runtime and served from it."""
    checked = flags.parse(params)
    remote = checked.model_repository if resolve_local(checked.model_repository) is None else None
    pull = Pull(remote, model_dir) if remote is not None and model_dir is not None else None
    args = run_args(checked.normalised(model_repository=pull.into if pull else None), ports)
    return ReplicaPlan(
        command=[sys.executable, "-m", "openeas.cli", *args],
        env={"OSS_ENDPOINT": oss_endpoint} if oss_endpoint else {},
        http_port=ports.http,
        pull=pull,
        openeas_args=args,
    )
