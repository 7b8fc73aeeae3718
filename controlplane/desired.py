"""Desired state: what should run for a service, as a pure function of its stored state
and the settings. Tested table-style; the reconciler applies its result once per cycle."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass

from controlplane.runtime.base import DesiredReplicaSet, Resources
from controlplane.spec import StoredSpec, k8s_name


@dataclass(frozen=True)
class ServiceState:
    """The parts of a stored service the reconciler acts on."""

    name: str
    uid: str
    generation: int
    spec: StoredSpec
    stopped: bool
    deleting: bool
    restarts: int = 0  # RestartService: each one rolls every replica
    retire: tuple[str, ...] = ()  # DeleteServiceInstances: these replicas are replaced

    @property
    def wakeable(self) -> bool:
        """A request wakes it when it has no replica: its autoscaler allows zero."""
        return self.spec.to_zero and not self.stopped and not self.deleting


def desired(state: ServiceState) -> DesiredReplicaSet:
    spec = state.spec
    metadata = spec.metadata
    resources = Resources(
        cpu=metadata.cpu,
        gpu=metadata.gpu,
        memory_mb=metadata.memory,
        resource_group=metadata.resource,
    )
    template = {
        "processor": spec.processor,
        "params": spec.processor_params,
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
        processor=spec.processor,
        params=tuple(spec.processor_params),
        oss_endpoint=spec.oss_endpoint,
        resources=resources,
        template_hash=_hash(template),
        warm_up=spec.warm_up_data_path,
        retire=frozenset(state.retire),
    )


def _hash(value: object) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()[:12]
