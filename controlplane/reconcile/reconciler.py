"""The reconciler: drives every service from its spec to running replicas and writes
status back. Level-triggered and idempotent; one active instance per database (lease).

Work comes from changes — a new generation in the database (a cheap indexed poll, so
several control-plane processes can share one database), the runtime's ``notify`` — plus a
periodic resync. Temporary errors requeue with backoff; permanent ones set ``Failed`` and
wait for a new generation.

Nothing is touched until the runtime grants the database's installation id (``claim``):
a control plane on another installation's database reconciles nothing and says why. Only
the resync deletes orphans, and only within :func:`resync.orphans_deletable`'s share.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
import uuid
from collections.abc import Callable

from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker
from sqlalchemy.orm.exc import StaleDataError

from controlplane.elasticity.cron_loop import CronScaling
from controlplane.elasticity.scaling_loop import Autoscaling
from controlplane.metrics import ControlPlaneMetrics
from controlplane.model.kept_rows import KeptRows
from controlplane.model.states import ServiceState, Status
from controlplane.reconcile import resync
from controlplane.reconcile import status as status_mod
from controlplane.reconcile.desired import desired
from controlplane.runtime.base import (
    PermanentRuntimeError,
    Runtime,
    RuntimeError_,
    TemporaryRuntimeError,
)
from controlplane.store import changes, upkeep
from controlplane.store.lease import Lease
from controlplane.store.queries import ReconcileStore, StatusWrite

log = logging.getLogger(__name__)

LEASE_NAME = "reconciler"
MAX_BACKOFF = 60.0
BATCH = 256  # services reconciled per read and write transaction
QUIET_S = 0.5  # a burst of writes has ended after this long without one (the upkeep's cue)


def _temporary(error: Exception) -> bool:
    return isinstance(error, (TemporaryRuntimeError, StaleDataError, OSError, SQLAlchemyError))


def holder_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


class Reconciler:
    def __init__(
        self,
        sessions: sessionmaker[Session],
        runtime_factory: Callable[[Callable[[str], None]], Runtime],
        cluster: str,
        *,
        resync_seconds: float = 30.0,
        poll_seconds: float = 2.0,
        lease_ttl: float = 15.0,
        holder: str | None = None,
        autoscaling: Autoscaling | None = None,
        metrics: ControlPlaneMetrics | None = None,
        cron: CronScaling | None = None,
    ) -> None:
        self.metrics = metrics
        self.store = ReconcileStore(sessions, cluster)
        self._runtime_factory = runtime_factory
        self.cluster = cluster
        self.resync_seconds = resync_seconds
        self.poll_seconds = poll_seconds
        self.lease = Lease(sessions, LEASE_NAME, holder or holder_id(), lease_ttl)
        self.runtime: Runtime | None = None
        self._leading = False
        self._queue: asyncio.Queue[str] = asyncio.Queue()
        self._queued: set[str] = set()
        self._failures: dict[str, int] = {}
        self._inflight: set[str] = set()  # the batch being reconciled
        self._loop: asyncio.AbstractEventLoop | None = None
        # Orphans the last resync allowed to go, until they are gone.
        self._doomed: set[str] = set()
        self._kept: frozenset[str] = frozenset()  # orphans kept back, as last reported
        # Why this process may not reconcile (another installation's namespace), or None.
        self.refused: str | None = None
        self.autoscaling = autoscaling  # runs while this reconciler leads
        self.cron = cron  # so does the scheduled scaler

    # -- wake-ups ------------------------------------------------------------------------
    def notify(self, service: str) -> None:
        """Enqueue ``service``; safe to call from any thread (kubernetes watch)."""
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._enqueue, service)

    def _enqueue(self, service: str) -> None:
        if service not in self._queued:
            self._queued.add(service)
            self._queue.put_nowait(service)

    # -- main loop -----------------------------------------------------------------------
    async def run(self) -> None:
        """Wait for the lease, then reconcile until cancelled; stepping down on lease loss."""
        self._loop = asyncio.get_running_loop()
        try:
            while True:
                if await asyncio.to_thread(self.lease.acquire):
                    await self._lead()
                await asyncio.sleep(self.lease.retry_in())
        finally:
            if self._leading:
                await asyncio.to_thread(self.lease.release)

    async def _lead(self) -> None:
        try:
            # In a thread: a first import of the runtime and its client (about a second)
            # would stall this process's API just as it takes over from a dead leader.
            self.runtime = await asyncio.to_thread(self._runtime_factory, self.notify)
            installation = await asyncio.to_thread(self.store.installation)
            refused = await self.runtime.claim(installation)
        except RuntimeError_ as e:
            # No runtime (bad kubeconfig, no service account): say so and try again later
            # instead of leading with nothing to act through.
            log.error("reconciler: cannot start the runtime: %s", e)
            await self._step_aside()
            return
        if refused is not None:
            if refused != self.refused:
                log.error("reconciler: %s", refused)
            self.refused = refused
            await self._step_aside()
            return
        self.refused = None
        self._leading = True
        log.info("reconciler: leading as %s", self.lease.holder)
        tasks = [
            asyncio.create_task(self._work()),
            asyncio.create_task(self._poll_changes()),
            asyncio.create_task(self._resync()),
            asyncio.create_task(self._tidy()),
        ]
        if self.autoscaling is not None:
            tasks.append(asyncio.create_task(self.autoscaling.run(self.runtime)))
        if self.cron is not None:
            tasks.append(asyncio.create_task(self.cron.run()))
        try:
            while await self._renew():
                await asyncio.sleep(self.lease.ttl / 3)
            log.warning("reconciler: lease lost; stepping down")
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await self.runtime.close()
            self.runtime = None
            self._leading = False

    async def _step_aside(self) -> None:
        """Leave the lead to another process (or to a later try of this one)."""
        if self.runtime is not None:
            await self.runtime.close()
            self.runtime = None
        await asyncio.to_thread(self.lease.release)

    @property
    def is_leader(self) -> bool:
        """Leading, and the lease surely still ours: a renewal delayed past the lease's end
        (a stalled process, a slow database) is no lead, as another may have taken it."""
        return self._leading and self.lease.held()

    async def _renew(self) -> bool:
        """Renew the lease; False when lost, or when the renewal did not come back before
        the lease we hold ends (we step down before another process can take it)."""
        try:
            async with asyncio.timeout(max(0.0, self.lease.held_until - time.monotonic())):
                return await asyncio.to_thread(self.lease.acquire)
        except TimeoutError:
            return False

    async def _poll_changes(self) -> None:
        """Services with a new generation: at once when this process committed it (every
        such write is a routing change, which wakes us), within ``poll_seconds`` when
        another control-plane replica did. Reads the partial index of pending services,
        unless nothing was committed since the last read (the same names then)."""
        written = self.store.commits()
        spacing = changes.Spacing(changes.BURST_GAP_S)  # a burst of creates: one read per gap
        pending: list[str] = []
        while True:
            if written():
                await spacing.turn()
                pending = await asyncio.to_thread(self.store.needing_work)
            for name in pending:
                # Failed ones come back on their backoff timer; those being reconciled are
                # pending until their batch is written (a new generation meanwhile is
                # caught by the write, which requeues it).
                if name not in self._failures and name not in self._inflight:
                    self._enqueue(name)
            await changes.ROUTES.wait(self.poll_seconds)

    async def _resync(self) -> None:
        """A safety net under the runtime's notifications: one runtime listing and the rows
        it can concern (those with replicas, asked for or running, kept between passes and
        read again only when stamped since the last pass; and those the runtime names),
        then only the services that drifted (orphans included) are reconciled. The listing
        comes first: a row is made before its replicas, so a service created between the two
        is never taken for an orphan."""
        kept = KeptRows()  # read again whole when this process starts to lead
        while True:
            assert self.runtime is not None
            observed = await self.runtime.summary()
            stored = await asyncio.to_thread(self.store.resync_rows, kept, observed)
            await self._judge_orphans(resync.orphans(stored, observed), len(observed))
            for name in resync.drifted(stored, observed):
                self._enqueue(name)
            await asyncio.sleep(self.resync_seconds)

    async def _tidy(self) -> None:
        """After at least ``upkeep.MIN_WRITES`` service commits in this process, once they
        pause for ``QUIET_S``: the table's upkeep. Idle it waits; a lone write costs one
        timer."""
        commits = changes.SERVICES
        seen = commits.count
        while True:
            await commits.wait_past(commits.count, 3600)
            settled = -1
            while settled != commits.count:
                settled = commits.count
                await asyncio.sleep(QUIET_S)
            if commits.count - seen >= upkeep.MIN_WRITES:
                seen = commits.count
                try:
                    await asyncio.to_thread(self.store.tidy)
                except SQLAlchemyError as e:  # autovacuum still comes; so does the next burst
                    log.warning("reconciler: the services table's upkeep failed: %s", e)

    async def _judge_orphans(self, orphans: set[str], observed: int) -> None:
        """Let ``orphans`` be deleted, or keep them all and tell the operator (once per
        set) when they are more than a resync may delete."""
        assert self.runtime is not None
        if resync.orphans_deletable(len(orphans), observed):
            self._doomed = orphans
            self._kept = frozenset()
            return
        self._doomed = set()
        if self._kept != orphans:
            self._kept = frozenset(orphans)
            share = f"{len(orphans)} of the {observed} services running"
            message = (
                f"{share} have no row in the database; more than "
                f"{resync.MAX_ORPHAN_SHARE:.0%} at once looks like a wrong or emptied "
                "database, so none is deleted. If they are really unwanted, run "
                f"'openeas gc --confirm'. First few: {', '.join(sorted(orphans)[:10])}"
            )
            log.warning("reconciler: %s", message)
            await self.runtime.warn("OrphansKept", message)

    @property
    def queue_depth(self) -> int:
        """Services waiting for a reconcile (those on a backoff timer not counted)."""
        return self._queue.qsize()

    async def _work(self) -> None:
        """Take what is queued, up to ``BATCH`` services at once: one read and one write
        transaction per batch, so a burst of creates costs a few statements per batch."""
        while True:
            names = [await self._queue.get()]
            while len(names) < BATCH and not self._queue.empty():
                names.append(self._queue.get_nowait())
            self._queued.difference_update(names)
            self._inflight.update(names)
            started = time.monotonic()
            try:
                failed = await self.reconcile_many(names)
            except Exception as e:  # the batch's read or write: each is tried again
                if not isinstance(e, (StaleDataError, OSError, SQLAlchemyError)):
                    log.exception("reconciler: a batch of %d failed unexpectedly", len(names))
                failed = dict.fromkeys(names, e)
            finally:
                self._inflight.difference_update(names)
            each = (time.monotonic() - started) / len(names)  # a service's share of its batch
            for name in names:
                error = failed.get(name)
                if error is None:
                    self._failures.pop(name, None)
                else:
                    self._retry_later(name, error)
                if self.metrics is not None:
                    result = "ok" if error is None else "retry" if _temporary(error) else "error"
                    self.metrics.reconcile_duration.observe((result,), each)

    def _retry_later(self, name: str, error: Exception | None) -> None:
        attempt = self._failures.get(name, 0) + 1
        self._failures[name] = attempt
        delay = min(MAX_BACKOFF, 0.5 * 2 ** (attempt - 1))
        log.info("reconciler: %s requeued in %.1fs (%s)", name, delay, error)
        assert self._loop is not None
        self._loop.call_later(delay, self._enqueue, name)

    # -- services -----------------------------------------------------------------------
    async def reconcile(self, name: str) -> None:
        """Reconcile one service; raises what its reconcile raised."""
        failed = await self.reconcile_many([name])
        if name in failed:
            raise failed[name]

    async def reconcile_many(self, names: list[str]) -> dict[str, Exception]:
        """Act on each of ``names`` and store what was observed: one read of their rows, the
        runtime's calls one service at a time, one write of every status. Returns the
        services whose runtime calls failed, with why (the others are done)."""
        runtime = self.runtime
        assert runtime is not None
        found = await asyncio.to_thread(self.store.states, names)
        writes: list[StatusWrite] = []
        failed: dict[str, Exception] = {}
        for name in names:
            state, previous = found.get(name, (None, ""))
            try:
                write = await self._act(runtime, name, state, previous)
            except (TemporaryRuntimeError, OSError) as e:
                failed[name] = e
                continue
            except Exception as e:
                log.exception("reconciler: %s failed unexpectedly", name)
                failed[name] = e
                continue
            if write is not None:
                writes.append(write)
        for name in await asyncio.to_thread(self.store.write_statuses, writes):
            self._enqueue(name)  # changed meanwhile: act on the new generation
        return failed

    async def _act(
        self, runtime: Runtime, name: str, state: ServiceState | None, previous: str
    ) -> StatusWrite | None:
        """Drive one service's replicas; the status to store, if any."""
        if state is None:
            # An orphan: nothing stored wants it. Deleted only when the resync allowed it.
            if name in self._doomed and await runtime.delete(name):
                self._doomed.discard(name)
            if self.autoscaling is not None:
                self.autoscaling.forget(name)
            return None
        if self.autoscaling is not None:
            self.autoscaling.observe(state)
        if state.deleting:
            if await runtime.delete(name):
                await asyncio.to_thread(self.store.forget, name)
            return None
        want = desired(state)
        try:
            await runtime.apply(want)
        except PermanentRuntimeError as e:
            failed = Status("Failed", e.reason, e.message, want.replicas, want.replicas, 0)
            return StatusWrite(state, failed, [])
        seen = await runtime.observe(name)
        if self.autoscaling is not None:
            self.autoscaling.replicas(name, seen)
        computed = status_mod.compute(
            want, seen, deleting=False, previous=previous, wakeable=state.wakeable
        )
        replicas = [r.as_dict(current=r.template_hash == want.template_hash) for r in seen.replicas]
        return StatusWrite(state, computed, replicas, want.template_hash)
