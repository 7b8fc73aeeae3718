"""The scheduled scaler at work (both databases): a job that fires sets the instance count,
or beside an autoscaler its min (within max); each run is an event and the job's state;
nothing fires outside its schedule or on an excluded date; a removed scaler stops."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from controlplane.elasticity.cron_loop import CronScaling
from controlplane.model import cron_schedule
from controlplane.settings import Settings
from controlplane.store.db import make_engine, make_sessions
from controlplane.store.sealing import TokenSealer
from controlplane.store.services import Services
from tests.controlplane.conftest import seed_spec

EIGHT = datetime(2026, 12, 7, 8, 0, 0, tzinfo=UTC)
JOB = {"ScaleJobs": [{"Name": "morning", "Schedule": "0 0 8 * * *", "TargetSize": 3}]}


@pytest.fixture
def services(settings: Settings) -> Iterator[Services]:
    engine = make_engine(settings.sqlalchemy_url)
    yield Services(make_sessions(engine), "local", TokenSealer(["sealing-key-for-tests-0123"]))
    engine.dispose()


def scaling(services: Services) -> CronScaling:
    return CronScaling(services._sessions, services)


def around(t: datetime) -> tuple[datetime, datetime]:
    return t - timedelta(seconds=1), t


def make(services: Services, body: dict[str, Any], **extra: Any) -> None:
    spec = seed_spec(name="svc", **extra)
    spec["metadata"]["instance"] = 1
    services.create(spec)
    services.set_cron_scaler("local", "svc", cron_schedule.parse(body), "CreateServiceCronScaler")


def test_a_job_sets_the_instance_count(services: Services) -> None:
    make(services, JOB)
    cron = scaling(services)
    cron.tick(*around(EIGHT - timedelta(seconds=1)))  # 07:59:59: nothing yet
    assert services.get("local", "svc").spec.metadata.instance == 1
    cron.tick(*around(EIGHT))
    row = services.get("local", "svc")
    assert (row.spec.metadata.instance, row.generation) == (3, 2)
    assert row.cron_scaler is not None
    status = row.cron_scaler["JobStatus"]["morning"]
    assert (status["State"], status["LastProbeTime"]) == ("Succeeded", "2026-12-07T08:00:00Z")
    assert [e.reason for e in services.events("local", "svc")][-1] == "CronScaled"


@pytest.mark.parametrize(
    ("low", "high", "instance", "target", "after"),
    [
        (1, 10, 5, 3, (3, 10, 5)),  # min lowered, the count stays (the autoscaler decides)
        (1, 10, 1, 3, (3, 10, 3)),  # min raised past the count: the count follows
        (1, 2, 1, 3, (3, 3, 3)),  # past max: max follows
    ],
)
def test_beside_an_autoscaler_a_job_sets_its_range(
    services: Services,
    low: int,
    high: int,
    instance: int,
    target: int,
    after: tuple[int, int, int],
) -> None:
    auto = {"min": low, "max": high, "scaleStrategies": [{"metricName": "qps", "threshold": 10}]}
    job = {"ScaleJobs": [{"Name": "j", "Schedule": "0 0 8 * * *", "TargetSize": target}]}
    make(services, job, autoscaler=auto)
    services.autoscale(
        "local", "svc", services.get("local", "svc").spec.metadata.instance, instance, "test"
    )
    scaling(services).tick(*around(EIGHT))
    row = services.get("local", "svc")
    assert row.spec.autoscaler is not None
    got = (row.spec.autoscaler.min, row.spec.autoscaler.max, row.spec.metadata.instance)
    assert got == after


def test_excluded_dates_and_removed_scalers_do_not_fire(services: Services) -> None:
    make(services, {**JOB, "ExcludeDates": ["* * * * * 1"]})  # Mondays; EIGHT is one
    cron = scaling(services)
    cron.tick(*around(EIGHT))
    assert services.get("local", "svc").spec.metadata.instance == 1
    services.set_cron_scaler("local", "svc", None, "DeleteServiceCronScaler")
    assert cron.scheduled() == []
    cron.tick(*around(EIGHT + timedelta(days=1)))
    assert services.get("local", "svc").spec.metadata.instance == 1
