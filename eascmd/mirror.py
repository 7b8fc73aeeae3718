"""``eascmd mirror``: copy a share of a service's traffic to other services and compare their
answers with its own (the gateway counts matches per target; the caller never sees them)."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

from eascmd import render

if TYPE_CHECKING:
    from eascmd.client import Client


def _mirror(args: argparse.Namespace, client: Client) -> int:
    if args.off:
        body: dict[str, Any] = {"Ratio": 0}
    else:
        if args.ratio is None or not args.target:
            print("eascmd mirror: give --ratio N and --target SERVICE, or --off", file=sys.stderr)
            return 2
        body = {"Ratio": args.ratio, "Target": args.target}
        if args.tolerance is not None:
            body["Tolerance"] = args.tolerance
    svc = client.call("PUT", client.service_path(args.name, "mirror"), json=body)
    mirror = render.config(svc)["metadata"].get("mirror")
    print(f"[OK] Service {args.name} mirror: {render.mirror_summary(mirror)}")
    return 0


def add_parsers(sub: Any) -> None:
    """The ``mirror`` command, on eascmd's subparsers."""
    c = sub.add_parser(
        "mirror",
        help="copy a share of a service's requests to other services and compare answers",
        description="Send --ratio percent of the service's requests also to each --target "
        "service, after the caller got this service's answer, and compare the answers: "
        "byte-equal, or with --tolerance Triton's output tensors within that absolute "
        "difference. The gateway exports openeas_gateway_mirror_requests_total{result=match|"
        "mismatch|error|skipped} and the shadows' latency per target. Rolls no replica.",
    )
    c.add_argument("name", help="service name (the primary)")
    c.add_argument(
        "--ratio",
        type=int,
        help="percent of its requests to copy, 1..100 (no default: required unless --off)",
    )
    c.add_argument(
        "--target",
        action="append",
        metavar="SERVICE",
        help="a service to copy them to, repeat for several, up to 8 (no default: required "
        "unless --off)",
    )
    c.add_argument(
        "--tolerance",
        type=float,
        help="compare output tensors within this absolute difference (default: byte-equal)",
    )
    c.add_argument("--off", action="store_true", help="stop mirroring (default: off)")
    c.set_defaults(run=_mirror)
