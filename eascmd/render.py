"""Text output of ``eascmd``, in the shape of Alibaba's tool (tables, ``[OK]`` lines). Pure."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from contract.progress import describe as describe_progress


def table(rows: Sequence[Sequence[str]], header: Sequence[str] | None = None) -> str:
    cells = [list(map(str, r)) for r in ([header] if header else []) + list(rows)]
    widths = [max(len(r[i]) for r in cells) for i in range(len(cells[0]))]
    rule = "+" + "+".join("-" * (w + 2) for w in widths) + "+"
    lines = [rule]
    for n, row in enumerate(cells):
        lines.append("| " + " | ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) + " |")
        if header and n == 0:
            lines.append(rule)
    lines.append(rule)
    return "\n".join(lines)


def created(body: dict[str, Any]) -> str:
    return "\n".join(
        [
            f"[RequestId]: {body['RequestId']}",
            table(
                [
                    ("Internet Endpoint", body["InternetEndpoint"]),
                    ("Intranet Endpoint", body["IntranetEndpoint"]),
                    ("Token", body["Token"]),
                ]
            ),
        ]
    )


def config(svc: dict[str, Any]) -> dict[str, Any]:
    """A service's spec: ``ServiceConfig`` is a JSON string, as EAS answers it (a control
    plane from before that answered the object itself)."""
    cfg = svc.get("ServiceConfig") or {}
    parsed: dict[str, Any] = json.loads(cfg) if isinstance(cfg, str) else cfg
    return parsed


def counts(svc: dict[str, Any]) -> str:
    return (
        f"[Total: {svc['TotalInstance']}, Pending: {svc['PendingInstance']}, "
        f"Running: {svc['RunningInstance']}]"
    )


def status_line(svc: dict[str, Any]) -> str:
    """One progress line while waiting, e.g. ``[OK] Waiting [Total: 1, Pending: 1, ...]``."""
    return f"[OK] {svc['Status']} {counts(svc)}"


def autoscaler(auto: dict[str, Any]) -> str:
    """``min 1, max 4: qps=100, concurrency=4 (windows: up 0 s, down 300 s)``."""
    rules = ", ".join(f"{s['metricName']}={s['threshold']:g}" for s in auto["scaleStrategies"])
    behavior = auto.get("behavior", {})
    up = behavior.get("scaleUp", {}).get("stabilizationWindowSeconds", 0)
    down = behavior.get("scaleDown", {}).get("stabilizationWindowSeconds", 300)
    text = f"min {auto['min']}, max {auto['max']}: {rules} (windows: up {up} s, down {down} s)"
    if auto["min"] == 0:
        on_zero = behavior.get("onZero") or {}
        grace = on_zero.get("scaleDownGracePeriodSeconds", 600)
        wake = on_zero.get("scaleUpActivationReplicas", 1)
        text += f"; to zero after {grace} s without requests, a request wakes {wake}"
    return text


def _autoscaler_rows(svc: dict[str, Any]) -> list[tuple[str, str]]:
    auto = config(svc).get("autoscaler")
    if not auto:
        return []
    status = svc.get("AutoscalerStatus") or {}
    metrics = status.get("Metrics") or {}
    values = ", ".join(f"{k} {v:g}" for k, v in metrics.items()) or "-"
    decision = status.get("LastDecision") or "-"
    if status.get("LastDecisionTime"):
        decision += f" ({status['LastDecisionTime']})"
    return [("Autoscaler", autoscaler(auto)), ("Metrics", values), ("LastDecision", decision)]


def _queue_rows(svc: dict[str, Any]) -> list[tuple[str, str]]:
    """An async service's queues: depth, and the messages each replica holds."""
    if config(svc).get("metadata", {}).get("type") != "Async":
        return []
    q = svc.get("QueueStatus")
    if not q:
        return [("Queue", "async (queue status unavailable)")]
    depth = (
        f"input {q['InputLength']} ({q['Pending']} held by replicas), sink {q['SinkLength']}, "
        f"dead letters {q['DeadLetters']}"
    )
    consumers = ", ".join(f"{c['Name']} holds {c['Pending']}" for c in q["Consumers"]) or "-"
    return [("Queue", depth), ("Consumers", consumers)]


def replica_number(replica: dict[str, Any]) -> str:
    return str(replica.get("name", "")).rsplit("-", 1)[-1]


def progress(svc: dict[str, Any]) -> tuple[str, str]:
    """What the pending replicas are doing, e.g. ``replica 0: pulling 1.2 GB of 4.0 GB
    (30%), …``, and the kind of it (its phases) — empty when none reports progress."""
    # A ready replica keeps its warm-up's result (desc shows it), which is not news here.
    reports = [
        (r, r["progress"])
        for r in svc.get("Replicas") or []
        if r.get("progress") and r.get("state") != "Running"
    ]
    text = "; ".join(f"replica {replica_number(r)}: {describe_progress(p)}" for r, p in reports)
    return text, ",".join(p.get("phase", "") for _, p in reports)


def describe(svc: dict[str, Any]) -> str:
    cfg = config(svc)
    rows = [
        ("ServiceName", svc["ServiceName"]),
        ("Region", svc["Region"]),
        ("Status", svc["Status"]),
        ("Reason", svc.get("Reason") or "-"),
        ("Message", svc.get("Message") or "-"),
        ("Instances", counts(svc)),
        *_autoscaler_rows(svc),
        *_queue_rows(svc),
        *_runs_rows(cfg),
        ("InternetEndpoint", svc["InternetEndpoint"]),
        ("IntranetEndpoint", svc["IntranetEndpoint"]),
        ("Mirror", mirror_summary(cfg.get("metadata", {}).get("mirror"))),
        ("Generation", f"{svc['Generation']} (observed {svc['ObservedGeneration']})"),
        ("CreateTime", svc["CreateTime"]),
        ("UpdateTime", svc["UpdateTime"]),
    ]
    out = table(rows, ("Property", "Value"))
    notes = svc.get("NotHonoured") or []
    if notes:
        out += "\n" + table(
            [(n["field"], n["reason"]) for n in notes], ("Not honoured here", "Why")
        )
    replicas = svc.get("Replicas") or []
    if replicas:
        out += "\n" + table(
            [
                (
                    replica_number(r),
                    r.get("state", ""),
                    r.get("endpoint") or "-",
                    str(r.get("restarts", 0)),
                    describe_progress(r["progress"]) if r.get("progress") else "-",
                    r.get("message") or "",
                )
                for r in replicas
            ],
            ("Replica", "State", "Endpoint", "Restarts", "Progress", "Message"),
        )
    return out


def _runs_rows(cfg: dict[str, Any]) -> list[tuple[str, str]]:
    """What it runs: the processor and its flags, or EAS's containers (image, command)."""
    rows: list[tuple[str, str]] = []
    containers = cfg.get("containers") or []
    if not containers:
        rows += [
            ("Processor", cfg.get("processor", "")),
            ("ProcessorParams", " ".join(cfg.get("processor_params", []))),
        ]
    for i, c in enumerate(containers):
        run = c.get("command") or c.get("script") or ""
        rows.append((f"Container[{i}]", f"{c.get('image', '')}: {run}"))
    for s in cfg.get("storage") or []:
        source = (s.get("oss") or {}).get("path") or (s.get("nfs") or {}).get("server") or "memory"
        rows.append(("Mount", f"{s.get('mount_path', '')} <- {source}"))
    labels = cfg.get("labels") or {}
    if labels:
        rows.append(("Labels", ", ".join(f"{k}={v}" for k, v in sorted(labels.items()))))
    return rows


def mirror_summary(mirror: dict[str, Any] | None) -> str:
    """A service's mirror, e.g. ``10% to v2, v3, compared within 0.001``, or ``off``."""
    if not mirror or not mirror.get("ratio"):
        return "off"
    tolerance = mirror.get("tolerance")
    compared = "byte-equal" if tolerance is None else f"within {tolerance:g}"
    return f"{mirror['ratio']}% to {', '.join(mirror['targets'])}, compared {compared}"


def service_list(body: dict[str, Any]) -> str:
    rows = [
        (
            s["ServiceName"],
            s["Region"],
            f"{s['RunningInstance']}/{s['TotalInstance']}",
            s["Status"],
            s["CreateTime"],
        )
        for s in body["Services"]
    ]
    if not rows:
        return "No services."
    footer = f"Page {body['PageNumber']}, {len(rows)} of {body['TotalCount']} service(s)"
    header = ("ServiceName", "Region", "Running", "Status", "CreateTime")
    return table(rows, header) + "\n" + footer


def events(body: dict[str, Any]) -> str:
    rows = [(e["Time"], e["Type"], e["Reason"], e["Message"]) for e in body["Events"]]
    return table(rows, ("Time", "Type", "Reason", "Message")) if rows else "No events."


def metrics(body: dict[str, Any]) -> str:
    """A service's traffic per step, newest last (what the console charts)."""

    def num(value: float | None, unit: str = "") -> str:
        return "-" if value is None else f"{value:g}{unit}"

    rows = [
        (
            datetime.fromtimestamp(p["Time"], UTC).strftime("%H:%M:%S"),
            num(p["RequestsPerSecond"]),
            num(p["ErrorsPerSecond"]),
            num(p["LatencyP50Ms"], " ms"),
            num(p["LatencyP99Ms"], " ms"),
            num(p["Replicas"]),
        )
        for p in body["Points"]
    ]
    out = table(rows, ("Time (UTC)", "Requests/s", "5xx/s", "p50", "p99", "Replicas"))
    if not body["Leading"]:
        out += "\n(answered by a control plane that does not lead: traffic is kept by the leader)"
    return out


def group_list(body: dict[str, Any]) -> str:
    rows = [
        (
            g["GroupName"],
            g["TrafficMode"],
            ", ".join(m["ServiceName"] for m in g["Members"]),
            g["InternetEndpoint"],
        )
        for g in body["Groups"]
    ]
    header = ("GroupName", "TrafficMode", "Members", "Endpoint")
    return table(rows, header) if rows else "No groups."


def group_describe(group: dict[str, Any]) -> str:
    head = table(
        [
            ("GroupName", group["GroupName"]),
            ("TrafficMode", group["TrafficMode"]),
            ("Internet Endpoint", group["InternetEndpoint"]),
            ("Intranet Endpoint", group["IntranetEndpoint"]),
            ("Authentication", group["Authentication"]),
        ]
    )
    members = [
        (
            m["ServiceName"],
            m["TrafficState"],
            str(m["Weight"]),
            f"{m['RunningInstance']}/{m['TotalInstance']}",
            m["Status"],
            f"{m['Share'] * 100:.1f}%",
        )
        for m in group["Members"]
    ]
    header = ("Member", "TrafficState", "Weight", "Running", "Status", "Share")
    return head + "\n" + table(members, header)
