"""Answers in the EAS SDK's model shapes (``alibabacloud_eas20210701.models``), built from
stored rows. Pure: the handlers of ``controlplane.api`` call these; tests check each shape
against the SDK's own models as tables.

Field names, nesting and types are the SDK's: a service's ``ServiceConfig`` is a JSON
string, ``Labels`` a list of ``{LabelKey, LabelValue}``, an instance ``Status`` "Running"
when it is ready to serve, times as ``YYYY-MM-DDTHH:MM:SSZ``.
"""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit

from controlplane.model.spec import Autoscaler
from controlplane.store.tables import EventRow, ServiceRow, ServiceVersionRow


def eas_time(t: datetime) -> str:
    return t.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def labels(stored: dict[str, str] | None) -> list[dict[str, str]]:
    return [{"LabelKey": k, "LabelValue": v} for k, v in sorted((stored or {}).items())]


def service_config(spec: dict[str, Any]) -> str:
    return json.dumps(spec, ensure_ascii=False, separators=(",", ":"))


def service_fields(row: ServiceRow) -> dict[str, Any]:
    """The fields of the SDK's ``Service`` beside those OpenEAS always answered."""
    meta = row.spec.metadata
    return {
        "ServiceUid": row.uid,
        "ServiceConfig": service_config(row.spec.public()),
        "Labels": labels(row.labels),
        "Cpu": meta.cpu,
        "Gpu": meta.gpu,
        "Memory": meta.memory,
        "Resource": meta.resource or "",
        "ServiceGroup": meta.group or "",
        "Weight": meta.group_weight,
        "TrafficState": meta.traffic_state or "standalone",
        "SafetyLock": row.safety_lock or "none",
        "CurrentVersion": row.current_version,
        "LatestVersion": row.latest_version,
        "Source": "OpenEAS",
    }


def instance(replica: dict[str, Any], created: datetime) -> dict[str, Any]:
    """One replica as the SDK's ``Instance``; ``created``: the service's creation, when a
    replica's own start is not known."""
    endpoint = urlsplit(replica.get("endpoint") or "")
    ready = replica.get("state") == "Running"
    return {
        "InstanceName": replica["name"],
        "Status": replica.get("state") or "Pending",
        "Reason": replica.get("reason") or "",
        "RestartCount": int(replica.get("restarts") or 0),
        "InnerIP": endpoint.hostname or "",
        "HostIP": endpoint.hostname or "",
        "InstancePort": endpoint.port or 0,
        "ReadyProcesses": 1 if ready else 0,
        "TotalProcesses": 1,
        "Isolated": False,
        "IsSpot": False,
        "Role": "Current" if replica.get("current", True) else "Old",
        "StartAt": eas_time(created),
        "LastState": [{"Message": replica["message"]}] if replica.get("message") else [],
    }


def endpoints(internet: str, intranet: str) -> list[dict[str, Any]]:
    """The SDK's ``Endpoints`` of DescribeServiceEndpoints / DescribeGroupEndpoints: one
    gateway entry (OpenEAS has no other endpoint kind)."""
    port = urlsplit(internet).port or (443 if internet.startswith("https") else 80)
    return [
        {
            "EndpointType": "DefaultGateway",
            "BackendId": "openeas-gateway",
            "PathType": "Prefix",
            "Port": port,
            "InternetEndpoints": [internet],
            "IntranetEndpoints": [intranet],
        }
    ]


def autoscaler(name: str, auto: Autoscaler, status: dict[str, Any] | None) -> dict[str, Any]:
    """DescribeServiceAutoScaler: the SDK's ``MinReplica``/``MaxReplica``/``ScaleStrategies``
    beside the spec's own ``min``/``max``/``scaleStrategies``."""
    stored = auto.model_dump(exclude_none=True)
    values = (status or {}).get("Metrics") or {}
    return {
        **stored,
        "ServiceName": name,
        "MinReplica": auto.min,
        "MaxReplica": auto.max,
        "ScaleStrategies": [
            {"metricName": s.metricName, "threshold": s.threshold, "service": name}
            for s in auto.scaleStrategies
        ],
        "Behavior": stored.get("behavior", {}),
        "CurrentMetrics": [
            {"metricName": k, "value": float(v), "service": name}
            for k, v in sorted(values.items())
            if isinstance(v, int | float)
        ],
    }


def cron_scaler(name: str, stored: dict[str, Any], created: datetime) -> dict[str, Any]:
    status = stored.get("JobStatus", {})
    return {
        "ServiceName": name,
        "ExcludeDates": stored.get("ExcludeDates", []),
        "ScaleJobs": [
            {
                **job,
                "CreateTime": eas_time(created),
                "LastProbeTime": status.get(job["Name"], {}).get("LastProbeTime", ""),
                "State": status.get(job["Name"], {}).get("State", "Waiting"),
                "Message": status.get(job["Name"], {}).get("Message", ""),
            }
            for job in stored["ScaleJobs"]
        ],
    }


def version(row: ServiceVersionRow, current: int) -> dict[str, Any]:
    return {
        "ImageId": row.version,
        "BuildTime": eas_time(row.created_at),
        "ServiceConfig": service_config(row.spec),
        "ImageAvailable": "true",
        "ServiceRunnable": "true",
        "Message": "current" if row.version == current else "",
    }


def event(row: EventRow) -> dict[str, Any]:
    return {
        "Time": eas_time(row.created_at),
        "Type": row.type,
        "Reason": row.reason,
        "Message": row.message,
    }


def page_count(total: int, size: int) -> int:
    return max(1, math.ceil(total / size))


def diagnosis(row: ServiceRow, events: list[EventRow]) -> list[dict[str, Any]]:
    """Why the service is not running, from its status, replicas and warning events: one
    entry per finding, each with its causes and what to do. Empty while it runs."""
    found: list[dict[str, Any]] = []
    if row.stopped:
        found.append(
            {
                "Error": "ServiceStopped",
                "Causes": ["the service was stopped"],
                "Advices": [f"start it: StartService (eascmd start {row.name})"],
            }
        )
    if row.status == "Failed" or row.reason:
        found.append(
            {
                "Error": row.reason or row.status,
                "Causes": [row.message or f"the service is {row.status}"],
                "Advices": [_advice(row.reason)],
            }
        )
    for replica in row.replicas or []:
        if replica.get("state") in ("Failed", "CrashLoopBackOff") or replica.get("reason"):
            found.append(
                {
                    "Error": f"{replica['name']}: {replica.get('reason') or replica['state']}",
                    "Causes": [replica.get("message") or f"replica is {replica['state']}"],
                    "Advices": [
                        _advice(replica.get("reason") or ""),
                        f"see its output: DescribeServiceLog (eascmd logs {row.name})",
                    ],
                }
            )
    warnings = [e for e in events if e.type == "Warning"][-3:]
    for e in warnings:
        found.append({"Error": e.reason, "Causes": [e.message], "Advices": [_advice(e.reason)]})
    if not found and row.status != "Running" and not row.stopped:
        found.append(
            {
                "Error": row.status,
                "Causes": [
                    f"{row.running_instances} of {row.total_instances} instance(s) ready "
                    f"(generation {row.observed_generation} of {row.generation} applied)"
                ],
                "Advices": ["wait for the replicas to come up; watch DescribeServiceEvent"],
            }
        )
    return found


_ADVICE = {
    "ModelPullFailed": "check processor_params' --model-repository and the OSS credentials",
    "InvalidFlags": "correct processor_params; the message names the flag",
    "CrashLoopBackOff": "the replica exits after start: read its log for the error",
    "Unschedulable": "free or add resources of metadata.resource, or lower cpu/gpu/memory",
    "InstanceKept": "change the autoscaler's min/max instead of metadata.instance",
}


def _advice(reason: str) -> str:
    return _ADVICE.get(reason, "read the message and the service's events and log")
