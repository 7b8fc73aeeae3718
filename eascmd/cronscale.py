"""``eascmd cronscale``: a service's scheduled scaling (EAS's CronHPA). ``-s cronscale.json``
sets it (EAS's file: ``ScaleJobs`` and ``ExcludeDates``), ``--off`` removes it, neither
shows it with each job's last run."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

from contract.configfile import ConfigFileError, read_config
from eascmd import render

if TYPE_CHECKING:
    from eascmd.client import Client


def jobs_table(cron: dict[str, Any]) -> str:
    rows = [
        (
            j["Name"],
            j["Schedule"],
            str(j["TargetSize"]),
            j.get("TimeZone", "UTC"),
            j.get("State", "-"),
            j.get("LastProbeTime") or "-",
        )
        for j in cron["ScaleJobs"]
    ]
    out = render.table(rows, ("Name", "Schedule", "TargetSize", "TimeZone", "State", "LastRun"))
    excluded = ", ".join(cron.get("ExcludeDates") or []) or "-"
    return f"{out}\nExcludeDates: {excluded}"


def _cronscale(args: argparse.Namespace, client: Client) -> int:
    name = args.name.rsplit("/", 1)[-1]  # EAS's "<region>/<service>" works too
    path = client.service_path(name, "cronscaler")
    if args.off and args.service_file:
        print("eascmd: cronscale takes -s <file> or --off, not both", file=sys.stderr)
        return 2
    if args.off:
        client.call("DELETE", path)
        print(f"[OK] Scheduled scaling of {name} removed; instances stay where they are")
        return 0
    if args.service_file:
        try:
            body = read_config(args.service_file)
        except ConfigFileError as e:
            print(f"eascmd: {e}", file=sys.stderr)
            return 2
        stored = client.call("PUT", path, json=body)
        print(f"[OK] Service {name} scales on schedule: {len(stored['ScaleJobs'])} job(s)")
    print(jobs_table(client.call("GET", path)))
    return 0


def add_parsers(sub: Any) -> None:
    """The ``cronscale`` command, on eascmd's subparsers."""
    c = sub.add_parser(
        "cronscale",
        help="scale a service on a schedule (show, set with -s, remove with --off)",
        description="Scheduled scaling, EAS's CronHPA. The file holds ScaleJobs "
        '[{"Name", "Schedule", "TargetSize", "TimeZone"}] and ExcludeDates: Schedule and '
        'ExcludeDates are 6-field cron expressions, seconds first ("0 0 8 * * 1-5": 08:00 '
        "on weekdays), read in the job's TimeZone (IANA name, default UTC). At its time a "
        "job sets the instance count to TargetSize; beside an autoscaler it sets the "
        "autoscaler's min instead (and its max when below). Without -s or --off, shows the "
        "jobs and their last runs.",
    )
    c.add_argument("name", help="service name (or <region>/<service>, as EAS's eascmd)")
    c.add_argument(
        "-s",
        dest="service_file",
        help="JSON file with ScaleJobs and ExcludeDates; replaces what is set (default: show only)",
    )
    c.add_argument("--off", action="store_true", help="remove scheduled scaling (default: off)")
    c.set_defaults(run=_cronscale)
