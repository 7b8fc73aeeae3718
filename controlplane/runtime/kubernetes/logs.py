"""Replica logs on Kubernetes, read through the API server: any control-plane replica can
serve ``eascmd logs``, not only the one leading the reconciler (it needs no watch)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from controlplane.runtime.kubernetes import replicas
from controlplane.runtime.kubernetes.client import POD, KubeClient, NotFound, Object
from controlplane.runtime.kubernetes.manifests import PROCESSOR_CONTAINER, PULL_CONTAINER, selector
from controlplane.runtime.kubernetes.settings import KubernetesSettings


class KubernetesLogs:
    """Connects on first use, so a control plane with a bad kubeconfig still starts and
    answers every other call."""

    def __init__(self, settings: KubernetesSettings, *, client: KubeClient | None = None) -> None:
        self._settings = settings
        self._client = client

    async def logs(
        self, service: str, replica: int | None, tail: int, *, previous: bool = False
    ) -> str:
        """A replica's output (``replica`` indexes ``observe``; None: the newest pod). The
        model pull's while the replica is still initialising. ``previous``: the output of
        the container before its last restart (FileNotFoundError when it has none)."""
        client, pod, container = await self._choose(service, replica)
        try:
            return await asyncio.to_thread(client.pod_log, pod, container, tail, previous=previous)
        except NotFound as e:
            raise FileNotFoundError(f"no previous run of that replica of {service!r}") from e

    async def follow(self, service: str, replica: int | None, tail: int) -> AsyncIterator[str]:
        """The last ``tail`` lines, then the output as it comes, until the container ends
        or the caller stops iterating (the stream is closed then)."""
        client, pod, container = await self._choose(service, replica)
        stream = await asyncio.to_thread(client.follow_log, pod, container, tail)
        chunks = iter(stream)
        try:
            while True:
                chunk = await asyncio.to_thread(next, chunks, None)
                if chunk is None:
                    return
                yield chunk
        finally:
            stream.close()

    async def _choose(self, service: str, replica: int | None) -> tuple[KubeClient, str, str]:
        if self._client is None:
            self._client = KubeClient(self._settings)
        client = self._client
        pods, _ = await asyncio.to_thread(client.list, POD, selector(service))
        ordered = replicas.replica_pods(pods)
        if replica is None:
            chosen = max(ordered, key=_created, default=None)
        else:
            chosen = ordered[replica] if 0 <= replica < len(ordered) else None
        if chosen is None:
            raise FileNotFoundError(f"no replica {replica} of {service!r}")
        container = PULL_CONTAINER if _initialising(chosen) else PROCESSOR_CONTAINER
        return client, chosen["metadata"]["name"], container


def _created(pod: Object) -> tuple[str, str]:
    return str(pod["metadata"].get("creationTimestamp", "")), str(pod["metadata"]["name"])


def _initialising(pod: Object) -> bool:
    statuses: list[dict[str, Any]] = (pod.get("status") or {}).get("initContainerStatuses") or []
    return any(not s.get("ready") for s in statuses)
