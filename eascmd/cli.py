"""``eascmd``: the user's command line for services, shaped like Alibaba's EAS tool.

Every failure prints one clear message and exits non-zero; nothing prints a traceback.
"""

from __future__ import annotations

import argparse
import difflib
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from contract.configfile import ConfigFileError, ConfigSyntaxError, parse, repaired
from contract.configfile import read_config as _read
from contract.merge import merge_patch
from eascmd import completion, cronscale, groups, identities, mirror, render
from eascmd.live import LiveLine
from eascmd.profile import NoProfile, Profile, load, save

if TYPE_CHECKING:  # the HTTP client (urllib) costs ~50 ms to import: only API commands load it
    from eascmd.client import Client

TERMINAL_OK = "Running"
TERMINAL_BAD = "Failed"
ASLEEP = "ScaledToZero"  # as good as running: the first request wakes it


class CliError(Exception):
    pass


def read_config(file: str) -> dict[str, Any]:
    try:
        return _read(file)
    except ConfigFileError as e:
        raise CliError(f"eascmd: {e}") from e


def overrides(pairs: list[str]) -> dict[str, Any]:
    """``-Dmetadata.instance=2`` -> {"metadata": {"instance": 2}} (values parsed as JSON
    when they are JSON, else taken as strings)."""
    patch: dict[str, Any] = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        if not sep or not key:
            raise CliError(
                f"eascmd: -D{pair}: expected -Dkey.path=value, e.g. -Dmetadata.instance=2"
            )
        try:
            value: Any = json.loads(raw)
        except ValueError:
            value = raw
        for part in reversed(key.split(".")):
            value = {part: value}
        patch = merge_patch(patch, value)
    return patch


WATCH_S = 5.0  # one long-poll's wait: an answer at least this often keeps proxies content


class Watcher(Protocol):
    """What :func:`wait` needs of a client (:class:`eascmd.client.Client`)."""

    def service_path(self, name: str, action: str = "") -> str: ...

    def watch(
        self, path: str, after: str | None, wait: float
    ) -> tuple[dict[str, Any], str | None]: ...


def wait(client: Watcher, name: str, timeout: float, interval: float = 0.2) -> int:
    """Print status lines as the service changes until Running (0) or Failed (1); while
    replicas pull and load their models, keep one progress line up to date under them.
    Each read is a long-poll that answers when the service changes, so Running shows the
    moment it is stored; against a control plane that does not long-poll, every
    ``interval``."""
    live = LiveLine(sys.stdout, tty=sys.stdout.isatty())

    def say(line: str) -> None:
        live.clear()
        print(line, flush=True)

    say("[OK] Service is now deploying")
    synced = False
    last = ""
    deadline = time.monotonic() + timeout
    state: str | None = None
    while (left := deadline - time.monotonic()) > 0:
        svc, state = client.watch(client.service_path(name), state, min(left, WATCH_S))
        if not synced and svc["ObservedGeneration"] >= svc["Generation"]:
            say("[OK] Successfully synchronized resources")
            synced = True
        line = render.status_line(svc)
        if synced and line != last and svc["Status"] not in ("Creating", TERMINAL_BAD):
            say(line)
            last = line
        if synced and svc["Status"] == TERMINAL_OK:
            say("[OK] Service is running")
            return 0
        if synced and svc["Status"] == ASLEEP:
            say("[OK] Service is scaled to zero: the first request wakes it")
            return 0
        if svc["Status"] == TERMINAL_BAD:
            say(f"[FAILED] {svc['Reason']}: {svc['Message']}")
            return 1
        text, kind = render.progress(svc)
        if synced and text:
            live.show(f"[..] {text}", kind)
        if state is None:
            time.sleep(interval)
    say(f"[FAILED] service {name!r} was not running after {timeout:.0f}s: see 'eascmd desc {name}'")
    return 1


def _cmd_lint(args: argparse.Namespace) -> int:
    """The config file's diagnostics without a server; --fix writes the corrected file."""
    file = args.file
    try:
        text = Path(file).read_bytes().decode("utf-8-sig")  # bytes: keep \r\n as they are
    except (OSError, UnicodeDecodeError):
        read_config(file)  # raises the CliError that says why
        raise
    try:
        value = parse(text)
    except ConfigSyntaxError as e:
        if not (args.fix or args.in_place):
            print(e.render(file, text).replace("nothing was created or changed", "not changed"))
            print(f"[FAILED] run 'eascmd lint {file} --fix' to write the corrected file")
            return 1
        lines = len({p.line for p in e.problems})
        print(f"{file}: {len(e.problems)} problem(s) on {lines} line(s), fixed as follows:")
        return _fix(file, text, repaired(text, e), args.in_place)
    if not isinstance(value, dict):
        print(f"[FAILED] {file} must hold a JSON object {{...}}")
        return 1
    print(f"[OK] {file} is valid: 'eascmd create {file}'")
    return 0


def fixed_path(file: str) -> Path:
    """``triton.config`` -> ``triton.fixed.config``: beside it, still named for what it is."""
    path = Path(file)
    return path.with_name(f"{path.stem}.fixed{path.suffix}")


def _fix(file: str, text: str, fixed: str, in_place: bool) -> int:
    try:
        parse(fixed)
    except ConfigSyntaxError as e:
        print(f"[FAILED] some problems have no automatic fix:\n{e.render(file, fixed)}")
        return 1
    target = Path(file) if in_place else fixed_path(file)
    diff = difflib.unified_diff(
        text.splitlines(keepends=True), fixed.splitlines(keepends=True), file, str(target)
    )
    sys.stdout.writelines(diff)
    try:
        target.write_bytes(fixed.encode("utf-8"))
    except OSError as e:
        raise CliError(f"eascmd: cannot write {target}: {e.strerror}") from e
    print(f"[OK] wrote {target}: 'eascmd create {target}'")
    return 0


def _cmd_completion(args: argparse.Namespace) -> int:
    print(completion.script(parser(), args.shell), end="")
    return 0


def _cmd_config(args: argparse.Namespace) -> int:
    where = save(Profile(args.endpoint, args.key, args.region, args.access_key_id or ""))
    print(f"[OK] configuration saved to {where}")
    return 0


def _cmd_create(args: argparse.Namespace, client: Client) -> int:
    body = client.call("POST", "/api/v2/services", json=read_config(args.file))
    print(render.created(body), flush=True)
    return 0 if args.no_wait else wait(client, body["ServiceName"], args.timeout)


def _cmd_modify(args: argparse.Namespace, client: Client) -> int:
    patch = read_config(args.service_file) if args.service_file else {}
    patch = merge_patch(patch, overrides(args.define))
    if not patch:
        raise CliError("eascmd: nothing to change: give -s <file> and/or -Dkey=value")
    client.call("PUT", client.service_path(args.name), json=patch)
    print(f"[OK] Service {args.name} is updating")
    return 0 if args.no_wait else wait(client, args.name, args.timeout)


def _simple(method: str, action: str, done: str) -> Callable[[argparse.Namespace, Client], int]:
    def run(args: argparse.Namespace, client: Client) -> int:
        client.call(method, client.service_path(args.name, action))
        print(f"[OK] {done.format(name=args.name)}")
        return 0

    return run


def _cmd_start(args: argparse.Namespace, client: Client) -> int:
    client.call("PUT", client.service_path(args.name, "start"))
    print(f"[OK] Service {args.name} is starting")
    return wait(client, args.name, args.timeout) if args.wait else 0


def _cmd_desc(args: argparse.Namespace, client: Client) -> int:
    print(render.describe(client.call("GET", client.service_path(args.name))))
    return 0


def _cmd_list(args: argparse.Namespace, client: Client) -> int:
    params = {"pageNumber": args.page, "pageSize": args.page_size}
    params |= {k: v for k, v in (("name", args.filter), ("status", args.status)) if v}
    if args.label:
        # As EAS's SDK sends it (one parameter, so a signed query holds it once).
        params["Label"] = json.dumps(dict(_label(pair) for pair in args.label))
    print(render.service_list(client.call("GET", "/api/v2/services", params=params)))
    return 0


def _label(pair: str) -> tuple[str, str]:
    key, sep, value = pair.partition(":")
    if not sep or not key:
        raise CliError(f"eascmd: --label {pair}: expected KEY:VALUE, e.g. --label team:vision")
    return key, value


def _cmd_events(args: argparse.Namespace, client: Client) -> int:
    print(render.events(client.call("GET", client.service_path(args.name, "events"))))
    return 0


def _cmd_logs(args: argparse.Namespace, client: Client) -> int:
    params: dict[str, int | str] = {"tail": args.tail}
    if args.replica is not None:
        params["replica"] = args.replica
    if args.previous:
        params["previous"] = "true"
    path = client.service_path(args.name, "logs")
    if not args.follow:
        print(client.text(path, params=params), end="")
        return 0
    params["follow"] = "true"
    try:
        for text in client.stream(path, params):
            print(text, end="", flush=True)
    except KeyboardInterrupt:
        return 130
    return 0


def _cmd_metrics(args: argparse.Namespace, client: Client) -> int:
    path = client.service_path(args.name, "metrics")
    print(render.metrics(client.call("GET", path, params={"window": args.window})))
    return 0


def _cmd_token(args: argparse.Namespace, client: Client) -> int:
    method = "POST" if args.rotate else "GET"
    print(client.call(method, client.service_path(args.name, "token"))["Token"])
    return 0


def strategies(pairs: list[str]) -> list[dict[str, Any]]:
    """``["qps=100", "concurrency=4"]`` -> EAS ``scaleStrategies``."""
    out = []
    for pair in pairs:
        name, sep, raw = pair.partition("=")
        try:
            threshold = float(raw)
        except ValueError:
            threshold = None
        if not sep or not name or threshold is None:
            raise CliError(
                f"eascmd: --strategy {pair}: expected METRIC=THRESHOLD, e.g. --strategy qps=100 "
                "(metrics: qps, concurrency, cpu, queue_time_ms, queue[backlog])"
            )
        out.append(
            {
                "metricName": name,
                "threshold": int(threshold) if threshold.is_integer() else threshold,
            }
        )
    return out


def _cmd_autoscale(args: argparse.Namespace, client: Client) -> int:
    path = client.service_path(args.name, "autoscaler")
    if args.off:
        svc = client.call("DELETE", path)
        instance = render.config(svc)["metadata"]["instance"]
        print(f"[OK] Autoscaler of {args.name} removed; instances stay at {instance}")
        return 0
    defined = overrides(args.define)
    if defined and args.min is None and args.max is None and not args.strategy:
        # EAS's own form: -Dmin=1 -Dmax=3 -Dstrategies.qps=10 (the server reads it).
        stored = client.call("PUT", path, json=defined)
        print(f"[OK] Service {args.name} is autoscaled: {render.autoscaler(stored)}")
        return 0
    if args.min is None or args.max is None or not args.strategy:
        raise CliError(
            "eascmd: autoscale needs --min N --max N and at least one --strategy METRIC=THRESHOLD"
            f", or --off (e.g. eascmd autoscale {args.name} --min 1 --max 4 --strategy qps=100)"
        )
    behavior: dict[str, Any] = {
        "scaleUp": {"stabilizationWindowSeconds": args.scale_up_window},
        "scaleDown": {"stabilizationWindowSeconds": args.scale_down_window},
    }
    on_zero = {
        key: value
        for key, value in (
            ("scaleDownGracePeriodSeconds", args.scale_down_grace_period),
            ("scaleUpActivationReplicas", args.scale_up_activation_replicas),
        )
        if value is not None
    }
    if on_zero:
        behavior["onZero"] = on_zero
    body = {
        "min": args.min,
        "max": args.max,
        "scaleStrategies": strategies(args.strategy),
        "behavior": behavior,
    }
    stored = client.call("PUT", path, json=merge_patch(body, defined))
    print(f"[OK] Service {args.name} is autoscaled: {render.autoscaler(stored)}")
    return 0


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="eascmd",
        description="Manage OpenEAS services, as Alibaba's eascmd does for PAI-EAS.",
        epilog="The control plane and admin token come from ~/.eascmd/config (eascmd config, "
        "or written by openeas up), overridden by EAS_ENDPOINT, EAS_TOKEN and EAS_REGION. "
        'Tab completion: eval "$(eascmd completion)".',
    )
    sub = p.add_subparsers(dest="command", required=True, metavar="command")

    c = sub.add_parser(
        "config", help="save the control plane's endpoint and credential (admin token or AccessKey)"
    )
    c.add_argument(
        "-e", "--endpoint", required=True, help="control plane URL (overridden by EAS_ENDPOINT)"
    )
    c.add_argument(
        "-i",
        "--id",
        dest="access_key_id",
        help="AccessKeyId: requests are then signed with the pair, -k being its AccessKeySecret "
        "(default: none, -k is the admin token; overridden by EAS_ACCESS_KEY_ID)",
    )
    c.add_argument(
        "-k",
        "--key",
        required=True,
        help="admin token, or with -i the AccessKeySecret (overridden by EAS_TOKEN)",
    )
    c.add_argument(
        "-r",
        "--region",
        default="local",
        help="the control plane's OPENEAS_CLUSTER_ID (default local; overridden by EAS_REGION)",
    )

    c = sub.add_parser("create", help="create a service from a JSON config file")
    c.add_argument("file", help="the service's EAS JSON: name, processor, processor_params, ...")
    _wait_options(c)
    c.set_defaults(run=_cmd_create)

    c = sub.add_parser("modify", help="change a service: -s <file> and/or -Dkey=value")
    c.add_argument("name", help="service name")
    c.add_argument(
        "-s", dest="service_file", help="JSON file with the fields to change (default: none)"
    )
    c.add_argument(
        "-D",
        dest="define",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="set one field, e.g. -Dmetadata.instance=2 (repeatable)",
    )
    _wait_options(c)
    c.set_defaults(run=_cmd_modify)

    for name, help_text, run in (
        ("desc", "describe a service and its replicas (with pull progress)", _cmd_desc),
        ("events", "list a service's events", _cmd_events),
        (
            "stop",
            "stop a service (0 replicas)",
            _simple("PUT", "stop", "Service {name} is stopping"),
        ),
        ("delete", "delete a service", _simple("DELETE", "", "Service {name} is being deleted")),
    ):
        c = sub.add_parser(name, help=help_text)
        c.add_argument("name", help="service name")
        c.set_defaults(run=run)

    c = sub.add_parser("start", help="start a stopped service")
    c.add_argument("name", help="service name")
    _wait_options(c, wait_default=False)
    c.set_defaults(run=_cmd_start)

    c = sub.add_parser("logs", help="show a replica's output")
    c.add_argument("name", help="service name")
    c.add_argument("--replica", type=int, help="replica number as shown by desc (default newest)")
    c.add_argument("--tail", type=int, default=200, help="last N lines (default 200)")
    how = c.add_mutually_exclusive_group()
    how.add_argument(
        "-f", "--follow", action="store_true", help="then print what it writes, until Ctrl-C"
    )
    how.add_argument(
        "--previous",
        action="store_true",
        help="the output of its run before the last restart (why it crashed)",
    )
    c.set_defaults(run=_cmd_logs)

    c = sub.add_parser("metrics", help="requests/s, 5xx/s, p50/p99 latency and replicas per 10 s")
    c.add_argument("name", help="service name")
    c.add_argument("--window", type=int, default=300, help="seconds back, 10..3600 (default 300)")
    c.set_defaults(run=_cmd_metrics)

    c = sub.add_parser("token", help="show a service's token (--rotate for a new one)")
    c.add_argument("name", help="service name")
    c.add_argument(
        "--rotate", action="store_true", help="issue a new token; the old one stops working"
    )
    c.set_defaults(run=_cmd_token)

    c = sub.add_parser(
        "autoscale",
        help="let the load set a service's instance count (or --off)",
        description="Keep each metric per replica near its threshold, between --min and "
        "--max instances. Metrics: qps and concurrency (measured by the gateway), cpu (%%), "
        "queue_time_ms (Triton's queue time per request).",
    )
    c.add_argument("name", help="service name")
    c.add_argument("--min", type=int, help="fewest instances (no default: required unless --off)")
    c.add_argument("--max", type=int, help="most instances (no default: required unless --off)")
    c.add_argument(
        "--strategy",
        action="append",
        default=[],
        metavar="METRIC=THRESHOLD",
        help="e.g. qps=100 or concurrency=4; repeat for several (the largest count wins)",
    )
    c.add_argument(
        "--scale-up-window",
        type=int,
        default=0,
        metavar="S",
        help="seconds the load must stay high before instances are added (default 0)",
    )
    c.add_argument(
        "--scale-down-window",
        type=int,
        default=300,
        metavar="S",
        help="seconds the load must stay low before instances are removed (default 300)",
    )
    c.add_argument(
        "--scale-down-grace-period",
        type=int,
        metavar="S",
        help="with --min 0: seconds without a request before the service goes to zero "
        "(onZero.scaleDownGracePeriodSeconds; default 600)",
    )
    c.add_argument(
        "--scale-up-activation-replicas",
        type=int,
        metavar="N",
        help="with --min 0: instances a request at zero wakes "
        "(onZero.scaleUpActivationReplicas; default 1)",
    )
    c.add_argument(
        "-D",
        dest="define",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="EAS's form, e.g. -Dmin=1 -Dmax=3 -Dstrategies.qps=10 (repeatable; "
        "beside the flags above, it sets the field it names)",
    )
    c.add_argument("--off", action="store_true", help="remove the autoscaler")
    c.set_defaults(run=_cmd_autoscale)

    c = sub.add_parser("list", help="list services")
    c.add_argument("--filter", help="only names containing this text (default: all)")
    c.add_argument("--status", help="only services in this status, e.g. Running (default: all)")
    c.add_argument("--page", type=int, default=1, help="page number (default 1)")
    c.add_argument("--page-size", type=int, default=50, help="services per page (default 50)")
    c.add_argument(
        "--label",
        action="append",
        default=[],
        metavar="KEY:VALUE",
        help="only services with this label, e.g. team:vision (repeatable: all must match)",
    )
    c.set_defaults(run=_cmd_list)

    groups.add_parsers(sub)
    mirror.add_parsers(sub)
    identities.add_parsers(sub)
    cronscale.add_parsers(sub)

    c = sub.add_parser(
        "lint",
        help="check a config file without a server; --fix writes the corrected file",
        description="Report what keeps a config file from being valid JSON (curly quotes, "
        "an en dash for --, trailing commas) with line and column. Nothing is changed "
        "unless you ask: --fix writes <name>.fixed<.ext> beside it, --in-place the file "
        "itself; both print the diff.",
    )
    c.add_argument("file", help="the service's EAS JSON file")
    c.add_argument(
        "--fix", action="store_true", help="write the corrected JSON beside the file (default: off)"
    )
    c.add_argument(
        "--in-place", action="store_true", help="with the fix, overwrite the file itself"
    )
    c.set_defaults(local=_cmd_lint)

    c = sub.add_parser(
        "completion",
        help='print the shell completion script: eval "$(eascmd completion)"',
        description="Print a bash completion script for eascmd (zsh: run "
        "'autoload -U bashcompinit && bashcompinit' first).",
    )
    c.add_argument(
        "shell", nargs="?", default="bash", choices=["bash", "zsh"], help="(default bash)"
    )
    c.set_defaults(local=_cmd_completion)
    return p


def _wait_options(c: argparse.ArgumentParser, *, wait_default: bool = True) -> None:
    if wait_default:
        c.add_argument(
            "--no-wait",
            action="store_true",
            help="return at once (default: wait until Running, showing progress)",
        )
    else:
        c.add_argument(
            "--wait",
            action="store_true",
            help="wait until Running, showing progress (default: return at once)",
        )
    c.add_argument(
        "--timeout",
        type=float,
        default=900.0,
        help="seconds to wait for Running (default 900)",
    )


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.command == "config":
        return _cmd_config(args)
    if hasattr(args, "local"):  # needs no server, so no HTTP client either
        try:
            code: int = args.local(args)
        except CliError as e:
            print(str(e), file=sys.stderr)
            return 2
        return code
    from eascmd.client import ApiError, Client  # past --help and argument errors: see above

    try:
        code = args.run(args, Client(load()))
        return code
    except (CliError, NoProfile) as e:
        print(str(e), file=sys.stderr)
        return 2
    except ApiError as e:
        print(f"[FAILED] {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
