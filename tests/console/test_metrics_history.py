"""The console's traffic history: quantiles from histograms, points per step, replicas
carried forward, bounded memory (fake clock, no I/O)."""

from __future__ import annotations

import pytest

from contract.wire import LoadReport, ServiceLoad
from controlplane.elasticity.metrics_history import POINTS, STEP_S, MetricsHistory, quantile

BOUNDS = (0.01, 0.1, 1.0)


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0  # a multiple of STEP_S: steps start here

    def __call__(self) -> float:
        return self.now


def report(*loads: ServiceLoad, bounds: tuple[float, ...] = BOUNDS) -> LoadReport:
    return LoadReport(
        reporter="r1", interval_s=0.5, services=list(loads), latency_bounds_s=list(bounds)
    )


def load(service: str = "svc", **fields: object) -> ServiceLoad:
    return ServiceLoad.model_validate(
        {"service": service, "requests": 0, "concurrency": 0.0} | fields
    )


@pytest.mark.parametrize(
    ("q", "counts", "expected"),
    [
        (0.5, [0, 0, 0, 0], None),  # nothing answered
        (0.5, [10, 0, 0, 0], 0.005),  # inside the first bucket, from 0
        (0.5, [0, 10, 0, 0], pytest.approx(0.055)),  # halfway through (0.01, 0.1]
        (0.99, [50, 50, 0, 0], pytest.approx(0.0982)),
        (0.99, [0, 0, 0, 5], 1.0),  # above every bound: the largest bound
        (1.0, [1, 0, 1, 0], 1.0),
    ],
)
def test_quantile_interpolates_inside_its_bucket(
    q: float, counts: list[int], expected: float | None
) -> None:
    assert quantile(q, BOUNDS, counts) == expected


def test_reports_merge_into_one_point_per_step_with_rates_and_quantiles() -> None:
    clock = Clock()
    history = MetricsHistory(clock=clock)
    history.add(report(load(requests=30, completed=30, errors=2, latency=[20, 10, 0, 0])))
    clock.now += 4
    # a second gateway in the same step, and a service of no interest with no traffic
    history.add(
        report(load(requests=20, completed=20, errors=3, latency=[0, 20, 0, 0]), load("idle"))
    )
    clock.now += 6  # the next step opens: the first closes into its quantiles
    history.add(report(load(requests=5, completed=5, latency=[5, 0, 0, 0])))
    clock.now += 5

    samples = history.samples("svc", 60, replicas_now=2)
    assert len(samples) == 6 and samples[-1].time == clock.now // STEP_S * STEP_S
    first, second = samples[-2], samples[-1]
    assert (first.requests_per_s, first.errors_per_s) == (5.0, 0.5)  # 50 and 5 over 10 s
    assert first.p50_ms == pytest.approx(10 + 90 * 5 / 30)  # 25th of 50: 5th of 30 in bucket 2
    assert first.p99_ms == pytest.approx(10 + 90 * 29.5 / 30)  # 49.5th of 50
    assert second.requests_per_s == 1.0  # the step in progress: 5 over the 5 s it has run
    assert second.p50_ms == pytest.approx(5.0)
    assert [s.requests_per_s for s in samples[:-2]] == [0.0] * 4  # quiet steps read as zero
    assert {s.replicas for s in samples} == {2}  # no observation: the current count
    assert history.samples("idle", 60, 0)[-1].requests_per_s == 0.0


def test_a_gateway_without_the_new_fields_still_counts_requests() -> None:
    clock = Clock()
    history = MetricsHistory(clock=clock)
    history.add(report(load(requests=40), bounds=()))  # an older gateway: admitted only
    clock.now += 10
    sample = history.samples("svc", 20, 1)[0]
    assert (sample.requests_per_s, sample.p50_ms, sample.errors_per_s) == (4.0, None, 0.0)


def test_replicas_carry_forward_from_the_last_change() -> None:
    clock = Clock()
    history = MetricsHistory(clock=clock)
    history.replicas("svc", 1)
    clock.now += 30
    history.replicas("svc", 1)  # unchanged: nothing stored
    history.replicas("svc", 3)
    clock.now += 20
    got = [s.replicas for s in history.samples("svc", 60, replicas_now=9)]
    assert got == [1, 1, 1, 3, 3, 3]
    # Only the window's later part: the change before it carries in.
    assert [s.replicas for s in history.samples("svc", 20, 9)] == [3, 3]
    clock.now += 3600  # an hour later the last change still holds until the next one
    history.replicas("svc", 0)
    assert [s.replicas for s in history.samples("svc", 20, 9)] == [3, 0]
    # A first observation inside the window: unknown before it.
    history.replicas("new", 2)
    assert [s.replicas for s in history.samples("new", 30, 9)] == [None, None, 2]
    history.forget("svc")
    assert [s.replicas for s in history.samples("svc", 20, 9)] == [9, 9]


def test_backlog_is_the_last_reading_of_its_step_and_unknown_without_one() -> None:
    clock = Clock()
    history = MetricsHistory(clock=clock)
    history.backlog("jobs", 40)
    history.backlog("jobs", 25)  # the same step: the last reading stands
    clock.now += 20  # a step with no reading between
    history.backlog("jobs", 0)
    assert [s.backlog for s in history.samples("jobs", 30, 1)] == [25, None, 0]
    assert [s.backlog for s in history.samples("sync", 30, 1)] == [None, None, None]


def test_memory_is_bounded_per_service_and_quiet_services_are_freed() -> None:
    clock = Clock()
    history = MetricsHistory(clock=clock)
    for _ in range(POINTS + 50):
        history.add(report(load("busy", requests=1)))
        clock.now += STEP_S
    assert len(history._series["busy"]) == POINTS
    history.add(report(load("old", requests=1)))
    clock.now += STEP_S * (POINTS + 1)
    history.add(report(load("new", requests=1)))  # opening a point frees stale series
    assert set(history._series) == {"new"}
