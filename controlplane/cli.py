"""``openeas migrate`` and ``openeas controlplane``: the operator's entry points of the
control plane (``openeas up`` composes the same pieces with the gateway and local runtime)."""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
from collections.abc import Callable, Coroutine
from typing import Any

from controlplane.settings import Settings, ensure_admin_token
from controlplane.store import migrate
from controlplane.store.db import make_engine
from startup.heap import freeze_startup_heap
from startup.helptext import settings_epilog


def _parser(prog: str, description: str | None) -> argparse.ArgumentParser:
    """A parser whose help ends with the settings' variables (OPENEAS_*) and defaults."""
    return argparse.ArgumentParser(
        prog=prog,
        description=description,
        epilog=settings_epilog(Settings),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )


def migrate_main(argv: list[str]) -> int:
    parser = _parser(
        "openeas migrate",
        "Upgrade (or step back) the database schema; servers refuse an out-of-date one.",
    )
    parser.add_argument(
        "--to",
        default="head",
        help="revision to reach: head, base or a revision id (default head)",
    )
    parser.add_argument(
        "--reseal",
        action="store_true",
        help="re-seal every stored token under the first OPENEAS_SECRET_KEY (after putting a "
        "new key first; default: only seal tokens still stored in clear)",
    )
    args = parser.parse_args(argv)
    settings = Settings()
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    url = settings.sqlalchemy_url
    if args.to == "head":
        sealed = upgrade(settings, reseal=args.reseal)
        if sealed:
            print(f"openeas: sealed {sealed} stored token(s)")
    else:
        with migrate.exclusive(url):
            engine = make_engine(url)
            at_head = not migrate.pending(engine)
            engine.dispose()
            # "--to <rev>" goes down from head, or up when the database is behind it.
            step = migrate.downgrade if at_head or args.to == "base" else migrate.upgrade
            step(url, args.to)
    print(f"openeas: database at revision {args.to}")
    return 0


def upgrade(settings: Settings, *, reseal: bool = False) -> int:
    """Bring the schema to head, then seal any token still stored in clear (all of them
    under the first key with ``reseal``); how many tokens were (re)sealed."""
    from controlplane.store import queries, sealing
    from controlplane.store.db import make_sessions

    with migrate.exclusive(settings.sqlalchemy_url):
        migrate.upgrade(settings.sqlalchemy_url)
        engine = make_engine(settings.sqlalchemy_url)
        try:
            sealer = sealing.from_settings(settings.secret_key, settings.data_dir)
            return queries.seal_tokens(make_sessions(engine), sealer, reseal=reseal)
        finally:
            engine.dispose()


def announce_admin_token(settings: Settings, created: bool) -> None:
    """Print a freshly generated admin token once; afterwards only its file is named."""
    path = settings.data_dir / "admin_token"
    if created:
        print(f"openeas: admin token (shown once, stored in {path}): {settings.admin_token}")
    elif not Settings().admin_token:
        print(f"openeas: admin token in {path}")


def controlplane_main(argv: list[str]) -> int:
    parser = _parser(
        "openeas controlplane",
        "Serve the control plane's REST API and run the reconciler that turns stored\n"
        "services into replicas (one leader per database).",
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8080, help="port to bind (default 8080)")
    parser.add_argument(
        "--migrate",
        action="store_true",
        help="upgrade the database schema before serving (default: refuse an old schema; "
        "see 'openeas migrate')",
    )
    parser.add_argument(
        "--no-reconcile",
        action="store_true",
        help="serve the API only, another process reconciles (default: reconcile here)",
    )
    args = parser.parse_args(argv)

    from controlplane.server import ControlPlane, SchemaOutOfDate, bind

    settings, created = ensure_admin_token(Settings())
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    if args.migrate:
        upgrade(settings)
    try:
        plane = ControlPlane(settings, reconcile=not args.no_reconcile)
    except SchemaOutOfDate as e:
        print(f"openeas: {e}", file=sys.stderr)
        return 2
    announce_admin_token(settings, created)
    print(f"openeas: control plane on http://{args.host}:{args.port}", flush=True)
    freeze_startup_heap()
    return run_until_signal(plane.serve(bind(args.host, args.port)), plane.stop)


def run_until_signal(
    main: Coroutine[Any, Any, None],
    stop: Callable[[], None],
    run: Callable[[Coroutine[Any, Any, None]], None] = asyncio.run,
) -> int:
    """Run ``main`` with ``run`` (an event loop runner); SIGINT/SIGTERM call ``stop`` so it
    can shut down cleanly."""

    async def runner() -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop)
        await main

    run(runner())
    return 0
