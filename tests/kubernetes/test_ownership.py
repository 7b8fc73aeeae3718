"""Never delete what the platform does not own: reconcilers on their own databases against
the Kubernetes stand-in, where another installation's services already run. An empty
database, a foreign database and a second release in the same namespace: nothing of the
first installation is changed or deleted."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from controlplane.reconcile.reconciler import Reconciler
from controlplane.runtime.base import Notify
from controlplane.runtime.kubernetes import ownership
from controlplane.runtime.kubernetes.runtime import KubernetesRuntime
from controlplane.runtime.kubernetes.settings import KubernetesSettings
from controlplane.store import migrate
from controlplane.store.db import make_engine, make_sessions
from controlplane.store.queries import ReconcileStore
from controlplane.store.sealing import TokenSealer
from controlplane.store.services import Services
from testing import k8s_server as ks
from testing.k8s_server import ApiStandIn
from testing.waiting import wait_until_async
from tests.controlplane.conftest import seed_spec
from tests.tasks import stop

FIRST = [f"first_{i}" for i in range(3)]


class Installation:
    """A database (SQLite file, migrated: its own installation id), its services API and a
    reconciler on the Kubernetes runtime for ``release``."""

    def __init__(self, path: Path, settings: KubernetesSettings, release: str) -> None:
        url = f"sqlite:///{path}"
        migrate.upgrade(url)
        self.engine = make_engine(url)
        self.sessions = make_sessions(self.engine)
        self.services = Services(self.sessions, "local", TokenSealer(["sealing-key-0123456789"]))
        self.settings = settings.model_copy(update={"release": release})
        self.uid = ReconcileStore(self.sessions, "local").installation()

    @asynccontextmanager
    async def reconciling(self) -> AsyncIterator[Reconciler]:
        def factory(notify: Notify) -> KubernetesRuntime:
            return KubernetesRuntime(self.settings, notify)

        reconciler = Reconciler(
            self.sessions, factory, "local", poll_seconds=0.05, lease_ttl=1.0, resync_seconds=0.1
        )
        task = asyncio.create_task(reconciler.run())
        try:
            yield reconciler
        finally:
            await stop(task)
            self.engine.dispose()


def deployments(k8s: ApiStandIn) -> dict[str, str]:
    """Deployment name -> the installation id it carries."""
    return {
        d["metadata"]["name"]: d["metadata"]["labels"].get(ownership.INSTALLATION_LABEL, "")
        for d in k8s.list("deployments")
    }


async def first_installation(
    tmp_path: Path, k8s: ApiStandIn, settings: KubernetesSettings
) -> Installation:
    """Three services of the release ``first``, applied and running; its reconciler gone."""
    first = Installation(tmp_path / "first.db", settings, "first")
    for name in FIRST:
        first.services.create(seed_spec(name=name, metadata={"instance": 1}))
    async with first.reconciling():
        await wait_until_async(lambda: len(k8s.list("deployments")) == 3, 20)
    for name in deployments(k8s):
        for pod in k8s.sync_pods(name):
            k8s.set_pod_status(pod, ks.status_ready())
    assert set(deployments(k8s).values()) == {first.uid}
    return first


async def settle(reconciler: Reconciler) -> None:
    """Long enough for many resyncs and a lease renewal."""
    await asyncio.sleep(1.5)


async def test_an_empty_database_on_the_same_release_is_refused(
    tmp_path: Path, k8s: ApiStandIn, k8s_settings: KubernetesSettings
) -> None:
    first = await first_installation(tmp_path, k8s, k8s_settings)
    before = deployments(k8s)
    empty = Installation(tmp_path / "empty.db", k8s_settings, "first")
    async with empty.reconciling() as reconciler:
        await wait_until_async(lambda: reconciler.refused is not None, 20)
        await settle(reconciler)
        assert f"records installation {first.uid}" in (reconciler.refused or "")
        assert not reconciler.is_leader
    assert deployments(k8s) == before
    config_map = k8s.get("configmaps", ownership.config_map_name("first"))
    assert config_map is not None and config_map["data"]["installation"] == first.uid


async def test_a_foreign_database_changes_nothing(
    tmp_path: Path, k8s: ApiStandIn, k8s_settings: KubernetesSettings
) -> None:
    await first_installation(tmp_path, k8s, k8s_settings)
    before = {
        d["metadata"]["name"]: d["metadata"]["resourceVersion"] for d in k8s.list("deployments")
    }
    foreign = Installation(tmp_path / "foreign.db", k8s_settings, "first")
    foreign.services.create(seed_spec(name="first_0", metadata={"instance": 2}))  # same name
    foreign.services.create(seed_spec(name="theirs", metadata={"instance": 1}))
    async with foreign.reconciling() as reconciler:
        await wait_until_async(lambda: reconciler.refused is not None, 20)
        await settle(reconciler)
    after = {
        d["metadata"]["name"]: d["metadata"]["resourceVersion"] for d in k8s.list("deployments")
    }
    assert after == before  # not deleted, not scaled, nothing created


async def test_two_releases_share_a_namespace(
    tmp_path: Path, k8s: ApiStandIn, k8s_settings: KubernetesSettings
) -> None:
    """A second release, on an empty database, sees none of the first's objects as its
    orphans; its own services run beside them; a name the first already uses is refused
    with a reason instead of being taken over."""
    first = await first_installation(tmp_path, k8s, k8s_settings)
    second = Installation(tmp_path / "second.db", k8s_settings, "second")
    second.services.create(seed_spec(name="second_0", metadata={"instance": 1}))
    second.services.create(seed_spec(name="first_1", metadata={"instance": 3}))
    async with second.reconciling() as reconciler:
        await wait_until_async(lambda: "second-0" in deployments(k8s), 20)
        await wait_until_async(
            lambda: second.services.get("local", "first_1").status == "Failed", 20
        )
        await settle(reconciler)
        assert reconciler.refused is None
    row = second.services.get("local", "first_1")
    assert "belongs to another OpenEAS installation" in row.message
    owners = deployments(k8s)
    assert owners == {
        "first-0": first.uid,
        "first-1": first.uid,
        "first-2": first.uid,
        "second-0": second.uid,
    }
    deployment = k8s.get("deployments", "first-1")
    assert deployment is not None and deployment["spec"]["replicas"] == 1  # not scaled to 3


@pytest.mark.parametrize(
    ("recorded", "problem"),
    [
        (None, False),  # no record yet: the caller writes it
        ({"installation": "mine"}, False),
        ({"installation": "someone-else"}, True),
        ({}, True),  # a record that names nothing is not ours either
    ],
)
def test_identity_problem(recorded: dict[str, str] | None, problem: bool) -> None:
    owner = ownership.Owner("mine", "rel")
    record = None if recorded is None else {"metadata": {"name": "cm"}, "data": recorded}
    assert (ownership.identity_problem(record, owner) is not None) is problem


@pytest.mark.parametrize(
    ("labels", "foreign"),
    [
        ({}, False),  # from before identities were stamped: adopted
        ({ownership.INSTALLATION_LABEL: "mine", ownership.RELEASE_LABEL: "rel"}, False),
        ({ownership.INSTALLATION_LABEL: "other", ownership.RELEASE_LABEL: "rel"}, True),
        ({ownership.INSTALLATION_LABEL: "mine", ownership.RELEASE_LABEL: "other"}, True),
    ],
)
def test_conflict(labels: dict[str, str], foreign: bool) -> None:
    live = {"kind": "Deployment", "metadata": {"name": "d", "labels": labels}}
    assert (ownership.Owner("mine", "rel").conflict(live) is not None) is foreign
