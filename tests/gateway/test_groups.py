"""Service groups through the real gateway: the group endpoint splits traffic exactly by
weight (or by ready replicas), skips standalone and unready members, and opens with the
group token or a member's; members stay reachable at ``<group>.<service>``."""

from __future__ import annotations

import http.client
from collections import Counter
from collections.abc import Iterator

import pytest
from aiohttp import web

from contract.wire import GroupRoute, Route, RouteTable, token_digest
from tests.gateway.conftest import GatewayFactory
from tests.gateway.harness import LoopThread, route

GROUP_TOKEN = "group-token-0123456789abcdef"


class Members:
    """One tiny upstream per member, answering with its own name."""

    def __init__(self, lt: LoopThread, names: list[str]) -> None:
        self.lt = lt
        self.urls: dict[str, str] = {}
        self.runners: list[web.AppRunner] = []
        for name in names:
            self.urls[name] = lt.run(self._start(name))

    async def _start(self, name: str) -> str:
        async def answer(_: web.Request) -> web.Response:
            return web.Response(text=name)

        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", answer)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        self.runners.append(runner)
        return f"http://127.0.0.1:{runner.addresses[0][1]}"

    def close(self) -> None:
        for runner in self.runners:
            self.lt.run(runner.cleanup())


@pytest.fixture(scope="module")
def members(lt: LoopThread) -> Iterator[Members]:
    m = Members(lt, ["a", "b", "c"])
    yield m
    m.close()


def member(
    m: Members, name: str, *, weight: int = 100, grouping: bool = True, **kw: object
) -> Route:
    base = route([m.urls[name]], service=name, token=f"token-of-{name}-0123456789", **kw)  # type: ignore[arg-type]
    return base.model_copy(update={"group": "g", "weight": weight, "grouping": grouping})


def group_table(*routes: Route, mode: str = "customized", version: int = 1) -> RouteTable:
    group = GroupRoute(group="g", token_sha256=token_digest(GROUP_TOKEN), traffic_mode=mode)  # type: ignore[arg-type]
    return RouteTable(version=version, routes=list(routes), groups=[group])


def calls(
    port: int, n: int, path: str = "/api/predict/g/v2", token: str = GROUP_TOKEN
) -> Counter[str]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    seen: Counter[str] = Counter()
    for _ in range(n):
        conn.request("GET", path, headers={"Authorization": f"Bearer {token}"})
        resp = conn.getresponse()
        body = resp.read().decode()
        seen[body if resp.status == 200 else str(resp.status)] += 1
    conn.close()
    return seen


def test_weights_split_exactly_over_ten_thousand_requests(
    make_gateway: GatewayFactory, members: Members
) -> None:
    gw = make_gateway(
        group_table(member(members, "a", weight=100), member(members, "b", weight=300))
    )
    assert calls(gw.port, 10_000) == {"a": 2_500, "b": 7_500}  # exact, not ±1 %


def test_standalone_and_unready_members_get_no_group_traffic(
    make_gateway: GatewayFactory, members: Members
) -> None:
    unready = member(members, "c").model_copy(update={"endpoints": [], "status": "Waiting"})
    gw = make_gateway(
        group_table(member(members, "a"), member(members, "b", grouping=False), unready)
    )
    assert calls(gw.port, 50) == {"a": 50}
    # Direct endpoints stay: by name, and as <group>.<service> with the member's token.
    assert calls(gw.port, 2, "/api/predict/b/v2", "token-of-b-0123456789") == {"b": 2}
    assert calls(gw.port, 2, "/api/predict/g.b/v2", "token-of-b-0123456789") == {"b": 2}
    assert calls(gw.port, 2, "/api/predict/g.b/v2") == {"b": 2}  # the group token too
    assert calls(gw.port, 1, "/api/predict/x.b/v2") == {"404": 1}  # b is not in group x
    gw.publish(group_table(member(members, "b", grouping=False), version=2))
    assert calls(gw.port, 1) == {"503": 1}  # nobody takes group traffic


def test_auto_splits_by_ready_replicas(make_gateway: GatewayFactory, members: Members) -> None:
    two = member(members, "b").model_copy(
        update={"endpoints": [members.urls["b"], members.urls["b"] + "/"]}
    )
    gw = make_gateway(group_table(member(members, "a", weight=1000), two, mode="auto"))
    assert calls(gw.port, 300) == {"a": 100, "b": 200}  # weights ignored: 1 vs 2 replicas


def test_who_may_call_the_group_endpoint(make_gateway: GatewayFactory, members: Members) -> None:
    gw = make_gateway(group_table(member(members, "a"), member(members, "b", grouping=False)))
    assert calls(gw.port, 1, token="token-of-b-0123456789") == {"a": 1}  # any member's token
    assert calls(gw.port, 1, token="wrong-token-0123456789") == {"401": 1}
    # A member that leaves takes its token's access along, even right after it was used.
    gw.publish(RouteTable(version=2, routes=[], full=False, removed=["b"]))
    assert calls(gw.port, 1, token="token-of-b-0123456789") == {"401": 1}
    assert calls(gw.port, 1) == {"a": 1}


def test_a_weight_change_applies_to_the_next_requests(
    make_gateway: GatewayFactory, members: Members
) -> None:
    gw = make_gateway(group_table(member(members, "a"), member(members, "b")))
    assert calls(gw.port, 100) == {"a": 50, "b": 50}
    delta = RouteTable(version=2, routes=[member(members, "b", weight=0)], full=False)
    gw.publish(delta)
    assert calls(gw.port, 100) == {"a": 100}
    gone = RouteTable(version=3, routes=[], full=False, removed_groups=["g"])
    gw.publish(gone)
    assert calls(gw.port, 1, "/api/predict/g/v2") == {"404": 1}
