"""Triton's queue time per request: the arithmetic on its counters (fake scrapes), and the
counters as the real tritonserver exposes them on its metrics port."""

from __future__ import annotations

import urllib.request

import pytest

from controlplane.elasticity.triton_metrics import QueueTimes, counters
from testing.waiting import wait_until
from tests.fixtures_triton import TritonServer, check_example_models


def text(queue_us: float, success: float) -> str:
    return (
        "# HELP nv_inference_queue_duration_us Cumulative inference queuing duration\n"
        f'nv_inference_queue_duration_us{{model="add_sub",version="1"}} {queue_us / 2}\n'
        f'nv_inference_queue_duration_us{{model="inception",version="1"}} {queue_us / 2}\n'
        f'nv_inference_queue_summary_us_count{{model="add_sub",version="1"}} 99\n'
        f'nv_inference_request_success{{model="add_sub",version="1"}} {success}\n'
    )


def test_counters_sum_models() -> None:
    assert counters(text(3000, 7)) == (3000.0, 7.0)
    assert counters("") == (0.0, 0.0)


async def test_queue_time_is_the_delta_ratio_across_replicas() -> None:
    now = [0.0]
    pages = {"http://a": text(0, 0), "http://b": text(1000, 10)}

    async def fetch(url: str) -> str:
        if url == "http://down":
            raise OSError("refused")
        return pages[url]

    q = QueueTimes(fetch, min_interval_s=1.0, clock=lambda: now[0])
    assert await q.sample("svc", ["http://a", "http://b", "http://down"]) is None  # first look
    pages = {"http://a": text(40_000, 10), "http://b": text(21_000, 20)}
    now[0] = 0.5
    assert await q.sample("svc", ["http://a", "http://b"]) is None  # too soon: the last value
    now[0] = 1.0
    # (40 000 + 20 000) µs over 20 requests = 3 ms each
    assert await q.sample("svc", ["http://a", "http://b"]) == pytest.approx(3.0)
    now[0] = 2.0
    assert await q.sample("svc", ["http://a", "http://b"]) == 0.0  # no requests: no queue
    pages["http://a"] = text(500, 2)  # restarted: its counters start again, skipped once
    now[0] = 3.0
    assert await q.sample("svc", ["http://a", "http://b"]) == 0.0


@pytest.mark.slow
def test_real_triton_exposes_the_counters(triton_server: TritonServer) -> None:
    def scrape_once() -> tuple[float, float] | None:
        url = f"http://127.0.0.1:{triton_server.metrics_port}/metrics"
        try:
            with urllib.request.urlopen(url, timeout=5) as resp:
                return counters(resp.read().decode())
        except OSError:  # the metrics port may open a moment after the HTTP one is ready
            return None

    def scrape() -> tuple[float, float]:
        return wait_until(scrape_once, timeout=30, what="Triton's metrics port")

    before = scrape()
    check_example_models(triton_server.http_url)
    after = scrape()
    assert after[1] >= before[1] + 2  # add_sub and inception succeeded
    assert after[0] > before[0]  # some queue time, however small
