"""``eascmd group …`` and ``eascmd release``: service groups (one endpoint, weighted
traffic, canary and blue-green), in the shapes of Alibaba's tool."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from eascmd import render

if TYPE_CHECKING:
    from eascmd.client import Client


def _path(client: Client, group: str = "", action: str = "") -> str:
    path = "/api/v2/groups" + (f"/{client.profile.region}/{group}" if group else "")
    return path + (f"/{action}" if action else "")


def _list(args: argparse.Namespace, client: Client) -> int:
    print(render.group_list(client.call("GET", _path(client))))
    return 0


def _desc(args: argparse.Namespace, client: Client) -> int:
    print(render.group_describe(client.call("GET", _path(client, args.group))))
    return 0


def _mode(args: argparse.Namespace, client: Client) -> int:
    body = client.call("PUT", _path(client, args.group), json={"TrafficMode": args.mode})
    print(f"[OK] Group {args.group} splits traffic by {_MODES[body['TrafficMode']]}")
    return 0


def _token(args: argparse.Namespace, client: Client) -> int:
    method = "POST" if args.rotate else "GET"
    print(client.call(method, _path(client, args.group, "token"))["Token"])
    return 0


def _release(args: argparse.Namespace, client: Client) -> int:
    body: dict[str, Any] = {}
    if args.weight is not None:
        body["Weight"] = args.weight
    if args.state is not None:
        body["TrafficState"] = args.state
    svc = client.call("PUT", client.service_path(args.name, "release"), json=body)
    metadata = render.config(svc)["metadata"]
    state = metadata.get("traffic_state", "standalone")
    print(f"[OK] Service {args.name}: {state}, weight {metadata.get('weight', 100)}")
    return 0


_MODES = {"auto": "members' running instances", "customized": "members' weights"}


def add_parsers(sub: Any) -> None:
    """The ``group`` and ``release`` commands, on eascmd's subparsers."""
    g = sub.add_parser("group", help="service groups: list, desc, mode, token")
    groups = g.add_subparsers(dest="group_command", required=True, metavar="command")
    c = groups.add_parser("list", help="list groups with their members")
    c.set_defaults(run=_list)
    c = groups.add_parser("desc", help="a group's members, weights, shares and endpoint")
    c.add_argument("group", help="group name")
    c.set_defaults(run=_desc)
    c = groups.add_parser("mode", help="how the group splits traffic")
    c.add_argument("group", help="group name")
    c.add_argument(
        "mode",
        choices=sorted(_MODES),
        help="auto: by running instances; customized: by weights (default of a new group)",
    )
    c.set_defaults(run=_mode)
    c = groups.add_parser("token", help="show the group token (--rotate for a new one)")
    c.add_argument("group", help="group name")
    c.add_argument("--rotate", action="store_true", help="issue a new group token")
    c.set_defaults(run=_token)

    c = sub.add_parser(
        "release",
        help="set a group member's weight and traffic state (rolls no replica)",
        description="EAS's ReleaseService: a member takes group traffic when 'grouping', "
        "by its weight in a 'customized' group; 'standalone' members only answer on their "
        "own endpoint. Each option is optional; the other is kept.",
    )
    c.add_argument("name", help="service name")
    c.add_argument("--weight", type=int, help="0..1000 (default: keep; a new member has 100)")
    c.add_argument(
        "--state",
        choices=["grouping", "standalone"],
        help="take group traffic or not (default: keep; a new member is standalone)",
    )
    c.set_defaults(run=_release)
