"""Desired state: what should run for a service, as a pure function of its stored state
and the settings. Tested table-style; the reconciler applies its result once per cycle."""

from __future__ import annotations

import hashlib
import json

from controlplane.model.eas_spec import Container, Storage
from controlplane.model.spec import StoredSpec, k8s_name
from controlplane.model.states import ServiceState
from controlplane.runtime.base import DesiredReplicaSet, Image, Mount, Resources
from processors import registry


def desired(state: ServiceState) -> DesiredReplicaSet:
    spec = state.spec
    metadata = spec.metadata
    resources = Resources(
        cpu=metadata.cpu,
        gpu=metadata.gpu,
        memory_mb=metadata.memory,
        resource_group=metadata.resource,
    )
    work = spec.workload
    image = _image(spec)
    sidecars = tuple(_sidecar(c) for c in (spec.containers or [])[1:])
    mounts = tuple(_mount(s) for s in spec.storage or [])
    types = tuple(spec.cloud.computing.types) if spec.cloud and spec.cloud.computing else ()
    rolling = _rolling(spec)
    grace = metadata.eas.termination_grace_period if metadata.eas else None
    template = {
        "processor": work.processor,
        "params": work.params,
        **({"image": repr(image), "mounts": repr(mounts)} if image or mounts else {}),
        **({"sidecars": repr(sidecars)} if sidecars else {}),
        **({"types": types} if types else {}),
        **({"grace": grace} if grace is not None else {}),
        **(
            {"sigterm": metadata.rpc.enable_sigterm}
            if metadata.rpc.enable_sigterm is not None
            else {}
        ),
        "oss_endpoint": spec.oss_endpoint,
        **({"warm_up": spec.warm_up_data_path} if spec.warm_up_data_path else {}),
        "resources": [resources.cpu, resources.gpu, resources.memory_mb, resources.resource_group],
        # Absent until the first restart, so templates made before it keep their hash.
        **({"restarts": state.restarts} if state.restarts else {}),
    }
    replicas = 0 if state.stopped or state.deleting else metadata.instance
    return DesiredReplicaSet(
        service=state.name,
        object_name=k8s_name(state.name),
        uid=state.uid,
        generation=state.generation,
        replicas=replicas,
        processor=work.processor,
        params=tuple(work.params),
        oss_endpoint=spec.oss_endpoint,
        resources=resources,
        template_hash=_hash(template),
        warm_up=spec.warm_up_data_path,
        image=image,
        sidecars=sidecars,
        mounts=mounts,
        instance_types=types,
        rolling=rolling,
        termination_grace_seconds=grace,
        enable_sigterm=metadata.rpc.enable_sigterm,
        retire=frozenset(state.retire),
    )


def _image(spec: StoredSpec) -> Image | None:
    """The container as a runtime runs it; a Triton one's flags normalised by the
    processor (the mount path left as written: the runtime fills it)."""
    if not spec.containers:
        return None
    container = spec.containers[0]
    argv = container.argv
    if container.runs_triton:
        argv = [argv[0], *registry.get("triton").validate(argv[1:])]
    return _as_image(container, argv, triton=container.runs_triton)


def _sidecar(container: Container) -> Image:
    """A container beside the serving one: run as written."""
    return _as_image(container, container.argv, triton=False)


def _as_image(container: Container, argv: list[str], *, triton: bool) -> Image:
    checks = tuple(
        (kind, check.model_dump(mode="json", exclude_none=True))
        for kind, check in (
            ("startup", container.startup_check),
            ("liveness", container.liveness_check),
            ("readiness", container.readiness_check),
        )
        if check is not None
    )
    return Image(
        image=container.image,
        argv=tuple(argv),
        port=container.port,
        env=tuple((e.name, e.value) for e in container.env or []),
        checks=checks,
        triton=triton,
    )


def _mount(storage: Storage) -> Mount:
    if storage.oss is not None:
        return Mount(storage.mount_path, "oss", storage.oss.path, read_only=storage.oss.readOnly)
    if storage.nfs is not None:
        nfs = storage.nfs
        return Mount(storage.mount_path, "nfs", nfs.path, nfs.server, nfs.readOnly)
    size = storage.empty_dir.size_limit if storage.empty_dir else None
    return Mount(storage.mount_path, "memory", size_gb=size)


def _rolling(spec: StoredSpec) -> tuple[int | str, int | str] | None:
    strategy = spec.metadata.rolling_strategy
    if strategy is None:
        return None
    surge = 1 if strategy.max_surge is None else strategy.max_surge
    unavailable = 0 if strategy.max_unavailable is None else strategy.max_unavailable
    return surge, unavailable


def _hash(value: object) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()[:12]
