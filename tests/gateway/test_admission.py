"""The admission core as tables: which call is refused with which kind, and how each door
answers each kind — the same decision behind the HTTP and the gRPC door."""

from __future__ import annotations

import pytest

from gateway import admission
from gateway.admission import ADMIN_API, Admission, Refused
from gateway.grpc.server import GRPC_CODE, refusal
from gateway.http.problems import HTTP_STATUS, refused_problem
from gateway.routing.balancer import EndpointPool
from gateway.routing.limits import Activity
from gateway.routing.route_table import Asleep, RouteState, ServiceRoute
from gateway.wake import NotWakeable, QueueFull, WakeTimeout
from tests.gateway.harness import SERVICE, route, table


def core(*routes: object, max_body: int = 100) -> Admission:
    state = RouteState(EndpointPool(), default_timeout_ms=1000)
    state.apply(table(*routes))  # type: ignore[arg-type]
    return Admission(state, Activity(), max_body_bytes=max_body, retry_after_s=2, wake_queue=4)


def entry(a: Admission, name: str = SERVICE) -> ServiceRoute:
    found = a.routes.get(name)
    assert found is not None
    return found


def test_every_kind_has_a_status_on_both_doors() -> None:
    assert set(HTTP_STATUS) == set(admission.KINDS) == set(GRPC_CODE)


@pytest.mark.parametrize(
    ("kind", "status", "code"),
    [
        (admission.NOT_FOUND, 404, "NOT_FOUND"),
        (admission.UNAUTHENTICATED, 401, "UNAUTHENTICATED"),
        (admission.FORBIDDEN, 403, "PERMISSION_DENIED"),
        (admission.TOO_LARGE, 413, "RESOURCE_EXHAUSTED"),
        (admission.UNAVAILABLE, 503, "UNAVAILABLE"),
        (admission.OVER_LIMIT, 429, "RESOURCE_EXHAUSTED"),
        (admission.QUEUE_FULL, 450, "RESOURCE_EXHAUSTED"),
        (admission.WAKE_TIMEOUT, 504, "DEADLINE_EXCEEDED"),
    ],
)
def test_each_door_maps_a_kind_to_its_status(kind: str, status: int, code: str) -> None:
    refused = Refused(kind, "why", "svc", retry_after_s=3 if kind == admission.OVER_LIMIT else None)
    problem = refused_problem(refused)
    assert problem.status == status and problem.detail == "why" and problem.service == "svc"
    assert refusal(refused).code == code and refusal(refused).details == "why"
    assert ("Retry-After" in problem.headers) == (kind == admission.OVER_LIMIT)
    assert ("WWW-Authenticate" in problem.headers) == (kind == admission.UNAUTHENTICATED)


@pytest.mark.parametrize(
    ("routed", "grpc", "admin", "length", "kind"),
    [
        (route(["http://h:1"]), False, ADMIN_API, None, admission.FORBIDDEN),
        (route(["http://h:1"]), False, None, 101, admission.TOO_LARGE),
        (route(["http://h:1"]), False, None, 100, None),
        (route([]), False, None, None, admission.UNAVAILABLE),
        (route(["http://h:1"]), True, None, None, admission.UNAVAILABLE),  # no gRPC port
    ],
)
def test_admit(
    routed: object, grpc: bool, admin: str | None, length: int | None, kind: str | None
) -> None:
    a = core(routed)
    e = entry(a)
    if kind is None:
        a.admit(e, grpc=grpc, admin=admin, length=length, now=0.0)
        assert e.in_flight.count == 1
        return
    with pytest.raises(Refused) as refused:
        a.admit(e, grpc=grpc, admin=admin, length=length, now=0.0)
    assert refused.value.kind == kind and refused.value.service == SERVICE
    assert e.in_flight.count == 0  # a refused call holds no place


def test_over_its_bound_of_calls_in_flight() -> None:
    a = core(route(["http://h:1"], max_queue_size=1))
    a.admit(entry(a), grpc=False, admin=None, length=None, now=0.0)
    with pytest.raises(Refused) as refused:
        a.admit(entry(a), grpc=False, admin=None, length=None, now=0.0)
    # EAS's queue full (450): max_queue_size calls are in flight
    assert refused.value.kind == admission.QUEUE_FULL and refused.value.retry_after_s == 1


def test_a_service_at_zero_that_wakes_is_held_not_refused() -> None:
    a = core(route([], wakeable=True))
    with pytest.raises(Asleep):
        a.admit(entry(a), grpc=False, admin=None, length=None, now=0.0)


@pytest.mark.parametrize(
    ("raised", "kind"),
    [
        (QueueFull(), admission.QUEUE_FULL),
        (WakeTimeout(), admission.WAKE_TIMEOUT),
        (NotWakeable("no autoscaler"), admission.UNAVAILABLE),
        (Asleep.__new__(Asleep), admission.UNAVAILABLE),  # woke, and asleep again
    ],
)
def test_a_held_call_not_woken(raised: Exception, kind: str) -> None:
    a = core(route([], wakeable=True))
    refused = a.not_woken(raised, entry(a))
    assert refused.kind == kind and refused.service == SERVICE
    assert (refused.retry_after_s is not None) == (kind != admission.WAKE_TIMEOUT)


def test_an_unknown_name_is_not_found() -> None:
    assert core().unknown("nope").kind == admission.NOT_FOUND
