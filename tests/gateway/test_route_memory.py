"""The route table's memory per route: a gateway holds one route per service of the cluster,
100,000 of them at scale, so a route has a budget (docs/performance.md). Measured as the
gateway builds its table: pages of routes parsed from the control plane's JSON, applied."""

from __future__ import annotations

import gc
import tracemalloc

from bench.route_memory import answers
from contract.wire import RouteTable
from gateway.routing.balancer import EndpointPool
from gateway.routing.route_table import RouteState

ROUTES = 10_000
PAGE = 1000
BUDGET_BYTES = 600  # per route, everything the table keeps for it


def test_a_route_stays_within_its_memory_budget() -> None:
    bodies = answers(ROUTES, PAGE, version=7)
    state = RouteState(EndpointPool(), default_timeout_ms=600_000)
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        while bodies:
            state.apply(RouteTable.model_validate_json(bodies.pop(0)))
        gc.collect()
        per_route = (tracemalloc.get_traced_memory()[0] - before) / ROUTES
    finally:
        tracemalloc.stop()
    assert len(state.services) == ROUTES and state.version == 7
    assert per_route <= BUDGET_BYTES, f"{per_route:.0f} bytes per route"


def test_what_only_a_call_needs_is_made_by_the_first_call() -> None:
    """The signing key (two hash states, outside Python's heap) and the in-flight count:
    none for a service nobody calls."""
    state = RouteState(EndpointPool(), default_timeout_ms=1000)
    state.apply(RouteTable.model_validate_json(answers(3, 3, version=7)[0]))
    entry = state.get("svc_000001")
    assert entry is not None
    assert (entry._key, entry.admitted) == (None, None)
    assert entry.key is entry.key is not None and entry.in_flight is entry.in_flight
