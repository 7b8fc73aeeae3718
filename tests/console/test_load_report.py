"""The gateway's load report carries what the console charts: answers, 5xx and a latency
histogram per busy service since its last report — differences of the gateway's own
Prometheus metrics, so the request path does no extra work."""

from __future__ import annotations

from contract.wire import LoadReport
from gateway.limits import Activity, InFlight
from gateway.metrics import GatewayMetrics
from gateway.reporter import LoadReporter


def answer(metrics: GatewayMetrics, service: str, code: int, seconds: float) -> None:
    """What the proxy records when it answers a request."""
    metrics.requests.inc((service, str(code)))
    metrics.duration.observe((service,), seconds)


def test_each_report_carries_the_answers_since_the_last() -> None:
    metrics = GatewayMetrics()
    activity = Activity()
    reporter = LoadReporter("http://cp", "token", activity, metrics=metrics)
    svc = InFlight()

    def traffic(*answers: tuple[int, float]) -> LoadReport:
        for code, seconds in answers:
            assert svc.try_enter()
            if not svc.active:
                activity.touch("svc", svc)
            svc.leave()
            answer(metrics, "svc", code, seconds)
        got = reporter.collect()
        assert got is not None
        return got

    first = traffic((200, 0.003), (200, 0.004), (503, 0.0002))
    assert first.latency_bounds_s == list(metrics.duration.buckets)
    (load,) = first.services
    assert (load.requests, load.completed, load.errors) == (3, 3, 1)
    assert sum(load.latency) == 3 and len(load.latency) == len(first.latency_bounds_s) + 1
    assert load.latency[first.latency_bounds_s.index(0.005)] == 2  # both in (2.5, 5] ms

    (load,) = traffic((500, 0.2), (200, 0.2)).services  # only what is new
    assert (load.completed, load.errors, sum(load.latency)) == (2, 1, 2)
    assert metrics.requests.errors == {"svc": 2}  # 5xx only, by service


def test_without_metrics_the_report_is_what_older_gateways_sent() -> None:
    activity = Activity()
    svc = InFlight()
    assert svc.try_enter()
    activity.touch("svc", svc)
    got = LoadReporter("http://cp", "token", activity).collect()
    assert got is not None and got.latency_bounds_s == []
    assert got.model_dump(exclude_defaults=True)["services"] == [
        {"service": "svc", "requests": 1, "concurrency": got.services[0].concurrency}
    ]
