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


def run_args(params: Sequence[str], ports: Ports, warm_up: str | None = None) -> list[str]:
    """Arguments of ``openeas`` that run one replica with the platform's ports."""
    extra = ["--warm-up-data-path", warm_up] if warm_up else []
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
        *extra,
        "--",
        *params,
    ]


def plan(
    params: Sequence[str],
    ports: Ports,
    oss_endpoint: str | None,
    model_dir: str | None,
    /,
    *,
    warm_up: str | None = None,
    warm_up_dir: str | None = None,
) -> ReplicaPlan:
    """Plan for one replica; ``oss_endpoint`` (the spec's) overrides ``OSS_ENDPOINT``. With
    ``model_dir``, a remote repository is pulled there by the runtime and served from it;
    with ``warm_up_dir``, remote warm-up files (``warm_up``) likewise."""
    checked = flags.parse(params)
    pull = _pulled(checked.model_repository, model_dir)
    warm_up_pull = _pulled(warm_up, warm_up_dir) if warm_up else None
    args = run_args(
        checked.normalised(model_repository=pull.into if pull else None),
        ports,
        warm_up_pull.into if warm_up_pull else warm_up,
    )
    return ReplicaPlan(
        command=[sys.executable, "-m", "openeas.cli", *args],
        env={"OSS_ENDPOINT": oss_endpoint} if oss_endpoint else {},
        http_port=ports.http,
        pull=pull,
        openeas_args=args,
        warms_up=bool(warm_up),
        warm_up_pull=warm_up_pull,
        rings=True,
    )


def _pulled(uri: str, into: str | None) -> Pull | None:
    """What the runtime pulls for a remote ``uri`` when it was given a folder for it."""
    return Pull(uri, into) if into is not None and resolve_local(uri) is None else None
