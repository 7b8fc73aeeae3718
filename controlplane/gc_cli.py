"""``openeas gc``: delete orphans, the replicas this installation runs that no service row
asks for, beyond the share one resync deletes on its own (:mod:`controlplane.reconcile.resync`).

Without ``--confirm`` it only lists them. It acts, like the reconciler, only for the
installation the serving namespace records for this database, and only on objects that
carry its identity: another installation's objects are never listed.
"""

from __future__ import annotations

import argparse
import asyncio
import time

from controlplane.reconcile import resync
from controlplane.runtime import make_runtime
from controlplane.runtime.base import Runtime, RuntimeError_
from controlplane.settings import Settings
from controlplane.store.db import make_engine, make_sessions
from controlplane.store.queries import ReconcileStore

DELETE_TIMEOUT_SECONDS = 300.0


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="openeas gc",
        description="List (or, with --confirm, delete) the replicas of services that have "
        "no row in this control plane's database.",
    )
    parser.add_argument("--confirm", action="store_true", help="delete them")
    args = parser.parse_args(argv)
    try:
        return asyncio.run(_gc(Settings(), confirm=args.confirm))
    except RuntimeError_ as e:
        print(f"openeas gc: {e}")
        return 1


async def _gc(settings: Settings, *, confirm: bool) -> int:
    engine = make_engine(settings.sqlalchemy_url)
    store = ReconcileStore(make_sessions(engine), settings.cluster_id)
    runtime = make_runtime(settings, lambda _service: None)
    try:
        refused = await runtime.claim(await asyncio.to_thread(store.installation))
        if refused is not None:
            print(f"openeas gc: {refused}")
            return 1
        observed = await runtime.summary()
        orphans = sorted(resync.orphans(await asyncio.to_thread(store.summaries), observed))
        if not orphans:
            print(f"openeas gc: no orphans among {len(observed)} services")
            return 0
        print(f"openeas gc: {len(orphans)} orphan(s) of {len(observed)} services:")
        for name in orphans:
            print(f"  {name}")
        if not confirm:
            print("openeas gc: nothing deleted; run 'openeas gc --confirm' to delete them")
            return 0
        left = await _delete(runtime, orphans)
        if left:
            print(f"openeas gc: still going after {DELETE_TIMEOUT_SECONDS:.0f} s: {left}")
            return 1
        print(f"openeas gc: deleted {len(orphans)} orphan(s)")
        return 0
    finally:
        await runtime.close()
        engine.dispose()


async def _delete(runtime: Runtime, names: list[str]) -> list[str]:
    """Delete every name, waiting until each is gone; those still there at the deadline."""
    left = list(names)
    deadline = time.monotonic() + DELETE_TIMEOUT_SECONDS
    while left and time.monotonic() < deadline:
        left = [name for name in left if not await runtime.delete(name)]
        if left:
            await asyncio.sleep(1.0)
    return left
