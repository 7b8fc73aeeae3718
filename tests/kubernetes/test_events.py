"""Service events mirrored as Kubernetes Events on the service's Deployment: through the
``kubernetes`` client against the API stand-in (which validates each Event against the
API's schema), by the leader only, each event once, from the events written after it took
the lead. SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from controlplane.runtime.kubernetes.events import EventMirror
from controlplane.runtime.kubernetes.settings import KubernetesSettings
from controlplane.store.db import make_engine, make_sessions
from controlplane.store.sealing import TokenSealer
from controlplane.store.services import Services
from testing.k8s_server import ApiStandIn
from testing.waiting import wait_until_async
from tests.controlplane.conftest import seed_spec
from tests.tasks import stop

SERVING = "openeas-serving"


@pytest.fixture
def mirror(
    k8s: ApiStandIn, k8s_settings: KubernetesSettings, database_url: str
) -> Iterator[tuple[EventMirror, Services]]:
    engine = make_engine(database_url)
    sessions = make_sessions(engine)
    sealer = TokenSealer(["sealing-key-for-tests-0123"])
    services = Services(sessions, "local", sealer)
    yield EventMirror(sessions, "local", k8s_settings, instance="cp-0", interval_s=0.05), services
    engine.dispose()


def kube_events(k8s: ApiStandIn) -> list[dict[str, object]]:
    return k8s.list("events", SERVING)


def test_events_written_after_the_lead_reach_the_deployment_once(
    k8s: ApiStandIn, mirror: tuple[EventMirror, Services]
) -> None:
    m, services = mirror
    services.create(seed_spec())  # before the lead: in the database, not replayed
    m.start_from_now()
    services.note("local", "triton_test", "ColdStart", "woken in 12.3 s: pull 8.1 s")
    other = Services(m._sessions, "elsewhere", TokenSealer(["sealing-key-for-tests-0123"]))
    other.create(seed_spec(name="theirs"))  # another cluster id's: not ours to report
    assert m.mirror_once() == 1
    (event,) = kube_events(k8s)
    assert event["involvedObject"] == {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "name": "triton-test",
        "namespace": SERVING,
    }
    assert (event["reason"], event["type"]) == ("ColdStart", "Normal")
    assert event["message"] == "woken in 12.3 s: pull 8.1 s"
    assert event["reportingInstance"] == "cp-0"
    assert m.mirror_once() == 0  # each once
    services.scale("local", "triton_test", 3)
    assert m.mirror_once() >= 1
    assert len(kube_events(k8s)) >= 2


def test_a_resent_event_is_not_doubled(
    k8s: ApiStandIn, mirror: tuple[EventMirror, Services]
) -> None:
    m, services = mirror
    services.create(seed_spec())
    m.start_from_now()
    services.note("local", "triton_test", "ColdStart", "once")
    cursor = m.cursor
    assert m.mirror_once() == 1
    m.cursor = cursor  # as a new leader that read the same range
    assert m.mirror_once() == 0
    assert len(kube_events(k8s)) == 1


async def test_only_the_leader_mirrors(
    k8s: ApiStandIn, mirror: tuple[EventMirror, Services]
) -> None:
    m, services = mirror
    services.create(seed_spec())
    leading = False
    task = asyncio.create_task(m.run(lambda: leading))
    try:
        services.note("local", "triton_test", "ColdStart", "while following")
        await asyncio.sleep(0.3)
        assert kube_events(k8s) == []
        leading = True
        await asyncio.sleep(0.2)  # it takes the lead: history stays in the database
        services.note("local", "triton_test", "ColdStart", "while leading")
        await wait_until_async(lambda: len(kube_events(k8s)) == 1, 5)
        assert kube_events(k8s)[0]["message"] == "while leading"
    finally:
        await stop(task)


def test_an_event_the_api_refuses_is_skipped_not_retried_forever(
    k8s: ApiStandIn, mirror: tuple[EventMirror, Services]
) -> None:
    m, services = mirror
    services.create(seed_spec())
    m.start_from_now()
    services.note("local", "triton_test", "ColdStart", "lost")
    services.note("local", "triton_test", "ColdStart", "kept")
    k8s.fail_next("POST", "events", 500)
    assert m.mirror_once() == 1
    assert [e["message"] for e in kube_events(k8s)] == ["kept"]
    assert m.mirror_once() == 0
