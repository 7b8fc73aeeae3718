"""Prometheus exposition format (pure)."""

from __future__ import annotations

from gateway.metrics import Counter, GatewayMetrics, Histogram


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
