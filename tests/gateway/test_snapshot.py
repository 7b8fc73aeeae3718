"""The route snapshot: saved when the control plane stops answering and on shutdown, and
served by a gateway that starts while the control plane hangs (stopped with SIGSTOP: the
kernel accepts its connections, nothing answers) — with its health saying so. The file holds
a route per line and is read a line at a time: a big one within a page of memory, a damaged
one ignored whole, an older single-line one still served."""

from __future__ import annotations

import gc
import gzip
import logging
import socket
import stat
import tracemalloc
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from bench.route_memory import synthetic_routes
from contract.wire import GroupRoute, Route, RouteTable, token_digest
from gateway import snapshot
from gateway.route_source import PAGE_SIZE, ControlPlaneRouteSource
from gateway.routing.balancer import EndpointPool
from gateway.routing.route_table import RouteState
from testing.waiting import seconds_until, wait_until
from tests.gateway.conftest import GatewayFactory
from tests.gateway.harness import TOKEN, Echo, FakeControlPlane, Gateway, LoopThread, route, table
from tests.gateway.test_route_table import ADMIN, health, status_of


@pytest.fixture
def hung() -> Iterator[socket.socket]:
    """A control plane that accepts connections and never answers."""
    with socket.create_server(("127.0.0.1", 0), backlog=16) as s:
        yield s


def source_at(port: int) -> ControlPlaneRouteSource:
    return ControlPlaneRouteSource(
        f"http://127.0.0.1:{port}", ADMIN, wait_s=1.0, backoff_initial_s=0.02, backoff_max_s=0.2
    )


def test_a_gateway_started_while_the_control_plane_hangs_serves_its_snapshot(
    make_gateway: GatewayFactory,
    hung: socket.socket,
    echo: Echo,
    lt: LoopThread,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)
    saved = tmp_path / "routes.json"
    snapshot.save(saved, table(route([echo.url]), version=7))
    port = hung.getsockname()[1]
    gw = make_gateway(
        source=source_at(port),
        wait_routes=False,
        route_snapshot=str(saved),
        connect_timeout_ms=300,
    )
    assert seconds_until(lambda: health(gw)["status"] == "ok", 10) > 0.2  # waited for the CP
    doc = health(gw)
    assert str(doc["serving_from"]).startswith(f"snapshot {saved} saved at ")
    assert "(version 7)" in str(doc["serving_from"])
    assert doc["route_table_version"] == 7
    assert doc["control_plane"] == "connecting"
    assert status_of(gw) == 200
    assert "serving the snapshot" in caplog.text

    # The control plane answers again (its hung connections are reset): its table replaces
    # the snapshot whole, and the health says where routes come from now.
    hung.close()
    fresh = FakeControlPlane(ADMIN, table(route([echo.url], token="fresh"), version=1), port)
    lt.run(fresh.start())
    try:
        wait_until(lambda: health(gw)["serving_from"] == "control_plane", 15)
        assert status_of(gw, "fresh") == 200
        assert status_of(gw) == 401
    finally:
        lt.run(fresh.stop())


def test_without_a_snapshot_it_says_it_serves_nothing(
    make_gateway: GatewayFactory,
    hung: socket.socket,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)
    gw = make_gateway(
        source=source_at(hung.getsockname()[1]),
        wait_routes=False,
        route_snapshot=str(tmp_path / "none.json"),
        connect_timeout_ms=200,
    )
    wait_until(lambda: "serving nothing until it answers" in caplog.text, 10)
    doc = health(gw)
    assert (doc["status"], doc["serving_from"]) == ("starting", "nothing yet")
    assert status_of(gw) == 404


def test_saved_when_the_control_plane_goes_and_on_close(
    make_gateway: GatewayFactory, lt: LoopThread, echo: Echo, tmp_path: Path
) -> None:
    saved = tmp_path / "state" / "routes.json"
    cp = FakeControlPlane(ADMIN, table(route([echo.url]), version=3))
    lt.run(cp.start())
    gw = make_gateway(source=source_at(cp.port), route_snapshot=str(saved))
    assert health(gw)["serving_from"] == "control_plane"
    assert not saved.exists()  # steady state writes nothing
    lt.run(cp.stop())
    wait_until(saved.exists, 10)
    kept = RouteTable.model_validate_json(saved.read_bytes())
    assert (kept.version, [r.service for r in kept.routes]) == (3, ["svc"])
    assert stat.S_IMODE(saved.stat().st_mode) == 0o600
    assert TOKEN.encode() not in saved.read_bytes()  # digests only
    assert kept.routes[0].token is None  # the route had its token (signed calls' key)

    saved.unlink()
    gw.close()
    assert RouteTable.model_validate_json(saved.read_bytes()).version == 3


def test_an_unreadable_snapshot_is_ignored(tmp_path: Path) -> None:
    bad = tmp_path / "routes.json"
    bad.write_text('{"version": "x"}')
    assert snapshot.load(bad) is None
    assert snapshot.load(tmp_path / "missing.json") is None


@pytest.mark.parametrize(("own", "shared", "served"), [(None, 9, 9), (4, 9, 9), (12, 9, 12)])
def test_a_new_gateway_pod_serves_the_newer_of_its_own_and_the_shared_snapshot(
    make_gateway: GatewayFactory,
    hung: socket.socket,
    echo: Echo,
    tmp_path: Path,
    own: int | None,
    shared: int,
    served: int,
) -> None:
    """The shared one is what the leading control plane keeps in a ConfigMap (gzip, as
    :mod:`controlplane.runtime.kubernetes.route_snapshot` encodes it; the kubelet mounts
    it): a pod on a new node has no file of its own, and serves it."""
    from controlplane.runtime.kubernetes.route_snapshot import encode

    mounted = tmp_path / "configmap" / "routes.json.gz"
    mounted.parent.mkdir()
    mounted.write_bytes(encode(table(route([echo.url]), version=shared)))
    mine = tmp_path / "routes.json"
    if own is not None:
        snapshot.save(mine, table(route([echo.url], token="old"), version=own))
    gw = from_snapshots(make_gateway, hung, mine, mounted)
    where = str(health(gw)["serving_from"])
    assert f"(version {served})" in where
    assert where.startswith(f"snapshot {mounted if served == shared else mine} saved at ")
    assert status_of(gw, TOKEN if served == shared else "old") == 200
    # Its own file is still written to (never the read-only mount).
    assert mounted.read_bytes()[:2] == b"\x1f\x8b"


def from_snapshots(
    make_gateway: GatewayFactory, hung: socket.socket, mine: Path, mounted: Path
) -> Gateway:
    """A gateway whose control plane never answers, serving from its snapshots."""
    gw = make_gateway(
        source=source_at(hung.getsockname()[1]),
        wait_routes=False,
        route_snapshot=str(mine),
        route_snapshot_shared=str(mounted),
        connect_timeout_ms=300,
    )
    wait_until(lambda: health(gw)["status"] == "ok", 10)
    return gw


def test_a_damaged_shared_snapshot_is_ignored(tmp_path: Path) -> None:
    bad = tmp_path / "routes.json.gz"
    bad.write_bytes(b"\x1f\x8b" + b"\x00" * 20)
    assert snapshot.load(bad) is None


def test_a_damaged_own_snapshot_is_ignored_whole_and_the_shared_one_served(
    make_gateway: GatewayFactory,
    hung: socket.socket,
    echo: Echo,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The newer file breaks after its first route: none of its routes is served."""
    mounted = tmp_path / "routes.json.gz"
    snapshot.save(mounted, table(route([echo.url]), version=9))
    mounted.write_bytes(gzip.compress(mounted.read_bytes()))
    mine = tmp_path / "routes.json"
    own = [route([echo.url], service=name, token="old") for name in ("aa", "svc", "zz")]
    snapshot.save(mine, table(*own, version=12))
    lines = mine.read_bytes().splitlines(keepends=True)
    lines[2] = b',{"service": "svc", "token_sha256"\n'
    mine.write_bytes(b"".join(lines))
    gw = from_snapshots(make_gateway, hung, mine, mounted)
    doc = health(gw)
    assert (doc["route_table_version"], doc["services"]) == (9, 1)
    assert str(doc["serving_from"]).startswith(f"snapshot {mounted} saved at ")
    assert f"ignoring the route snapshot {mine}" in caplog.text
    assert (status_of(gw), status_of(gw, "old")) == (200, 401)


# The saved table of the tests below: routes and a group, as the control plane sends them.
GROUP = GroupRoute(group="grp", token_sha256=token_digest("g"), token="g", traffic_mode="auto")


def routes(count: int) -> list[Route]:
    return list(synthetic_routes(0, count))


def saved_as_lines(path: Path, count: int, version: int = 4) -> list[Route]:
    """The file a gateway saves (a route per line); the routes saved."""
    kept = routes(count)
    snapshot.save_routes(path, version, kept, [GROUP])
    return kept


def saved_as_one_line(path: Path, count: int, version: int = 4) -> list[Route]:
    """The file an older gateway saved: the table whole, on one line."""
    kept = routes(count)
    old = RouteTable(version=version, routes=kept, groups=[GROUP])
    path.write_bytes(old.model_dump_json(exclude={"routes": {"__all__": {"token"}}}).encode())
    return kept


def gzipped(write: Callable[[Path, int], list[Route]]) -> Callable[[Path, int], list[Route]]:
    """``write``'s file gzip-compressed, as the control plane's ConfigMap holds it."""

    def compressed(path: Path, count: int) -> list[Route]:
        kept = write(path, count)
        path.write_bytes(gzip.compress(path.read_bytes()))
        return kept

    return compressed


LAYOUTS = {
    "lines": saved_as_lines,
    "one line (older writers)": saved_as_one_line,
    "lines, gzip": gzipped(saved_as_lines),
    "one line, gzip": gzipped(saved_as_one_line),
}


def test_the_file_holds_a_route_per_line_and_parses_whole(tmp_path: Path) -> None:
    path = tmp_path / "routes.json"
    kept = saved_as_lines(path, 3, version=4)
    lines = path.read_bytes().splitlines(keepends=True)
    assert lines[0] == b'{"version":4,"full":true,"routes":[\n'
    assert lines[4:] == [b'],"groups":[\n', lines[5], b"]}\n"]
    # The first route alone on its line, each next one after the separator.
    assert [not line.startswith(b",") for line in lines[1:4]] == [True, False, False]
    read = [Route.model_validate_json(line.removeprefix(b",")) for line in lines[1:4]]
    assert read == [r.model_copy(update={"token": None}) for r in kept]
    assert GroupRoute.model_validate_json(lines[5]).group == GROUP.group
    # One JSON document still: what older gateways read.
    whole = RouteTable.model_validate_json(path.read_bytes())
    assert (whole.version, whole.routes, len(whole.groups)) == (4, read, 1)
    assert b"token" not in path.read_bytes().replace(b"token_sha256", b"")


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize(
    ("count", "size", "page_sizes"),
    [(0, 3, [0]), (2, 3, [2]), (3, 3, [3]), (4, 3, [3, 1]), (6, 3, [3, 3]), (7, 3, [3, 3, 1])],
)
def test_a_snapshot_comes_in_the_pages_of_a_paged_whole_table(
    tmp_path: Path, layout: str, count: int, size: int, page_sizes: list[int]
) -> None:
    path = tmp_path / "routes.json"
    kept = LAYOUTS[layout](path, count)
    saved = snapshot.load(path)
    assert saved is not None
    assert (saved.path, saved.version, saved.routes) == (path, 4, count)
    assert saved.saved_at == path.stat().st_mtime
    pages = list(saved.pages(size))
    assert [len(p.routes) for p in pages] == page_sizes
    assert all(p.full and p.version == 4 for p in pages)
    assert [p.continued for p in pages] == [i > 0 for i in range(len(pages))]
    assert [p.next_page is None for p in pages] == [i == len(pages) - 1 for i in range(len(pages))]
    assert [len(p.groups) for p in pages] == [0] * (len(pages) - 1) + [1]
    assert [r.service for p in pages for r in p.routes] == [r.service for r in kept]
    # Applied as they come, they make the table (the version moves at the last page).
    state = RouteState(EndpointPool(), default_timeout_ms=1000)
    for page in pages:
        state.apply(page)
    assert (state.version, sorted(state.services), list(state.groups)) == (
        4,
        sorted(r.service for r in kept),
        [GROUP.group],
    )


@pytest.mark.parametrize("compress", [False, True], ids=["plain", "gzip"])
@pytest.mark.parametrize(
    "damage",
    [
        pytest.param(lambda ls: [*ls[:2], b',{"service": "svc_x", "tok\n', *ls[3:]], id="bad line"),
        pytest.param(lambda ls: [*ls[:2], ls[2].removeprefix(b","), *ls[3:]], id="no separator"),
        pytest.param(lambda ls: [ls[0], b"," + ls[1], *ls[2:]], id="separator first"),
        pytest.param(lambda ls: [*ls[:2], b'{"x": 1}\n', *ls[3:]], id="not a route"),
        pytest.param(lambda ls: ls[:3], id="cut after a route"),
        pytest.param(lambda ls: [*ls[:2], ls[2][:30]], id="cut inside a route"),
        pytest.param(lambda ls: ls[:-1], id="no end"),
        pytest.param(lambda ls: [*ls, b"{}\n"], id="text after the end"),
        pytest.param(lambda ls: [*ls[:-3], ls[1], *ls[-2:]], id="a route among the groups"),
        pytest.param(lambda ls: [b'{"version":04,"full":true,"routes":[\n', *ls[1:]], id="head"),
    ],
)
def test_a_damaged_snapshot_is_ignored_whole(
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    damage: Callable[[list[bytes]], list[bytes]],
    compress: bool,
) -> None:
    path = tmp_path / "routes.json"
    saved_as_lines(path, 4)
    damaged = b"".join(damage(path.read_bytes().splitlines(keepends=True)))
    path.write_bytes(gzip.compress(damaged) if compress else damaged)
    assert snapshot.load(path) is None
    assert f"ignoring the route snapshot {path}" in caplog.text


def test_a_snapshot_replaced_after_it_was_read_gives_no_page(tmp_path: Path) -> None:
    path = tmp_path / "routes.json"
    saved_as_lines(path, 4)
    saved = snapshot.load(path)
    assert saved is not None
    saved_as_lines(path, 5)  # replaced (a file of its own): not the one validated
    with pytest.raises(snapshot.Unreadable, match="changed since it was read"):
        next(saved.pages(2))


def test_the_newest_snapshot_is_chosen_by_its_version(tmp_path: Path) -> None:
    found = []
    for name, version in (("a", 3), ("b", 8), ("c", 8), ("d", 5)):
        snapshot.save_routes(tmp_path / name, version, routes(1), [])
        found.append(snapshot.load(tmp_path / name))
    best = snapshot.newest(None, *found)
    assert best is not None and best.path == tmp_path / "b"
    assert snapshot.newest(None, None) is None


BIG = 20_000


def test_a_big_snapshot_loads_within_a_page_of_memory(tmp_path: Path) -> None:
    """Validated then applied in pages, the file costs the table it makes and about a page
    more at its peak; a whole parse of the same bytes costs several times that."""
    path = tmp_path / "routes.json"
    snapshot.save_routes(path, 5, synthetic_routes(0, BIG), [GROUP])
    state = RouteState(EndpointPool(), default_timeout_ms=600_000)
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        saved = snapshot.load(path)
        assert saved is not None
        for page in saved.pages(PAGE_SIZE):
            state.apply(page)
        del page
        gc.collect()
        now, peak = tracemalloc.get_traced_memory()
        steady, over = now - before, peak - now
        tracemalloc.reset_peak()
        whole = RouteTable.model_validate_json(path.read_bytes())
        whole_peak = tracemalloc.get_traced_memory()[1] - now
    finally:
        tracemalloc.stop()
    assert (len(state.services), state.version, len(whole.routes)) == (BIG, 5, BIG)
    figures = f"{steady / BIG:.0f} B/route kept, peak {over / BIG:.0f} B/route over it"
    figures += f", a whole parse {whole_peak / BIG:.0f} B/route"
    # (Here about 360, 170 and 1,960: the peak over the table is a page and the names
    # listed until the last page; a whole parse is the table's size again, five times.)
    assert steady + over < whole_peak / 2, figures
    assert over < whole_peak / 5, figures
