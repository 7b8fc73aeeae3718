"""``openeas up``: the whole platform in one process on embedded defaults — control plane
(SQLite in the data dir, local runtime), gateway and console on one port, and a Redis child
process for async services' queues unless ``OPENEAS_REDIS_URL`` names one
(:mod:`openeas.embedded_redis`).

The gateway owns the public port; its ``/metrics`` serves the gateway's series and then the
control plane's. Everything that is not a predict call, metrics or its own health is
forwarded to the control plane on an internal loopback port. Ctrl-C / SIGTERM stops every
replica; the next ``openeas up`` brings services back to their specs.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import secrets

from pydantic import SecretStr

from controlplane import cli as controlplane_cli
from controlplane.cli import announce_admin_token, run_until_signal
from controlplane.server import ControlPlane, bind
from controlplane.settings import Settings, ensure_admin_token
from eascmd import profile
from gateway import cli as gateway_cli
from gateway.app import start_gateway
from gateway.grpc.server import start_grpc
from gateway.route_source import ControlPlaneRouteSource
from gateway.settings import GatewaySettings
from openeas.embedded_redis import EmbeddedRedis

# Triton's own gRPC port number: what tritonclient.grpc users reach for first.
DEFAULT_GRPC_PORT = 8001


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="openeas up", description=__doc__)
    parser.add_argument(
        "--host", default="127.0.0.1", help="address of the public port (default 127.0.0.1)"
    )
    parser.add_argument(
        "--port",
        type=int,
        default=8080,
        help="the public port: API, gateway, console (default 8080)",
    )
    parser.add_argument(
        "--grpc-port",
        type=int,
        help="the gateway's gRPC port for tritonclient.grpc (OPENEAS_GATEWAY_GRPC_PORT, "
        f"default {DEFAULT_GRPC_PORT}; 0 picks a free one)",
    )
    parser.add_argument(
        "--no-profile",
        action="store_true",
        help="do not write ~/.eascmd/config (default: write it, so eascmd just works)",
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")

    settings, created = ensure_admin_token(Settings())
    if not settings.routes_token:  # the gateway gets a credential that reads routes only
        settings = settings.model_copy(update={"routes_token": secrets.token_urlsafe(32)})
    public = f"http://{args.host}:{args.port}"
    settings = settings.model_copy(update={"public_url": settings.public_url or public})
    controlplane_cli.upgrade(settings)
    # Async services' queues: the configured Redis, else one of our own in the data dir.
    embedded = None if settings.redis_url else EmbeddedRedis(settings.data_dir)
    if embedded is not None:
        settings = settings.model_copy(update={"redis_url": embedded.start()})
        print(f"openeas: embedded Redis for async services on {embedded.url}", flush=True)
    try:
        return _run(args, settings, created, public)
    finally:
        if embedded is not None:
            embedded.stop()  # also when the platform failed to start


def _run(args: argparse.Namespace, settings: Settings, created: bool, public: str) -> int:
    plane = ControlPlane(settings)
    public_sock = bind(args.host, args.port)  # fail early, before anything starts
    internal_sock = bind("127.0.0.1", 0)
    internal = f"http://127.0.0.1:{internal_sock.getsockname()[1]}"
    stopping = asyncio.Event()

    async def serve() -> None:
        gateway_settings = GatewaySettings(
            controlplane_url=internal,
            routes_token=SecretStr(settings.routes_token),
            default_timeout_ms=settings.default_timeout_ms,
            redis_url=settings.redis_url,
        )
        if args.grpc_port is not None or gateway_settings.grpc_port is None:
            grpc_port = DEFAULT_GRPC_PORT if args.grpc_port is None else args.grpc_port
            gateway_settings = gateway_settings.model_copy(update={"grpc_port": grpc_port})
        source = ControlPlaneRouteSource(internal, settings.routes_token)
        serving = asyncio.create_task(plane.serve(internal_sock))
        gateway = await start_gateway(
            gateway_settings,
            source,
            sock=public_sock,
            fallback_upstream=internal,
            more_metrics=plane.metrics.render,  # one scrape: gateway and control plane
        )
        try:
            door = await start_grpc(gateway.gateway.grpc_door(), host=args.host)
        except BaseException as e:
            await gateway.close(0)
            plane.stop()
            await serving
            if isinstance(e, OSError):
                fix = "pass --grpc-port with a free port (0 picks one)"
                raise SystemExit(f"openeas up: {e}; {fix}") from e
            raise
        announce_admin_token(settings, created)
        if not args.no_profile:
            where = profile.save(profile.Profile(public, settings.admin_token, settings.cluster_id))
            print(f"openeas: eascmd profile written to {where}")
        print(f"openeas: up on {public} (console at {public}/, Ctrl-C stops)")
        print(f"openeas: gRPC (tritonclient.grpc) on {door.address}", flush=True)
        await asyncio.wait(
            [serving, asyncio.create_task(stopping.wait())], return_when=asyncio.FIRST_COMPLETED
        )
        await asyncio.gather(door.close(), gateway.close())
        plane.stop()
        await serving
        print("openeas: stopped", flush=True)

    return run_until_signal(serve(), stopping.set, run=gateway_cli.run)  # uvloop if present
