"""Prometheus exposition format (pure)."""

from __future__ import annotations

import json
from bisect import bisect_left

import pytest

from gateway.metrics import LATENCY_BUCKETS, Counter, GatewayMetrics, Histogram


def test_counter_and_histogram_text() -> None:
    c = Counter("x_total", "Things.", ("service", "code"))
    c.inc(("a", "200"))
    c.inc(("a", "200"))
    c.inc(('we"ird\n', "404"))
    h = Histogram("lat_seconds", "Latency.", ("service",), buckets=(0.1, 1.0))
    for v in (0.05, 0.1, 0.5, 3.0):
        h.observe(("a",), v)
    text = "\n".join([*c.header(), *c.samples(), *h.header(), *h.samples()])
    assert 'x_total{service="a",code="200"} 2' in text
    assert 'x_total{service="we\\"ird\\n",code="404"} 1' in text
    assert 'lat_seconds_bucket{service="a",le="0.1"} 2' in text
    assert 'lat_seconds_bucket{service="a",le="1"} 3' in text
    assert 'lat_seconds_bucket{service="a",le="+Inf"} 4' in text
    assert 'lat_seconds_count{service="a"} 4' in text
    assert 'lat_seconds_sum{service="a"} 3.65' in text
    assert "# TYPE lat_seconds histogram" in text


def test_gateway_metrics_render() -> None:
    m = GatewayMetrics()
    m.requests.inc(("svc", "200"))
    text = m.render().decode()
    for name in (
        "openeas_gateway_requests_total",
        "openeas_gateway_request_duration_seconds",
        "openeas_gateway_upstream_duration_seconds",
        "openeas_gateway_in_flight_requests",
        "openeas_gateway_upstream_errors_total",
    ):
        assert f"# TYPE {name} " in text


def test_every_gateway_metric_carries_the_prefix() -> None:
    assert all(m.name.startswith("openeas_gateway_") for m in GatewayMetrics().all)


def test_renamed_metrics_keep_their_old_name_for_one_release() -> None:
    a, b = GatewayMetrics(), GatewayMetrics()
    a.cold_start.observe(("svc",), 3.0)
    b.cold_start.observe(("svc",), 4.0)
    a.mirror_requests.inc(("svc", "shadow", "match"))
    # Alone, and summed with a sibling worker's snapshot.
    for text, count in ((a.render().decode(), 1), (a.render([b.snapshot()]).decode(), 2)):
        new, old = "openeas_gateway_cold_start_seconds", "openeas_cold_start_seconds"
        assert f"# TYPE {new} histogram" in text
        assert f"# TYPE {old} histogram" in text
        assert f'{new}_count{{service="svc"}} {count}' in text
        assert f'{old}_count{{service="svc"}} {count}' in text
        assert f'{old}_bucket{{service="svc",le="5"}} {count}' in text
        labels = '{service="svc",target="shadow",result="match"}'
        assert f"openeas_gateway_mirror_requests_total{labels} 1" in text
        assert f"openeas_mirror_requests_total{labels} 1" in text
        assert "# HELP openeas_mirror_duration_seconds " in text
    # Each old name once: no series renamed twice.
    assert a.render().decode().count("# TYPE openeas_cold_start_seconds ") == 1


def test_workers_snapshots_merge_into_one_view() -> None:
    a, b = GatewayMetrics(), GatewayMetrics()
    a.requests.inc(("svc", "200"), 3)
    b.requests.inc(("svc", "200"), 4)
    b.requests.inc(("svc", "503"))
    a.duration.observe(("svc",), 0.002)
    b.duration.observe(("svc",), 0.002)
    b.duration.observe(("other",), 20.0)
    a.in_flight.set(("svc",), 2)
    b.in_flight.set(("svc",), 1)
    a.route_version.set((), 7)
    b.route_version.set((), 6)  # lagging one version behind
    a.control_plane_up.set((), 1)
    b.control_plane_up.set((), 0)
    text = a.render([json.loads(json.dumps(b.snapshot()))]).decode()  # as sent between workers
    assert 'openeas_gateway_requests_total{service="svc",code="200"} 7' in text
    assert 'openeas_gateway_requests_total{service="svc",code="503"} 1' in text
    assert 'openeas_gateway_request_duration_seconds_count{service="svc"} 2' in text
    assert 'openeas_gateway_request_duration_seconds_bucket{service="svc",le="0.0025"} 2' in text
    assert 'openeas_gateway_request_duration_seconds_count{service="other"} 1' in text
    assert 'openeas_gateway_in_flight_requests{service="svc"} 3' in text
    assert "openeas_gateway_route_table_version 6" in text
    assert "openeas_gateway_control_plane_up 0" in text
    # Merging for a scrape leaves this worker's own counters as they were.
    assert 'openeas_gateway_requests_total{service="svc",code="200"} 3' in a.render().decode()


# Each bound, just either side of it, and past both ends: the bucket is bisect_left's.
_EDGES = sorted(
    {0.0, -1.0, 1e9, *LATENCY_BUCKETS, *(b * 0.999 for b in LATENCY_BUCKETS)}
    | {b * 1.001 for b in LATENCY_BUCKETS}
)


@pytest.mark.parametrize("value", _EDGES)
def test_an_observation_lands_in_the_bucket_bisect_left_names(value: float) -> None:
    h = Histogram("lat_seconds", "Latency.", ("service",))
    h.observe(("a",), value)
    counts = h.children[("a",)].counts
    assert counts.index(1) == bisect_left(LATENCY_BUCKETS, value)
    assert sum(counts) == 1


def test_a_service_series_counts_into_the_labelled_metrics() -> None:
    m = GatewayMetrics()
    series = m.series("svc")
    assert m.series("svc") is series  # found again, not made again
    other = m.series("other")
    # Equal names are one series whichever string object asks (the last one is kept).
    assert m.series("".join(["s", "vc"])) is series and m.series("other") is other
    assert m.series("svc") is series and other is not series
    series.answered(200)
    series.answered(503)  # the last status's count is kept: a change finds its own
    series.answered(200)
    other.answered(200)
    series.duration.observe(0.002)
    series.upstream_duration.observe(0.001)
    m.duration.observe(("svc",), 0.02)  # the labelled form reaches the same series
    text = m.render().decode()
    assert 'openeas_gateway_requests_total{service="svc",code="200"} 2' in text
    assert 'openeas_gateway_requests_total{service="svc",code="503"} 1' in text
    assert 'openeas_gateway_request_duration_seconds_count{service="svc"} 2' in text
    assert 'openeas_gateway_upstream_duration_seconds_count{service="svc"} 1' in text
    assert 'openeas_gateway_requests_total{service="other",code="200"} 1' in text
    assert m.requests.errors == {"svc": 1}  # the load report's running 5xx total


@pytest.mark.parametrize("same_buckets", [True, False])
@pytest.mark.parametrize("took", [0.0004, 0.02, 3.0, 1e9])
def test_a_relayed_call_counts_once_in_each_histogram_and_as_answered(
    same_buckets: bool, took: float
) -> None:
    m = GatewayMetrics()
    if not same_buckets:  # the one bucket search is shared only when the bounds agree
        m.upstream_duration = Histogram("up_seconds", "Upstream.", ("service",), (0.01, 1.0))
    series = m.series("svc")
    series.relayed(200, took)
    for histogram in (m.duration, m.upstream_duration):
        child = histogram.children[("svc",)]
        assert child.counts.index(1) == bisect_left(histogram.buckets, took)
        assert sum(child.counts) == 1 and child.sum == took
    assert m.requests.cell(("svc", "200")).value == 1.0
