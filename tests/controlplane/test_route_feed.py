"""Route-table deltas: a gateway that applies the changes after its version ends with exactly
the whole table, whatever it missed; removals, rotations and restarts of either side included
(both databases, through the HTTP endpoint the gateway long-polls)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine, update

from contract.wire import ROUTES_PATH, Route, RouteTable
from controlplane.api.app import create_app
from controlplane.settings import Settings
from controlplane.store import queries, route_feed
from controlplane.store.changes import commit_watch
from controlplane.store.db import make_engine, make_sessions
from controlplane.store.queries import ReconcileStore
from controlplane.store.sealing import SealError
from controlplane.store.tables import CounterRow
from tests.controlplane.conftest import ADMIN, seed_spec


class Watcher:
    """What a gateway keeps: the routes by service, as whole tables and deltas arrive."""

    def __init__(self) -> None:
        self.version = -1
        self.routes: dict[str, Route] = {}
        self.tables: list[RouteTable] = []

    def poll(
        self,
        client: TestClient,
        page_size: int | None = None,
        between: Callable[[int], None] = lambda _: None,
    ) -> RouteTable:
        """One poll; a whole table asked for in pages of ``page_size`` is read to its last
        page, ``between(n)`` called before asking for page n + 1."""
        params: dict[str, Any] = {"after": self.version}
        if page_size is not None:
            params["page_size"] = page_size
        table = RouteTable.model_validate(client.get(ROUTES_PATH, params=params).json())
        if table.full:
            self.routes = {}
        while True:
            for name in table.removed:
                self.routes.pop(name, None)
            self.routes.update({r.service: r for r in table.routes})
            self.tables.append(table)
            if table.next_page is None:
                break
            between(len(self.tables))
            params["page"] = table.next_page
            table = RouteTable.model_validate(client.get(ROUTES_PATH, params=params).json())
        self.version = table.version
        return table


def whole(client: TestClient) -> dict[str, Route]:
    table = RouteTable.model_validate(client.get(ROUTES_PATH).json())
    assert table.full
    return {r.service: r for r in table.routes}


def create(client: TestClient, name: str, **metadata: Any) -> None:
    spec = seed_spec(name=name, metadata={"instance": 0, **metadata})
    assert client.post("/api/v2/services", json=spec).status_code == 200


def test_deltas_carry_only_what_changed(client: TestClient, settings: Settings) -> None:
    gateway = Watcher()
    for name in ("a", "b", "c"):
        create(client, name)
    assert gateway.poll(client).full and set(gateway.routes) == {"a", "b", "c"}

    client.post("/api/v2/services/local/a/token")  # a rotation
    delta = gateway.poll(client)
    assert (delta.full, [r.service for r in delta.routes], delta.removed) == (False, ["a"], [])
    assert gateway.routes == whole(client)

    # Missed versions: several changes between two polls arrive as one delta.
    client.put("/api/v2/services/local/b", json={"metadata": {"rpc": {"keepalive": 5000}}})
    create(client, "d")
    client.delete("/api/v2/services/local/c")  # marked for deletion: no longer routed
    delta = gateway.poll(client)
    assert sorted(r.service for r in delta.routes) == ["b", "d"] and delta.removed == ["c"]
    assert gateway.routes == whole(client)
    assert gateway.routes["b"].timeout_ms == 5000

    # The reconciler removes the row: a gateway still at the first table learns from a
    # tombstone that c is gone, with every other change it missed.
    stale = Watcher()
    stale.version = gateway.tables[0].version
    stale.routes = {r.service: r for r in gateway.tables[0].routes}
    ReconcileStore(make_sessions(make_engine(settings.sqlalchemy_url)), "local").forget("c")
    delta = stale.poll(client)
    assert "c" in delta.removed and not delta.full
    assert stale.routes == whole(client)
    assert gateway.poll(client).removed == ["c"]  # the tombstone (it had the mark already)
    assert gateway.routes == whole(client)


def test_a_change_costs_one_route_whatever_the_table_size(client: TestClient) -> None:
    for i in range(60):
        create(client, f"s{i}")
    gateway = Watcher()
    gateway.poll(client)
    client.put("/api/v2/services/local/s7/scale", json={"Instance": 0})  # no change: no bump
    client.post("/api/v2/services/local/s7/token")
    delta = gateway.poll(client)
    assert [r.service for r in delta.routes] == ["s7"] and not delta.full


def test_a_whole_table_in_pages_misses_no_change_made_between_them(client: TestClient) -> None:
    """The pages of a whole table carry the version read before the first page's routes, so
    the delta after it, asked for once the last page is in, brings every change made while
    the pages were read: to routes already sent (a rotation, a deletion) and to routes not
    yet sent (deleted before their page)."""
    for name in ("a", "b", "c", "d", "e", "f", "g"):
        create(client, name, group="grp")
    before = RouteTable.model_validate(client.get(ROUTES_PATH).json()).version

    def meanwhile(pages: int) -> None:
        if pages == 1:  # a and b were sent
            client.post("/api/v2/services/local/a/token")
            client.delete("/api/v2/services/local/b")
            create(client, "h")
        if pages == 2:  # c and d were sent
            client.delete("/api/v2/services/local/f")
            client.put("/api/v2/services/local/g", json={"metadata": {"rpc": {"keepalive": 7}}})

    gateway = Watcher()
    gateway.poll(client, page_size=2, between=meanwhile)
    pages = gateway.tables
    assert [len(p.routes) for p in pages] == [2, 2, 2, 1]  # e, g; h (f is gone)
    assert {p.version for p in pages} == {before} and gateway.version == before
    assert [p.continued for p in pages] == [False, True, True, True]
    assert [len(p.groups) for p in pages] == [1, 0, 0, 0]  # groups come with the first
    assert gateway.routes != whole(client)  # a's old token, b still listed

    delta = gateway.poll(client)
    assert not delta.full and "b" in delta.removed and "f" in delta.removed
    assert gateway.routes == whole(client)
    assert gateway.routes["g"].timeout_ms == 7


def test_a_page_the_feed_did_not_write_is_refused(client: TestClient) -> None:
    for page in ("x", "3", "3.-1", "3.x"):
        assert client.get(ROUTES_PATH, params={"page": page}).status_code == 400


def test_a_gateway_ahead_of_the_database_gets_the_whole_table(client: TestClient) -> None:
    """A control plane on a new, empty database: the gateway's version means nothing."""
    create(client, "a")
    current = RouteTable.model_validate(client.get(ROUTES_PATH).json()).version
    table = RouteTable.model_validate(
        client.get(ROUTES_PATH, params={"after": current + 1000}).json()
    )
    assert table.full and [r.service for r in table.routes] == ["a"]


def test_pruned_removals_send_a_far_behind_gateway_a_whole_table(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(route_feed, "REMOVALS_KEPT", 2)
    engine = make_engine(settings.sqlalchemy_url)
    store = ReconcileStore(make_sessions(engine), "local")
    with TestClient(create_app(settings, engine)) as client:
        client.headers["Authorization"] = f"Bearer {ADMIN}"
        for name in ("a", "b", "c", "d"):
            create(client, name)
        gateway = Watcher()
        gateway.poll(client)
        behind = gateway.version
        for name in ("a", "b", "c"):
            client.delete(f"/api/v2/services/local/{name}")
            store.forget(name)
        table = RouteTable.model_validate(client.get(ROUTES_PATH, params={"after": behind}).json())
        assert table.full and {r.service for r in table.routes} == {"d"}
        recent = gateway.version + 5  # within the kept window: still a delta
        delta = RouteTable.model_validate(client.get(ROUTES_PATH, params={"after": recent}).json())
        assert not delta.full
    engine.dispose()


def test_another_control_plane_on_the_same_database_continues_the_deltas(
    settings: Settings,
) -> None:
    """A failover or restart of the control plane: versions live in the database, so the
    gateway's version means the same to the next control plane."""
    engine = make_engine(settings.sqlalchemy_url)
    gateway = Watcher()
    with TestClient(create_app(settings, engine)) as first:
        first.headers["Authorization"] = f"Bearer {ADMIN}"
        create(first, "a")
        create(first, "b")
        gateway.poll(first)
    engine.dispose()
    engine = make_engine(settings.sqlalchemy_url)
    with TestClient(create_app(settings, engine)) as second:
        second.headers["Authorization"] = f"Bearer {ADMIN}"
        second.post("/api/v2/services/local/b/token")
        delta = gateway.poll(second)
        assert not delta.full and [r.service for r in delta.routes] == ["b"]
        assert gateway.routes == whole(second)
    engine.dispose()


def bump_elsewhere(engine: Engine) -> None:
    """A routing change committed by another process: no in-process signal."""
    with engine.begin() as conn:
        conn.execute(
            update(CounterRow)
            .where(CounterRow.name == route_feed.COUNTER)
            .values(value=CounterRow.value + 1)
        )


class CountedWatch(route_feed.VersionWatch):
    """A watch that counts its reads of the counter."""

    reads = 0

    def _read(self) -> int:
        self.reads += 1
        return super()._read()


async def test_one_reader_serves_every_waiting_long_poll(settings: Settings) -> None:
    """However many gateways long-poll one control plane, the counter is read once per
    interval (plus once as each poll arrives), and not at all once none waits."""
    engine = make_engine(settings.sqlalchemy_url)
    sessions = make_sessions(engine)
    watch = CountedWatch(sessions, interval=0.1)
    with sessions() as s:
        start = route_feed.version(s)

    waiters = [asyncio.create_task(watch.wait_past(start, 5.0)) for _ in range(20)]
    # Each arrival reads once (none finds the reader started yet): a loaded machine may
    # start some of those reads late, and they are not the reader's ticks counted below.
    async with asyncio.timeout(10):
        while watch.reads < 20:
            await asyncio.sleep(0.01)
    await asyncio.sleep(0.35)
    assert not any(w.done() for w in waiters)
    before, started = watch.reads, asyncio.get_running_loop().time()
    await asyncio.to_thread(bump_elsewhere, engine)
    assert all(await asyncio.gather(*waiters))  # each saw the change
    ticks = (asyncio.get_running_loop().time() - started) / watch.interval
    # One reader for all twenty, at its interval (twenty readers would read 20 per tick).
    assert watch.reads - before <= ticks + 2, (watch.reads - before, ticks)
    assert watch.reads <= 20 + 8 + ticks  # a fresh read per arriving poll, plus the ticks
    await asyncio.sleep(0.3)
    idle = watch.reads
    await asyncio.sleep(0.3)
    assert watch.reads == idle  # nobody waiting: nothing read
    engine.dispose()


async def test_long_polls_waiting_in_steps_read_only_at_the_readers_pace(
    settings: Settings,
) -> None:
    """The route long-poll waits in steps (to notice a gateway gone); a step that finds the
    reader running with the version it waits past reads nothing more. Ten gateways waiting
    six steps each read about once per interval, not sixty times; a poll past a version this
    process has not seen yet still reads at once (it would otherwise be answered at once,
    with nothing, until the reader caught up)."""
    engine = make_engine(settings.sqlalchemy_url)
    sessions = make_sessions(engine)
    watch = CountedWatch(sessions, interval=0.1)
    with sessions() as s:
        start = route_feed.version(s)

    async def gateway() -> None:
        for _ in range(6):
            assert not await watch.wait_past(start, 0.05)

    began = asyncio.get_running_loop().time()
    await asyncio.gather(*(gateway() for _ in range(10)))
    ticks = (asyncio.get_running_loop().time() - began) / watch.interval
    assert watch.reads <= 10 + ticks + 2, (watch.reads, ticks)  # each arrival, then the reader
    assert watch.reads < 30  # a fresh read per step would be 60

    slow = CountedWatch(sessions, interval=60.0)  # its reader will not tick in this test
    waiting = asyncio.create_task(slow.wait_past(start, 5.0))
    await asyncio.sleep(0.05)
    await asyncio.to_thread(bump_elsewhere, engine)
    assert slow.reads == 1
    # A gateway that saw start + 1 elsewhere: its poll reads, waits, and wakes the other.
    assert not await slow.wait_past(start + 1, 0.05)
    assert slow.reads == 2
    assert await waiting
    engine.dispose()


def test_commit_watch_moves_with_another_connections_commit(database_url: str) -> None:
    """SQLite's watch says False while nothing was committed and True after a commit by
    any other connection (this process's own sessions included); on PostgreSQL it always
    says True (the poll reads), as on its first call."""
    engine = make_engine(database_url)
    written = commit_watch(make_sessions(engine))
    sqlite = engine.dialect.name == "sqlite"
    assert written()  # first call: nothing seen yet
    assert written() is not sqlite
    assert written() is not sqlite
    bump_elsewhere(engine)
    assert written()
    assert written() is not sqlite
    engine.dispose()


def test_commit_watch_of_a_database_in_memory_always_reads() -> None:
    engine = make_engine("sqlite://")
    written = commit_watch(make_sessions(engine))
    assert all(written() for _ in range(3))
    engine.dispose()


async def test_an_idle_reader_reads_only_after_a_commit(settings: Settings) -> None:
    """While long-polls wait and nothing is committed, the reader's ticks read nothing on
    SQLite (PostgreSQL reads each tick); a commit by another process is still seen within
    a tick."""
    engine = make_engine(settings.sqlalchemy_url)
    sessions = make_sessions(engine)
    watch = CountedWatch(sessions, interval=0.05)
    with sessions() as s:
        start = route_feed.version(s)
    waiting = asyncio.create_task(watch.wait_past(start, 10.0))
    await asyncio.sleep(0.3)  # the arrival's read and the reader's first tick
    settled = watch.reads
    await asyncio.sleep(0.5)  # ten ticks
    if engine.dialect.name == "sqlite":
        assert watch.reads == settled
    else:
        assert watch.reads >= settled + 5
    await asyncio.to_thread(bump_elsewhere, engine)
    async with asyncio.timeout(5):
        assert await waiting
    engine.dispose()


def test_routes_carry_their_token_unless_no_key_opens_it(
    client: TestClient, settings: Settings, caplog: pytest.LogCaptureFixture
) -> None:
    """The token is the key of EAS-signed calls at the gateway; one sealed with a key no
    longer configured leaves its route without it (signed calls refused there, the token
    itself still opens: the digest is all that needs), and the table is still served."""
    create(client, "a")
    assert whole(client)["a"].token is not None
    sessions = make_sessions(make_engine(settings.sqlalchemy_url))

    def lost_key(sealed: str) -> str:
        raise SealError("a stored token cannot be opened with OPENEAS_SECRET_KEY")

    table = route_feed.table(sessions, "local", 1000, opener=lost_key)
    assert [(r.service, r.token) for r in table.routes] == [("a", None)]
    assert "service 'a': a stored token cannot be opened" in caplog.text
    assert route_feed.table(sessions, "local", 1000).routes[0].token is None  # no opener


def test_a_new_version_waits_for_the_one_before_it_to_commit(
    client: TestClient, settings: Settings
) -> None:
    """The invariant deltas rest on: a version is handed out under the counter's lock, held
    to its commit, so versions commit in order and a gateway past V has seen all up to V."""
    create(client, "first")
    create(client, "second")
    engine = make_engine(settings.sqlalchemy_url)
    sessions = make_sessions(engine)
    with sessions() as s:
        found = {name: queries.find(s, "local", name) for name in ("first", "second")}
    ids = {name: row.id for name, row in found.items() if row is not None}
    try:
        with sessions() as early, ThreadPoolExecutor(1) as pool:
            version = route_feed.stamp(early, [ids["first"]])
            assert version is not None

            def later() -> int | None:
                with sessions() as s:
                    stamped = route_feed.stamp(s, [ids["second"]])
                    s.commit()
                    return stamped

            waiting = pool.submit(later)
            with pytest.raises(FutureTimeout):
                waiting.result(timeout=0.5)  # the lock is still held by the uncommitted one
            early.commit()
            assert waiting.result(timeout=10) == version + 1
    finally:
        engine.dispose()
