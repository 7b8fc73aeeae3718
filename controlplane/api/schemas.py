"""Output shapes of the REST API, in EAS's OpenAPI style (PascalCase keys), built from
stored rows. Input shapes are in ``controlplane.spec``; rows in ``controlplane.models``."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel

from controlplane.groups import Group, shares
from controlplane.models import EventRow, ServiceRow


class Endpoints(BaseModel):
    InternetEndpoint: str
    IntranetEndpoint: str


class ServicePublic(Endpoints):
    ServiceId: str
    ServiceName: str
    Region: str
    Status: str
    Reason: str
    Message: str
    TotalInstance: int
    PendingInstance: int
    RunningInstance: int
    Generation: int
    ObservedGeneration: int
    ResourceVersion: int
    Stopped: bool
    CreateTime: datetime
    UpdateTime: datetime
    ServiceConfig: dict[str, Any]
    Replicas: list[dict[str, Any]]
    # The autoscaler's metric values and last decision, from the leading control plane.
    AutoscalerStatus: dict[str, Any] | None = None
    # The spec's fields this runtime does not act on, each with why (controlplane.eas_fields).
    NotHonoured: list[dict[str, str]] = []


class ServiceCreated(Endpoints):
    RequestId: str
    ServiceId: str
    ServiceName: str
    Region: str
    Status: str
    Token: str


class TokenPublic(BaseModel):
    RequestId: str
    ServiceName: str
    Token: str


class ServiceList(BaseModel):
    RequestId: str
    TotalCount: int
    PageNumber: int
    PageSize: int
    Services: list[ServicePublic]
    # Pass as ``pageToken`` for the next page (keyset: stable while services are added);
    # absent on the last page.
    NextPageToken: str | None = None


class EventPublic(BaseModel):
    Time: datetime
    Type: str
    Reason: str
    Message: str


class EventList(BaseModel):
    RequestId: str
    ServiceName: str
    Events: list[EventPublic]


class GroupMember(BaseModel):
    ServiceName: str
    Weight: int
    TrafficState: str  # grouping | standalone
    Status: str
    RunningInstance: int
    TotalInstance: int
    Share: float  # expected share of group traffic now, 0..1


class GroupPublic(Endpoints):
    GroupName: str
    Region: str
    TrafficMode: str  # auto | customized
    Authentication: str
    Members: list[GroupMember]


class GroupList(BaseModel):
    RequestId: str
    TotalCount: int
    Groups: list[GroupPublic]


class GroupToken(BaseModel):
    RequestId: str
    GroupName: str
    Token: str


GROUP_AUTH = (
    "Authorization: <group token> (GET .../token; stable while members are released and "
    "retired) or any member's service token (stops working when that member leaves)"
)


def group_public(group: Group, ends: Endpoints) -> GroupPublic:
    share = shares(group.row.traffic_mode, group.members)
    return GroupPublic(
        **ends.model_dump(),
        GroupName=group.row.name,
        Region=group.row.cluster,
        TrafficMode=group.row.traffic_mode,
        Authentication=GROUP_AUTH,
        Members=[
            GroupMember(
                ServiceName=m.name,
                Weight=m.spec.metadata.group_weight,
                TrafficState=m.spec.metadata.traffic_state or "standalone",
                Status=m.status,
                RunningInstance=m.running_instances,
                TotalInstance=m.total_instances,
                Share=round(share[m.name], 4),
            )
            for m in group.members
        ],
    )


def endpoints(name: str, public_base: str, intranet_base: str) -> Endpoints:
    path = f"/api/predict/{name}"
    return Endpoints(InternetEndpoint=public_base + path, IntranetEndpoint=intranet_base + path)


def service_public(
    row: ServiceRow,
    ends: Endpoints,
    autoscaler_status: dict[str, Any] | None = None,
    not_honoured: list[dict[str, str]] | None = None,
) -> ServicePublic:
    return ServicePublic(
        **ends.model_dump(),
        ServiceId=row.uid,
        ServiceName=row.name,
        Region=row.cluster,
        Status=row.status,
        Reason=row.reason,
        Message=row.message,
        TotalInstance=row.total_instances,
        PendingInstance=row.pending_instances,
        RunningInstance=row.running_instances,
        Generation=row.generation,
        ObservedGeneration=row.observed_generation,
        ResourceVersion=row.version,
        Stopped=row.stopped,
        CreateTime=row.created_at,
        UpdateTime=row.updated_at,
        ServiceConfig=row.spec.public(),
        Replicas=row.replicas or [],
        AutoscalerStatus=autoscaler_status,
        NotHonoured=not_honoured or [],
    )


def event_public(row: EventRow) -> EventPublic:
    return EventPublic(Time=row.created_at, Type=row.type, Reason=row.reason, Message=row.message)
