"""``openeas gateway [--host H] [--port P] [--grpc-port G] [--workers N]``: the gateway as its
own deployable (``--grpc-port`` opens the gRPC door beside the HTTP one, see
:mod:`gateway.grpc.server`).

Settings come from ``OPENEAS_*`` environment variables (:class:`GatewaySettings`); flags
override them. The route table is long-polled from ``OPENEAS_CONTROLPLANE_URL`` with
``OPENEAS_ADMIN_TOKEN``. With ``--workers N > 1`` the parent forks N worker processes
that share the port through ``SO_REUSEPORT`` (the kernel spreads connections); each keeps
its own route table and counters, and a scrape of ``/metrics`` on any of them shows the sum
over all (:mod:`gateway.workers`).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import multiprocessing
import os
import shutil
import signal
import sys
import tempfile
from collections.abc import Coroutine
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from gateway.app import start_gateway
from gateway.grpc.server import start_grpc
from gateway.route_source import ControlPlaneRouteSource
from gateway.settings import GatewaySettings
from gateway.workers import WorkerPeers
from startup.heap import freeze_startup_heap
from startup.helptext import settings_epilog

log = logging.getLogger("gateway")

_LOG_FORMAT = "%(asctime)s %(process)d %(name)s %(levelname)s %(message)s"


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="openeas gateway",
        description="Token-authenticated /api/predict/<service> proxy in front of Triton.",
        epilog=settings_epilog(GatewaySettings),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--host", help="address to bind (OPENEAS_GATEWAY_HOST, default 127.0.0.1)")
    p.add_argument("--port", type=int, help="port to bind (OPENEAS_GATEWAY_PORT, default 8080)")
    p.add_argument(
        "--grpc-port",
        type=int,
        help="port of the gRPC door for tritonclient.grpc (OPENEAS_GATEWAY_GRPC_PORT; "
        "default: no gRPC)",
    )
    p.add_argument(
        "--workers",
        type=int,
        help="processes sharing the port (OPENEAS_GATEWAY_WORKERS, default 1)",
    )
    p.add_argument(
        "--log-level",
        default="INFO",
        help="DEBUG, INFO, WARNING or ERROR (default INFO)",
    )
    return p


async def serve(
    settings: GatewaySettings, *, reuse_port: bool = False, peers: WorkerPeers | None = None
) -> None:
    """Run one gateway until SIGTERM/SIGINT."""
    source = ControlPlaneRouteSource(
        settings.controlplane_url,
        settings.control_plane_credential(),
        wait_s=settings.poll_wait_s,
        connect_timeout_s=settings.connect_timeout_s,
        backoff_max_s=settings.poll_backoff_max_s,
    )
    runner = await start_gateway(settings, source, reuse_port=reuse_port, peers=peers)
    door = None
    if settings.grpc_port is not None:
        try:
            door = await start_grpc(runner.gateway.grpc_door(), reuse_port=reuse_port)
        except BaseException:
            await runner.close(0)
            raise
    log.info(
        "gateway %d listening on %s%s, routes from %s",
        os.getpid(),
        runner.url,
        f" and gRPC {door.address}" if door is not None else "",
        settings.controlplane_url,
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        await stop.wait()
    finally:
        log.info("gateway %d stopping", os.getpid())
        grace = settings.shutdown_grace_s
        await asyncio.gather(runner.close(grace), *([door.close(grace)] if door else []))


def run(main: Coroutine[Any, Any, None]) -> None:
    """Run ``main`` on uvloop when it is installed (it roughly halves the event loop's
    share of the gateway's CPU per request), else on asyncio's default loop; with what the
    imports built frozen first (:mod:`startup.heap`)."""
    freeze_startup_heap()
    try:
        import uvloop
    except ImportError:
        asyncio.run(main)
    else:
        uvloop.run(main)


def _worker(settings: GatewaySettings, log_level: str, peers: WorkerPeers) -> None:
    logging.basicConfig(level=log_level, format=_LOG_FORMAT)
    with contextlib.suppress(KeyboardInterrupt):
        run(serve(settings, reuse_port=True, peers=peers))


def _supervise(settings: GatewaySettings, log_level: str) -> int:
    """Fork the workers and wait; forward SIGTERM/SIGINT; exit when all have."""
    # fork: the workers inherit the settings object as is (no pickling of the secret).
    ctx = multiprocessing.get_context("fork")
    sockets = Path(tempfile.mkdtemp(prefix="openeas-gateway-"))  # where workers find each other
    procs = [
        ctx.Process(
            target=_worker, args=(settings, log_level, WorkerPeers(sockets, i)), name=f"gateway-{i}"
        )
        for i in range(settings.workers)
    ]
    for proc in procs:
        proc.start()

    def forward(signum: int, _frame: object) -> None:
        for proc in procs:
            if proc.pid is not None and proc.is_alive():
                os.kill(proc.pid, signum)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    code = 0
    for proc in procs:
        proc.join()
        code = code or (proc.exitcode or 0)
    shutil.rmtree(sockets, ignore_errors=True)
    return code


def main(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    flags = {
        "host": args.host,
        "port": args.port,
        "grpc_port": args.grpc_port,
        "workers": args.workers,
    }
    try:
        settings = GatewaySettings(**{k: v for k, v in flags.items() if v is not None})
    except ValidationError as e:
        print(f"openeas gateway: invalid settings:\n{e}", file=sys.stderr)
        return 2
    logging.basicConfig(level=args.log_level.upper(), format=_LOG_FORMAT)
    if not settings.routes_token.get_secret_value():
        if settings.admin_token.get_secret_value():
            log.warning(
                "the gateway reads routes with the admin token: set OPENEAS_ROUTES_TOKEN (on "
                "both the control plane and the gateway) so it holds no admin credential"
            )
        else:
            log.warning("OPENEAS_ROUTES_TOKEN is empty: the control plane will refuse routes")
    if settings.workers > 1:
        if settings.port == 0 or settings.grpc_port == 0:
            print("openeas gateway: --workers > 1 needs fixed ports", file=sys.stderr)
            return 2
        return _supervise(settings, args.log_level.upper())
    with contextlib.suppress(KeyboardInterrupt):
        run(serve(settings))
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main(sys.argv[1:]))
