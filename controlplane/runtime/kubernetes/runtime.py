"""The kubernetes runtime: the reconciler's :class:`~controlplane.runtime.base.Runtime` on a
cluster.

``controlplane.runtime.make_runtime`` builds it with ``KubernetesRuntime(settings.k8s,
notify)``. ``apply`` writes the objects of :mod:`.manifests` (server-side apply, skipped when
the live object carries the same hash), ``observe`` reads pods back through :mod:`.replicas`,
and two watch threads (Deployments, Pods) call ``notify`` when something of a service
changed. The client blocks, so every call runs in a worker thread; the event loop never
waits on the API server.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Iterable
from datetime import UTC, datetime

from contract.progress import Progress, from_log
from controlplane.runtime.base import (
    DesiredReplicaSet,
    Notify,
    Observation,
    PermanentRuntimeError,
    ReplicaSummary,
    RuntimeError_,
    TemporaryRuntimeError,
)
from controlplane.runtime.kubernetes import replicas
from controlplane.runtime.kubernetes.client import (
    CONFIG_MAP,
    DEPLOYMENT,
    DISRUPTION_BUDGET,
    KINDS,
    POD,
    SECRET,
    SERVICE,
    Conflict,
    Gone,
    Kind,
    KubeClient,
    Object,
)
from controlplane.runtime.kubernetes.logs import KubernetesLogs
from controlplane.runtime.kubernetes.manifests import (
    HASH_ANNOTATION,
    MANAGED_SELECTOR,
    PULL_CONTAINER,
    SERVICE_LABEL,
    desired_objects,
    model_cache_secret,
    selector,
)
from controlplane.runtime.kubernetes.ownership import (
    Owner,
    config_map_name,
    identity_config_map,
    identity_problem,
    warning_event,
)
from controlplane.runtime.kubernetes.settings import KubernetesSettings

log = logging.getLogger(__name__)

CONFLICT_RETRIES = 5
PROGRESS_TAIL = 5  # log lines read for a pull's last progress report (one every 5 s)
# What a service may leave behind, pods last (they go only when their processes have).
OWNED = (DEPLOYMENT, SERVICE, DISRUPTION_BUDGET, POD)
WATCH_BACKOFF_MAX = 30.0


class KubernetesRuntime:
    """Services as Deployments, Services and PodDisruptionBudgets in
    ``settings.namespace``. Construction connects the client (a bad kubeconfig is a
    PermanentRuntimeError at once); :meth:`claim` must succeed before any other call, and
    from then on every listing, watch, write and delete is limited to objects labelled
    with this installation's identity. The watch threads start with the first call after it
    and stop in :meth:`close`."""

    def __init__(
        self, settings: KubernetesSettings, notify: Notify, *, client: KubeClient | None = None
    ) -> None:
        self.settings = settings
        self._notify = notify
        self._client = client or KubeClient(settings)
        self._stop = threading.Event()
        self._watchers: list[_Watcher] = []
        self._logs = KubernetesLogs(settings, client=self._client)
        # A pulled replica's last report, kept while it loads (one read each).
        self._pulled: dict[tuple[str, str], Progress] = {}  # (service, pod) → report
        self._progress_due: set[str] = set()  # services with a progress re-read scheduled
        self._owner: Owner | None = None  # set by claim()
        self._cache_secret: Object | None = None  # kept once, before the first apply

    # -- Runtime --------------------------------------------------------------------------
    async def claim(self, installation: str) -> str | None:
        """Act for the installation whose database has id ``installation``: None when the
        serving namespace's record names it (written now when there is none), else why
        not, and the runtime stays unusable."""
        owner = Owner(installation, self.settings.release)
        problem = await asyncio.to_thread(self._claim, owner)
        if problem is None:
            self._owner = owner
            self._cache_secret = model_cache_secret(self.settings, owner)
        return problem

    async def warn(self, reason: str, message: str) -> None:
        """A Warning Event on the installation's record, for what an operator must act on
        and no service owns (orphans kept back by the deletion guard)."""
        event = warning_event(self.owner, self.settings.namespace, reason, message, _now())
        try:
            await asyncio.to_thread(self._client.create, event)
        except RuntimeError_ as e:  # the log line stands; the event is a courtesy
            log.warning("kubernetes: could not record event %s: %s", reason, e)

    @property
    def owner(self) -> Owner:
        if self._owner is None:
            raise PermanentRuntimeError(
                "NotClaimed", "the runtime acts only for a claimed installation (claim())"
            )
        return self._owner

    async def apply(self, desired: DesiredReplicaSet) -> None:
        owner = self.owner
        self._start_watching()
        if self._cache_secret is not None:
            await asyncio.to_thread(self._keep_secret, self._cache_secret)
            self._cache_secret = None
        for manifest in desired_objects(desired, self.settings, owner):
            await asyncio.to_thread(self._apply_one, desired.service, manifest)
        if desired.retire:
            await asyncio.to_thread(self._retire, desired.service, desired.retire)

    async def observe(self, service: str) -> Observation:
        self._start_watching()
        deployments, _ = await asyncio.to_thread(self._client.list, DEPLOYMENT, self._of(service))
        pods, _ = await asyncio.to_thread(self._client.list, POD, self._of(service))
        pulls = await self._pull_progress(service, pods)
        return replicas.observation(deployments, pods, pulls)

    async def cpu_cores(self, service: str) -> list[float]:
        return list((await asyncio.to_thread(self._client.pod_cpu, self._of(service))).values())

    def _of(self, service: str) -> str:
        """The selector of this installation's objects of ``service``."""
        return self.owner.selector(selector(service))

    async def delete(self, service: str) -> bool:
        """Ask for every object of ``service`` to go; True once none is left (pods included:
        they are gone only when their processes are)."""
        self._start_watching()
        return await asyncio.to_thread(self._delete, service)

    async def services(self) -> set[str]:
        return set(await self.summary())

    async def summary(self) -> dict[str, ReplicaSummary]:
        """Three listings whatever the number of services: Deployments, and the Services and
        budgets a half-deleted service may leave (orphans to delete)."""
        self._start_watching()
        ours = self.owner.selector(MANAGED_SELECTOR)
        deployments, _ = await asyncio.to_thread(self._client.list, DEPLOYMENT, ours)
        others: list[Object] = []
        for kind in (SERVICE, DISRUPTION_BUDGET):
            others += (await asyncio.to_thread(self._client.list, kind, ours))[0]
        out = {_service_of(o): ReplicaSummary(0, 0, frozenset()) for o in others}
        out.update({_service_of(d): replicas.summary(d) for d in deployments})
        return out

    async def logs(self, service: str, replica: int | None, tail: int) -> str:
        return await self._logs.logs(service, replica, tail)

    async def close(self) -> None:
        """Stop the watches. Replicas keep running: they belong to the cluster."""
        self._stop.set()
        self._client.abort_streams()
        await asyncio.gather(*(asyncio.to_thread(w.join, 10.0) for w in self._watchers))
        self._client.close()

    # -- pull progress ----------------------------------------------------------------------
    async def _pull_progress(self, service: str, pods: Iterable[Object]) -> dict[str, Progress]:
        """The last report of each pod that pulls or loads, from the tail of its pull's log
        (the replicas hold no API credential to report otherwise). Costs one log read per
        pulling pod every ``progress_seconds`` and one per pod once pulled; none for pods
        past that, so a service of N ready replicas costs nothing."""
        out: dict[str, Progress] = {}
        pulling = False
        loading = set()
        for pod in pods:
            name, phase = pod["metadata"]["name"], replicas.pull_phase(pod)
            if phase is None:
                continue
            seen = self._pulled.get((service, name)) if phase == "loading" else None
            if seen is None:
                seen = await self._last_report(name)
            if seen is not None:
                out[name] = seen
                if phase == "loading":
                    loading.add((service, name))
                    self._pulled[(service, name)] = seen
            pulling = pulling or phase == "pulling"
        for key in [k for k in self._pulled if k[0] == service and k not in loading]:
            del self._pulled[key]  # ready, failed or gone
        if pulling and service not in self._progress_due:
            # Nothing in the pod changes while it pulls: no watch event would come.
            self._progress_due.add(service)
            asyncio.get_running_loop().call_later(
                self.settings.progress_seconds, self._progress_again, service
            )
        return out

    async def _last_report(self, pod: str) -> Progress | None:
        try:
            text = await asyncio.to_thread(self._client.pod_log, pod, PULL_CONTAINER, PROGRESS_TAIL)
        except RuntimeError_ as e:  # the pod went, or its log is not there yet
            log.debug("kubernetes: no pull progress of pod %s: %s", pod, e)
            return None
        return from_log(text)

    def _progress_again(self, service: str) -> None:
        self._progress_due.discard(service)
        if not self._stop.is_set():
            self._notify(service)

    # -- identity -------------------------------------------------------------------------
    def _claim(self, owner: Owner) -> str | None:
        name = config_map_name(owner.release)
        recorded = self._client.get(CONFIG_MAP, name)
        if recorded is None and self._client.create(identity_config_map(owner)):
            log.info(
                "kubernetes: recorded installation %s as release %s",
                owner.installation,
                owner.release,
            )
            return None
        # Another control plane may have written it first: what it wrote is the record.
        return identity_problem(recorded or self._client.get(CONFIG_MAP, name), owner)

    # -- apply ----------------------------------------------------------------------------
    def _apply_one(self, service: str, manifest: Object) -> None:
        kind, name = KINDS[manifest["kind"]], manifest["metadata"]["name"]
        for _ in range(CONFLICT_RETRIES):
            live = self._client.get(kind, name)
            if live is not None:
                _check_ours(live, service, self.settings.namespace)
                foreign = self.owner.conflict(live)
                if foreign is not None:
                    raise PermanentRuntimeError("NameTaken", foreign)
                if _up_to_date(live, manifest):
                    return
                # The read we decided on is the precondition: a change in between is a 409.
                manifest = _with_version(manifest, live["metadata"]["resourceVersion"])
            try:
                self._client.apply(manifest, field_manager=self.settings.field_manager)
                return
            except Conflict:
                log.info("kubernetes: %s %s changed while applying; re-reading", kind.kind, name)
        raise TemporaryRuntimeError(f"{kind.kind} {name} kept changing while being applied")

    def _keep_secret(self, manifest: Object) -> None:
        """Create the Secret, or bring its data back to ours (a rotated token)."""
        live = self._client.get(SECRET, manifest["metadata"]["name"])
        if live is None or live.get("data") != manifest["data"]:
            self._client.apply(manifest, field_manager=self.settings.field_manager)

    def _retire(self, service: str, names: frozenset[str]) -> None:
        """Delete the named pods of ``service`` (DeleteServiceInstances): the Deployment
        makes new ones in their place. Pods that are gone or going are left alone."""
        pods, _ = self._client.list(POD, selector(service))
        for pod in pods:
            meta = pod["metadata"]
            if meta["name"] in names and not meta.get("deletionTimestamp"):
                self._client.delete(POD, meta["name"])

    # -- delete ---------------------------------------------------------------------------
    def _delete(self, service: str) -> bool:
        left = 0
        for kind in OWNED:
            items, _ = self._client.list(kind, self._of(service))
            for item in items:
                left += 1
                if kind is not POD and not item["metadata"].get("deletionTimestamp"):
                    self._client.delete(kind, item["metadata"]["name"])
        if left == 0:
            return True
        # Deletion is asynchronous (graceful pod shutdown, garbage collection): look again.
        return all(not self._client.list(kind, self._of(service))[0] for kind in OWNED)

    # -- watch ----------------------------------------------------------------------------
    def _start_watching(self) -> None:
        if self._watchers or self._stop.is_set():
            return
        loop = asyncio.get_running_loop()

        def notify(service: str) -> None:
            try:
                loop.call_soon_threadsafe(self._notify, service)
            except RuntimeError:  # the loop closed under us: nobody is listening any more
                self._stop.set()

        ours = self.owner.selector(MANAGED_SELECTOR)
        self._watchers = [
            _Watcher(kind, ours, self._client, self.settings, self._stop, notify)
            for kind in (DEPLOYMENT, POD)
        ]
        for watcher in self._watchers:
            watcher.start()


class _Watcher(threading.Thread):
    """List, then watch from the list's resourceVersion; relist on 410 Gone and every
    ``resync_seconds``. Each change of an object (new resourceVersion, appeared, vanished)
    notifies its service, so a relist finds what a broken watch missed."""

    def __init__(
        self,
        kind: Kind,
        ours: str,
        client: KubeClient,
        settings: KubernetesSettings,
        stop: threading.Event,
        notify: Notify,
    ) -> None:
        super().__init__(name=f"k8s-watch-{kind.method}", daemon=True)
        self.kind = kind
        self._ours = ours  # the installation's selector: another's objects are never seen
        self._client = client
        self._settings = settings
        self._halt = stop
        self._notify = notify
        self._seen: dict[str, tuple[str, str]] = {}  # object name -> (service, resourceVersion)
        self.relists = 0

    def run(self) -> None:
        version, listed_at, backoff = "", 0.0, 1.0
        while not self._halt.is_set():
            try:
                if not version or time.monotonic() - listed_at >= self._settings.resync_seconds:
                    version = self._relist()
                    listed_at = time.monotonic()
                left = self._settings.resync_seconds - (time.monotonic() - listed_at)
                timeout = max(1, min(self._settings.watch_timeout_seconds, int(left) + 1))
                for event in self._client.watch(self.kind, self._ours, version, timeout):
                    if self._halt.is_set():
                        return
                    version = self._event(event) or version
                backoff = 1.0
            except Gone:
                version = ""  # too old: relist to catch up
            except Exception as e:  # the watch must outlive any one failure
                if self._halt.is_set():
                    return
                if isinstance(e, RuntimeError_):
                    log.warning("kubernetes: watching %ss: %s; retrying", self.kind.kind, e)
                else:
                    log.exception("kubernetes: watching %ss failed; retrying", self.kind.kind)
                self._halt.wait(backoff)
                backoff = min(backoff * 2, WATCH_BACKOFF_MAX)

    def _relist(self) -> str:
        items, version = self._client.list(self.kind, self._ours)
        self.relists += 1
        current = {item["metadata"]["name"]: _identity(item) for item in items}
        changed = {svc for name, (svc, rv) in current.items() if self._seen.get(name) != (svc, rv)}
        vanished = {svc for name, (svc, _) in self._seen.items() if name not in current}
        self._seen = current
        for service in sorted(changed | vanished):
            self._notify(service)
        return version

    def _event(self, event: Object) -> str:
        """Record one watch event; its resourceVersion."""
        obj = event.get("object") or {}
        metadata = obj.get("metadata") or {}
        version = str(metadata.get("resourceVersion") or "")
        if event.get("type") == "BOOKMARK" or "name" not in metadata:
            return version
        service, name = _service_of(obj), metadata["name"]
        if event.get("type") == "DELETED":
            self._seen.pop(name, None)
        else:
            self._seen[name] = (service, version)
        self._notify(service)
        return version


def _up_to_date(live: Object, manifest: Object) -> bool:
    """Nothing to write: same desired hash, and no one scaled the Deployment by hand."""
    annotations = live["metadata"].get("annotations") or {}
    if annotations.get(HASH_ANNOTATION) != manifest["metadata"]["annotations"][HASH_ANNOTATION]:
        return False
    if manifest["kind"] == "Deployment":
        return bool((live.get("spec") or {}).get("replicas") == manifest["spec"]["replicas"])
    return True


def _check_ours(live: Object, service: str, namespace: str) -> None:
    metadata = live["metadata"]
    what = f"{live.get('kind', 'object')} {metadata['name']}"
    if _service_of(live) != service:
        raise PermanentRuntimeError(
            "NameTaken",
            f"{what} in namespace {namespace} exists and is not this service's; "
            "rename the service or remove that object",
        )
    if metadata.get("deletionTimestamp"):
        raise TemporaryRuntimeError(f"{what} is still being deleted; retrying when it is gone")


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _with_version(manifest: Object, version: str) -> Object:
    return {**manifest, "metadata": {**manifest["metadata"], "resourceVersion": version}}


def _service_of(obj: Object) -> str:
    return str((obj["metadata"].get("labels") or {}).get(SERVICE_LABEL, ""))


def _identity(obj: Object) -> tuple[str, str]:
    return _service_of(obj), str(obj["metadata"].get("resourceVersion", ""))
