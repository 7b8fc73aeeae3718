"""The reconciler against an in-memory runtime: every transition and error path, on SQLite
and PostgreSQL, plus leader election between two reconcilers on one database."""

from __future__ import annotations

import asyncio
import itertools
import threading
import time
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

import pytest
from sqlalchemy import event, func, or_, select
from sqlalchemy.orm import Session, sessionmaker

from contract.progress import Progress
from controlplane.model.kept_rows import KeptRows
from controlplane.model.states import Status
from controlplane.reconcile.reconciler import BATCH, Reconciler
from controlplane.runtime.base import (
    DesiredReplicaSet,
    Notify,
    Observation,
    PermanentRuntimeError,
    ReplicaState,
    ReplicaStatus,
    ReplicaSummary,
    TemporaryRuntimeError,
)
from controlplane.store import changes, route_feed
from controlplane.store.db import make_engine, make_sessions
from controlplane.store.queries import ReconcileStore, StatusWrite
from controlplane.store.sealing import TokenSealer
from controlplane.store.services import Services
from controlplane.store.tables import ServiceRow
from testing.waiting import wait_until_async
from tests.controlplane.conftest import seed_spec
from tests.tasks import stop


class FakeRuntime:
    """Replicas as records; tests flip their state and the runtime notifies like a real one."""

    def __init__(self, notify: Notify) -> None:
        self.notify = notify
        self.replicas: dict[str, list[ReplicaStatus]] = {}
        self.applied: list[DesiredReplicaSet] = []
        self.applied_at: list[float] = []  # time.monotonic() of each apply call
        self.fail_apply: list[Exception] = []
        self.deletes_pending = 0
        self.closed = False
        self.observed: list[str] = []
        self.summaries = 0
        self.installation = ""  # claimed
        self.refuse = ""  # claim answers this when set
        self.warnings: list[tuple[str, str]] = []

    async def claim(self, installation: str) -> str | None:
        self.installation = installation
        return self.refuse or None

    async def warn(self, reason: str, message: str) -> None:
        self.warnings.append((reason, message))

    async def apply(self, desired: DesiredReplicaSet) -> None:
        self.applied.append(desired)
        self.applied_at.append(time.monotonic())
        if self.fail_apply:
            raise self.fail_apply.pop(0)
        have = [
            r
            for r in self.replicas.get(desired.service, [])
            if r.template_hash == desired.template_hash
        ]
        while len(have) < desired.replicas:
            have.append(
                ReplicaStatus(f"{desired.service}-{len(have)}", desired.template_hash, "Pending")
            )
        self.replicas[desired.service] = have[: desired.replicas]

    async def observe(self, service: str) -> Observation:
        self.observed.append(service)
        return Observation(list(self.replicas.get(service, [])))

    async def delete(self, service: str) -> bool:
        if self.deletes_pending:
            self.deletes_pending -= 1
            return False
        self.replicas.pop(service, None)
        return True

    async def services(self) -> set[str]:
        return {s for s, r in self.replicas.items() if r}

    async def summary(self) -> dict[str, ReplicaSummary]:
        self.summaries += 1
        return {
            s: ReplicaSummary(
                len(r), sum(x.state == "Running" for x in r), frozenset(x.template_hash for x in r)
            )
            for s, r in self.replicas.items()
            if r
        }

    async def logs(self, service: str, replica: int | None, tail: int) -> str:
        return ""

    async def close(self) -> None:
        self.closed = True

    def set_all(self, service: str, state: ReplicaState, **kw: Any) -> None:
        self.replicas[service] = [
            ReplicaStatus(
                r.name,
                r.template_hash,
                state,
                endpoint=f"http://127.0.0.1:{9000 + i}",
                grpc_endpoint=f"http://127.0.0.1:{9100 + i}",
                **kw,
            )
            for i, r in enumerate(self.replicas[service])
        ]
        self.notify(service)


class Harness:
    def __init__(self, sessions: sessionmaker[Session]) -> None:
        self.sessions = sessions
        self.services = Services(sessions, "local", TokenSealer(["sealing-key-for-tests-0123"]))
        self.runtime: FakeRuntime | None = None

    def make_reconciler(self, **kw: Any) -> Reconciler:
        def factory(notify: Notify) -> FakeRuntime:
            self.runtime = FakeRuntime(notify)
            return self.runtime

        return Reconciler(self.sessions, factory, "local", poll_seconds=0.05, **kw)

    def installation(self) -> str:
        return ReconcileStore(self.sessions, "local").installation()

    def row(self, name: str = "triton_test") -> Any:
        return self.services.get("local", name)

    async def until(self, check: Callable[[], object], timeout: float = 15.0) -> None:
        await wait_until_async(check, timeout)

    def reasons(self, name: str = "triton_test") -> list[str]:
        return [e.reason for e in self.services.events("local", name)]


@pytest.fixture
async def harness(database_url: str) -> AsyncIterator[Harness]:
    engine = make_engine(database_url)
    yield Harness(make_sessions(engine))
    engine.dispose()


@pytest.fixture
async def running(harness: Harness) -> AsyncIterator[tuple[Harness, Reconciler]]:
    reconciler = harness.make_reconciler(lease_ttl=1.0)
    task = asyncio.create_task(reconciler.run())
    await harness.until(lambda: reconciler.is_leader)
    yield harness, reconciler
    await stop(task)


def status(h: Harness) -> tuple[str, int, int, int]:
    r = h.row()
    return r.status, r.total_instances, r.pending_instances, r.running_instances


async def test_create_waits_then_runs_and_publishes_endpoints(
    running: tuple[Harness, Reconciler],
) -> None:
    h, _ = running
    h.services.create(seed_spec(metadata={"instance": 2}))
    await h.until(lambda: status(h) == ("Waiting", 2, 2, 0))
    assert h.row().observed_generation == 1
    before = route_feed.table(h.sessions, "local", 1000)
    assert before.routes[0].endpoints == []
    assert h.runtime is not None
    h.runtime.set_all("triton_test", "Running")
    await h.until(lambda: status(h) == ("Running", 2, 0, 2))
    after = route_feed.table(h.sessions, "local", 1000)
    assert after.version > before.version
    assert after.routes[0].endpoints == ["http://127.0.0.1:9000", "http://127.0.0.1:9001"]
    assert after.routes[0].grpc_endpoints == ["http://127.0.0.1:9100", "http://127.0.0.1:9101"]
    assert h.reasons() == ["Created", "Waiting", "Running"]


async def test_unchanged_resync_writes_nothing(running: tuple[Harness, Reconciler]) -> None:
    h, reconciler = running
    h.services.create(seed_spec())
    await h.until(lambda: status(h)[0] == "Waiting")
    version = h.row().version
    for _ in range(3):
        await reconciler.reconcile("triton_test")
    assert h.row().version == version


async def test_permanent_error_fails_until_a_new_generation(
    running: tuple[Harness, Reconciler],
) -> None:
    h, _ = running
    assert h.runtime is not None
    h.runtime.fail_apply.append(PermanentRuntimeError("UnknownResourceGroup", "no group r9"))
    h.services.create(seed_spec())
    await h.until(lambda: h.row().status == "Failed")
    row = h.row()
    assert (row.reason, row.message, row.observed_generation) == (
        "UnknownResourceGroup",
        "no group r9",
        1,
    )
    applied = len(h.runtime.applied)
    await asyncio.sleep(0.3)
    assert len(h.runtime.applied) == applied  # not retried for the same generation
    h.services.scale("local", "triton_test", 1)
    h.services.update("local", "triton_test", {"metadata": {"cpu": 2}})
    await h.until(lambda: h.row().status == "Waiting")


async def test_temporary_errors_are_retried_with_backoff(
    running: tuple[Harness, Reconciler],
) -> None:
    h, _ = running
    assert h.runtime is not None
    h.runtime.fail_apply += [TemporaryRuntimeError("api down"), TemporaryRuntimeError("again")]
    h.services.create(seed_spec())
    await h.until(lambda: h.row().status == "Waiting")
    assert len(h.runtime.applied) == 3
    # Requeued 0.5 s after the first failure, then 1 s after the second (doubling).
    first, second = (b - a for a, b in itertools.pairwise(h.runtime.applied_at))
    assert first >= 0.45 and second >= 0.95, (first, second)
    assert second > first * 1.5, (first, second)


async def test_crashloop_then_recovery(running: tuple[Harness, Reconciler]) -> None:
    h, _ = running
    assert h.runtime is not None
    h.services.create(seed_spec())
    await h.until(lambda: h.row().status == "Waiting")
    h.runtime.set_all(
        "triton_test",
        "CrashLoopBackOff",
        restarts=3,
        reason="CrashLoopBackOff",
        message="exited with code 1:\nerror: creating server",
    )
    await h.until(lambda: h.row().status == "Failed")
    assert "creating server" in h.row().message
    h.runtime.set_all("triton_test", "Running")
    await h.until(lambda: h.row().status == "Running")
    assert h.reasons()[-2:] == ["Failed", "Running"]


async def test_stop_start_and_delete(running: tuple[Harness, Reconciler]) -> None:
    h, _ = running
    assert h.runtime is not None
    h.services.create(seed_spec())
    await h.until(lambda: h.row().status == "Waiting")
    h.services.set_stopped("local", "triton_test", True)
    await h.until(lambda: h.row().status == "Stopped")
    assert h.runtime.replicas["triton_test"] == []
    h.services.set_stopped("local", "triton_test", False)
    await h.until(lambda: h.row().status == "Waiting")
    h.runtime.deletes_pending = 2  # the runtime needs a few rounds to remove everything
    h.services.request_delete("local", "triton_test")
    await h.until(lambda: h.services.page(page=1, size=10)[1] == 0)
    assert "triton_test" not in h.runtime.replicas


async def test_resync_reconciles_only_what_drifted(harness: Harness) -> None:
    names = [f"s{i}" for i in range(10)]  # one orphan among 11: within the share deleted
    for name in names:
        harness.services.create(seed_spec(name=name, metadata={"instance": 1}))
    reconciler = harness.make_reconciler(lease_ttl=5.0, resync_seconds=0.1)
    task = asyncio.create_task(reconciler.run())
    await harness.until(lambda: reconciler.is_leader)
    runtime = harness.runtime
    assert runtime is not None
    await harness.until(lambda: all(harness.row(n).status == "Waiting" for n in names))
    for name in names:
        runtime.set_all(name, "Running")
    await harness.until(lambda: all(harness.row(n).status == "Running" for n in names))

    async def quiet_resyncs() -> bool:
        """Three resyncs in a row that did no per-service work and wrote nothing (the
        notifications' own reconciles may still be finishing at first)."""
        versions = {n: harness.row(n).version for n in names}
        runtime.applied.clear()
        runtime.observed.clear()
        seen = runtime.summaries
        await harness.until(lambda: runtime.summaries >= seen + 3)
        unchanged = {n: harness.row(n).version for n in names} == versions
        return (runtime.applied, runtime.observed) == ([], []) and unchanged

    for _ in range(20):
        if await quiet_resyncs():
            break
    else:
        raise AssertionError("every resync reconciled services that had not changed")

    runtime.replicas["s2"] = []  # lost behind the reconciler's back (no notification)
    runtime.replicas["ghost"] = [ReplicaStatus("ghost-0", "h", "Running")]  # an orphan
    await harness.until(lambda: "ghost" not in runtime.replicas and runtime.replicas["s2"])
    assert {d.service for d in runtime.applied} == {"s2"}
    assert set(runtime.observed) == {"s2"}
    await stop(task)


def ghost(runtime: FakeRuntime, name: str) -> None:
    """A service the runtime runs that no row asks for."""
    runtime.replicas[name] = [ReplicaStatus(f"{name}-0", "h", "Running")]


async def test_a_notification_alone_deletes_no_orphan(harness: Harness) -> None:
    """Only a resync judges orphans (test_resync_reconciles_only_what_drifted deletes one
    within the share); a watch event naming one deletes nothing."""
    for i in range(9):
        harness.services.create(seed_spec(name=f"s{i}", metadata={"instance": 1}))
    reconciler = harness.make_reconciler(lease_ttl=1.0, resync_seconds=3600)
    task = asyncio.create_task(reconciler.run())
    try:
        await harness.until(lambda: reconciler.is_leader)
        runtime = harness.runtime
        assert runtime is not None
        await harness.until(lambda: all(f"s{i}" in runtime.replicas for i in range(9)))
        ghost(runtime, "ghost")
        await reconciler.reconcile("ghost")
        assert "ghost" in runtime.replicas
        assert runtime.installation == harness.installation()
    finally:
        await stop(task)


async def test_an_empty_database_deletes_nothing_and_says_why(harness: Harness) -> None:
    """A control plane pointed at an empty (or wrong) database sees every service as an
    orphan: more than a resync may delete, so none is, and the operator is told once."""
    reconciler = harness.make_reconciler(lease_ttl=1.0, resync_seconds=0.05)
    task = asyncio.create_task(reconciler.run())
    try:
        await harness.until(lambda: reconciler.is_leader)
        runtime = harness.runtime
        assert runtime is not None
        for i in range(3):
            ghost(runtime, f"other{i}")
        seen = runtime.summaries
        await harness.until(lambda: runtime.summaries >= seen + 5)
        assert sorted(runtime.replicas) == ["other0", "other1", "other2"]
        [(reason, message)] = runtime.warnings  # once for the same set, not every resync
        assert reason == "OrphansKept"
        assert "3 of the 3 services" in message and "openeas gc --confirm" in message
    finally:
        await stop(task)


async def test_a_refused_claim_reconciles_nothing(harness: Harness) -> None:
    harness.services.create(seed_spec())
    reconciler = harness.make_reconciler(lease_ttl=0.3)
    refusal = "ConfigMap openeas-installation-openeas records installation x"

    def refusing(notify: Notify) -> FakeRuntime:
        harness.runtime = FakeRuntime(notify)
        harness.runtime.refuse = refusal
        return harness.runtime

    reconciler._runtime_factory = refusing
    task = asyncio.create_task(reconciler.run())
    try:
        await harness.until(lambda: reconciler.refused == refusal)
        await asyncio.sleep(0.5)  # more than a lease: it tried again, and still refused
        assert harness.runtime is not None and harness.runtime.closed
        assert harness.runtime.applied == [] and not reconciler.is_leader
        assert harness.row().status == "Creating"
    finally:
        await stop(task)


async def test_only_one_of_two_reconcilers_leads(harness: Harness) -> None:
    first = harness.make_reconciler(lease_ttl=0.6)
    second = harness.make_reconciler(lease_ttl=0.6)
    tasks = [asyncio.create_task(first.run()), asyncio.create_task(second.run())]
    await harness.until(lambda: first.is_leader or second.is_leader)
    # Through more than a lease's life, never both at once.
    for _ in range(40):
        assert not (first.is_leader and second.is_leader)
        await asyncio.sleep(0.02)
    await harness.until(lambda: first.is_leader != second.is_leader)
    leader, follower = (first, second) if first.is_leader else (second, first)
    harness.services.create(seed_spec())
    await harness.until(lambda: harness.row().status == "Waiting")
    assert follower.runtime is None
    # The leader goes away; the other takes over once the lease expires.
    tasks[0 if leader is first else 1].cancel()
    await harness.until(lambda: follower.is_leader, timeout=5)
    await stop(*tasks)


async def test_a_renewal_that_stalls_past_the_lease_is_no_lead(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A leader whose renewal does not come back before its lease ends (a slow database, a
    stalled thread) stops leading then, before another process could take the lease."""
    reconciler = harness.make_reconciler(lease_ttl=0.6)
    task = asyncio.create_task(reconciler.run())
    await harness.until(lambda: reconciler.is_leader)
    renew = reconciler.lease.acquire
    stalled = threading.Event()

    def stall() -> bool:
        stalled.set()
        time.sleep(1.5)
        return renew()

    monkeypatch.setattr(reconciler.lease, "acquire", stall)
    await harness.until(stalled.is_set)
    ends = reconciler.lease.held_until
    await harness.until(lambda: not reconciler.is_leader, timeout=5)
    assert time.monotonic() >= ends  # not before its lease ended
    await harness.until(lambda: reconciler.runtime is None, timeout=5)  # its work stopped
    assert time.monotonic() < ends + 1.0  # long before the stalled call returned
    await stop(task)


async def test_a_runtime_that_cannot_start_is_retried(harness: Harness) -> None:
    attempts: list[int] = []

    def factory(notify: Notify) -> FakeRuntime:
        attempts.append(1)
        if len(attempts) == 1:
            raise PermanentRuntimeError("KubernetesConfig", "no service account token")
        harness.runtime = FakeRuntime(notify)
        return harness.runtime

    reconciler = Reconciler(harness.sessions, factory, "local", lease_ttl=0.3)
    task = asyncio.create_task(reconciler.run())
    await harness.until(lambda: reconciler.is_leader)
    assert len(attempts) == 2
    await stop(task)


async def test_pull_progress_is_stored_without_touching_routes(
    running: tuple[Harness, Reconciler],
) -> None:
    h, _ = running
    h.services.create(seed_spec())
    await h.until(lambda: status(h)[0] == "Waiting")
    assert h.runtime is not None
    routes = route_feed.table(h.sessions, "local", 1000).version
    for done in (100, 600):
        h.runtime.set_all("triton_test", "Pending", progress=Progress("pulling", 0, 2, done, 1000))
        stored = lambda d=done: (h.row().replicas[0]["progress"] or {}).get("bytes_done") == d  # noqa: E731
        await h.until(stored)
    assert h.row().replicas[0]["progress"]["files_total"] == 2
    assert route_feed.table(h.sessions, "local", 1000).version == routes  # nothing to route
    assert h.reasons() == ["Created", "Waiting"]  # and no event per report
    h.runtime.set_all("triton_test", "Running")
    await h.until(lambda: status(h)[0] == "Running")
    assert h.row().replicas[0]["progress"] is None
    assert route_feed.table(h.sessions, "local", 1000).version > routes


async def test_the_poll_reads_pending_services_only_after_a_commit(harness: Harness) -> None:
    """The poll for other processes' changes reads the pending services on each tick only
    on PostgreSQL; on SQLite, only once something was committed since its last read."""
    reconciler = harness.make_reconciler(lease_ttl=60.0)  # no renewal commit meanwhile
    reads = 0
    needing_work = reconciler.store.needing_work

    def counted() -> list[str]:
        nonlocal reads
        reads += 1
        return needing_work()

    reconciler.store.needing_work = counted  # type: ignore[method-assign]
    task = asyncio.create_task(reconciler.run())
    try:
        await harness.until(lambda: reconciler.is_leader)
        await asyncio.sleep(0.3)
        settled = reads
        await asyncio.sleep(0.5)  # ten ticks
        if harness.sessions.kw["bind"].dialect.name == "sqlite":
            assert reads == settled
        else:
            assert reads >= settled + 5
        harness.services.create(seed_spec())
        await harness.until(lambda: status(harness) == ("Waiting", 1, 1, 0))
        assert reads > settled
    finally:
        await stop(task)


async def test_a_burst_of_creates_is_reconciled_in_batches(harness: Harness) -> None:
    """Services queued together are read and written together: a burst of 300 services at
    zero instances costs two status transactions, and each still gets its event and route."""
    names = [f"burst_{i:03d}" for i in range(300)]
    for name in names:
        harness.services.create(seed_spec(name=name, metadata={"instance": 0}))
    reconciler = harness.make_reconciler(lease_ttl=1.0, resync_seconds=3600)
    batches: list[int] = []
    write = reconciler.store.write_statuses

    def counted(writes: Sequence[StatusWrite]) -> set[str]:
        batches.append(len(writes))
        return write(writes)

    reconciler.store.write_statuses = counted  # type: ignore[method-assign]  # counts the batches
    task = asyncio.create_task(reconciler.run())
    try:
        await harness.until(
            lambda: all(harness.row(n).status == "Stopped" for n in names), timeout=30
        )
    finally:
        await stop(task)
    # two transactions; which comes first follows when the poll's read lands
    assert sorted(batches[:2]) == [300 - BATCH, BATCH]
    assert harness.reasons(names[-1]) == ["Created", "Stopped"]
    routes = route_feed.table(harness.sessions, "local", 1000).routes
    assert {r.service: r.status for r in routes} == dict.fromkeys(names, "Stopped")


async def test_a_status_write_for_a_changed_service_is_redone(harness: Harness) -> None:
    """A write for a generation no longer stored, for a deleted service, or racing an API
    write of the same row writes nothing and names the services to act on again."""
    store = ReconcileStore(harness.sessions, "local")
    for name in ("a", "b"):
        harness.services.create(seed_spec(name=name, metadata={"instance": 0}))
    with harness.sessions() as s:  # a create leaves its empty JSON columns SQL NULL
        empty = (ServiceRow.cron_scaler, ServiceRow.labels, ServiceRow.retired_instances)
        assert s.scalar(select(func.count()).where(or_(*(c.is_not(None) for c in empty)))) == 0
    states = store.states(["a", "b", "gone"])
    assert set(states) == {"a", "b"}
    stopped = Status("Stopped", "", "", 0, 0, 0)
    writes = [StatusWrite(state, stopped, []) for state, _ in states.values()]
    harness.services.scale("local", "a", 1)  # a new generation of "a"
    commits = changes.SERVICES.count
    assert store.write_statuses(writes) == {"a"}
    assert changes.SERVICES.count > commits  # describe's long-polls wake
    assert (harness.row("a").status, harness.row("b").status) == ("Creating", "Stopped")
    assert store.write_statuses(writes) == {"a"}  # "b" unchanged: nothing written
    version = harness.row("b").version
    assert harness.row("b").version == version

    # An API write lands between the batch's read and its update: nothing is written.
    again = store.states(["b"])["b"][0]
    harness.services.scale("local", "b", 1)
    harness.services.scale("local", "b", 0)
    fresh = store.states(["b"])["b"][0]
    running = Status("Waiting", "", "", 1, 1, 0)
    assert store.write_statuses([StatusWrite(again, running, [])]) == {"b"}
    assert store.write_statuses([StatusWrite(fresh, stopped, [])]) == set()
    assert harness.row("b").observed_generation == fresh.generation


async def test_the_resync_reads_only_rows_with_replicas_or_named_by_the_runtime(
    harness: Harness,
) -> None:
    """Services at zero that the runtime does not run cannot drift: the resync's query
    leaves them out, so its cost follows the services with replicas, not all of them."""
    store = ReconcileStore(harness.sessions, "local")
    harness.services.create(seed_spec(name="one", metadata={"instance": 1}))
    for name in ("zero", "zero_running", "zero_idle"):
        harness.services.create(seed_spec(name=name, metadata={"instance": 0}))
    everything = {s.name for s in store.summaries()}
    assert everything == {"one", "zero", "zero_running", "zero_idle"}
    scoped = {s.name for s in store.summaries(["zero_running", "ghost"])}
    assert scoped == {"one", "zero_running"}


class Recording(KeptRows):
    """Kept rows that remember the names each pass read."""

    def __init__(self) -> None:
        super().__init__()
        self.read: list[set[str]] = []

    def fold(self, version: int, changed: Any, removed: Any = ()) -> None:
        changed = list(changed)
        self.read.append({r.name for r in changed})
        super().fold(version, changed, removed)


async def test_the_resync_reads_only_rows_changed_since_its_last_pass(harness: Harness) -> None:
    """After a first pass, a pass reads only the rows stamped after the route version it
    last read (a row scaled, a status written): an unchanged row is never read again, one
    changed is, a deleted one is forgotten, and a change committed while a pass runs is
    read by that pass or the next."""
    store = ReconcileStore(harness.sessions, "local")
    engine = harness.sessions.kw["bind"]
    for name, instance in (("one", 1), ("two", 1), ("zero", 0)):
        harness.services.create(seed_spec(name=name, metadata={"instance": instance}))
    kept = Recording()
    names = {s.name for s in store.resync_rows(kept, [])}
    assert names == {"one", "two"} and kept.read == [{"one", "two"}]

    statements: list[str] = []

    def note(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        statements.append(statement)

    event.listen(engine, "before_cursor_execute", note)
    try:
        assert {s.name for s in store.resync_rows(kept, [])} == {"one", "two"}
    finally:
        event.remove(engine, "before_cursor_execute", note)
    assert kept.read[-1] == set()  # nothing changed: no service row read
    reads = [s for s in statements if "FROM services" in s]
    assert len(reads) == 1 and "route_version >" in reads[0]

    harness.services.scale("local", "zero", 2)  # a change after the watermark
    harness.services.request_delete("local", "two")
    ReconcileStore(harness.sessions, "local").forget("two")
    rows = {s.name: s for s in store.resync_rows(kept, ["ghost"])}
    assert kept.read[-1] == {"zero"}  # "one", unchanged, is not read again
    assert set(rows) == {"one"}  # "zero" asks for replicas the reconciler has not made yet
    state = store.states(["zero"])["zero"][0]
    store.write_statuses([StatusWrite(state, Status("Waiting", "", "", 2, 2, 0), [], "h1")])
    rows = {s.name: s for s in store.resync_rows(kept, [])}
    assert kept.read[-1] == {"zero"} and rows["zero"].replicas == 2

    # A change committed between a pass's read of the counter and its read of the rows.
    done: list[bool] = []

    def during(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        if "FROM counters" in statement and not done:
            done.append(True)
            harness.services.scale("local", "one", 3)

    event.listen(engine, "after_cursor_execute", during)
    try:
        store.resync_rows(kept, [])
        store.resync_rows(kept, [])
    finally:
        event.remove(engine, "after_cursor_execute", during)
    assert done
    assert "one" in set().union(*kept.read[-2:])
    with harness.sessions() as s:
        generation = s.scalar(select(ServiceRow.generation).where(ServiceRow.name == "one"))
    assert generation == 2
