"""``eascmd accesskey create|list|delete`` (AccessKey pairs with roles) and ``eascmd audit``
(the trail of writes and refusals). Both need an admin credential."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from eascmd import render

if TYPE_CHECKING:
    from eascmd.client import Client

KEYS = "/api/v2/accesskeys"


def _create(args: argparse.Namespace, client: Client) -> int:
    body: dict[str, Any] = {"Role": args.role, "Description": args.description or ""}
    if args.services:
        body["Services"] = args.services
    made = client.call("POST", KEYS, json=body)
    print(render.table([
        ("AccessKeyId", made["AccessKeyId"]),
        ("AccessKeySecret", made["AccessKeySecret"]),
        ("Role", made["Role"]),
        ("Services", ", ".join(made["Services"] or ["*"])),
    ]))  # fmt: skip
    print("[OK] The secret is shown this once: eascmd config -e <endpoint> -i <id> -k <secret>")
    return 0


def _list(args: argparse.Namespace, client: Client) -> int:
    keys = client.call("GET", KEYS)["AccessKeys"]
    rows = [
        (k["AccessKeyId"], k["Role"], ", ".join(k["Services"] or ["*"]), k["CreateTime"],
         k["Description"])
        for k in keys
    ]  # fmt: skip
    print(render.table(rows, ("AccessKeyId", "Role", "Services", "CreateTime", "Description")))
    return 0


def _delete(args: argparse.Namespace, client: Client) -> int:
    client.call("DELETE", f"{KEYS}/{args.access_key_id}")
    print(f"[OK] AccessKey {args.access_key_id} is revoked")
    return 0


def _audit(args: argparse.Namespace, client: Client) -> int:
    params = {"limit": args.limit}
    params |= {k: v for k, v in (("since", args.since), ("principal", args.principal),
                                 ("service", args.service)) if v}  # fmt: skip
    entries = client.call("GET", "/api/v2/audit", params=params)["Entries"]
    rows = [
        (e["Time"], e["Principal"], e["Action"], e["Resource"], str(e["Status"]), e["SourceIp"],
         e["RequestId"])
        for e in entries
    ]  # fmt: skip
    header = ("Time", "Principal", "Action", "Resource", "Status", "SourceIp", "RequestId")
    print(render.table(rows, header))
    return 0


def add_parsers(sub: Any) -> None:
    """The ``accesskey`` and ``audit`` commands, on eascmd's subparsers."""
    a = sub.add_parser("accesskey", help="AccessKey pairs with roles: create, list, delete")
    verbs = a.add_subparsers(dest="verb", required=True, metavar="verb")
    c = verbs.add_parser(
        "create",
        help="a new pair; its secret is printed once",
        description="admin: everything, AccessKeys included. developer: create, change and "
        "delete the services and groups its --services globs match. viewer: read them only.",
    )
    c.add_argument(
        "--role", required=True, choices=["admin", "developer", "viewer"], help="what it may do"
    )
    c.add_argument(
        "--services",
        action="append",
        metavar="GLOB",
        help="service and group names it covers, e.g. 'team-a-*'; repeat for several "
        "(default: all)",
    )
    c.add_argument("--description", help="what the key is for (default: none)")
    c.set_defaults(run=_create)
    c = verbs.add_parser("list", help="every AccessKey, without secrets")
    c.set_defaults(run=_list)
    c = verbs.add_parser("delete", help="revoke a key: refused everywhere within a second")
    c.add_argument("access_key_id", help="the AccessKeyId")
    c.set_defaults(run=_delete)

    c = sub.add_parser("audit", help="who wrote what, and which requests were refused")
    c.add_argument("--since", help="from this time, ISO 8601 or Unix seconds (default: any)")
    c.add_argument("--principal", help="only this AccessKeyId, or admin-token (default: all)")
    c.add_argument("--service", help="only entries on this service or group (default: all)")
    c.add_argument("--limit", type=int, default=100, help="newest N entries (default 100)")
    c.set_defaults(run=_audit)
