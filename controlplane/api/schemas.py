"""Output shapes of the REST API, in EAS's OpenAPI style (PascalCase keys), built from
stored rows. Input shapes are in ``controlplane.model.spec``; rows in
``controlplane.store.tables``."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from pydantic import BaseModel, Field

from controlplane.api import eas_shapes
from controlplane.store.groups import Group, shares
from controlplane.store.tables import EventRow, ServiceRow


class Endpoints(BaseModel):
    InternetEndpoint: str
    IntranetEndpoint: str


class Label(BaseModel):
    LabelKey: str
    LabelValue: str


class ServicePublic(Endpoints):
    """The SDK's ``Service`` (its fields as it names and types them) and OpenEAS's own."""

    RequestId: str = Field(default_factory=lambda: str(uuid.uuid4()).upper())
    ServiceId: str
    ServiceUid: str
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
    # The spec as a JSON string, as EAS answers it (parse it to read the fields).
    ServiceConfig: str
    Labels: list[Label]
    Cpu: int
    Gpu: int
    Memory: int
    Resource: str
    ServiceGroup: str
    Weight: int
    TrafficState: str
    SafetyLock: str
    CurrentVersion: int
    LatestVersion: int
    Source: str
    Replicas: list[dict[str, Any]]
    # The service token: only where the caller may see it (controlplane.api.visibility).
    AccessToken: str | None = None
    # The autoscaler's metric values and last decision, from the leading control plane.
    AutoscalerStatus: dict[str, Any] | None = None
    # The spec's fields this runtime does not act on, each with why (controlplane.model.eas_fields).
    NotHonoured: list[dict[str, str]] = []
    # An async service's queues: lengths, dead letters, each replica's consumer (describe).
    QueueStatus: dict[str, Any] | None = None


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
    PageNum: int = 1
    TotalCount: int = 0
    TotalPageNum: int = 1


class GroupMember(BaseModel):
    ServiceName: str
    Weight: int
    TrafficState: str  # grouping | standalone
    Status: str
    RunningInstance: int
    TotalInstance: int
    Share: float  # expected share of group traffic now, 0..1


class GroupPublic(Endpoints):
    """The SDK's ``Group`` (``Name``, ``ClusterId``, ``CreateTime``...) and OpenEAS's own."""

    GroupName: str
    Name: str
    ClusterId: str
    CreateTime: str
    UpdateTime: str
    Region: str
    TrafficMode: str  # auto | customized
    Authentication: str
    Members: list[GroupMember]
    # The group token: only where the caller may see it (controlplane.api.visibility).
    AccessToken: str | None = None


class GroupList(BaseModel):
    RequestId: str
    TotalCount: int
    Groups: list[GroupPublic]
    PageNumber: int = 1
    PageSize: int = 100


class GroupToken(BaseModel):
    RequestId: str
    GroupName: str
    Token: str


GROUP_AUTH = (
    "Authorization: <group token> (GET .../token; stable while members are released and "
    "retired) or any member's service token (stops working when that member leaves)"
)


def group_public(group: Group, ends: Endpoints, access_token: str | None = None) -> GroupPublic:
    share = shares(group.row.traffic_mode, group.members)
    created = eas_shapes.eas_time(group.row.created_at)
    return GroupPublic(
        **ends.model_dump(),
        GroupName=group.row.name,
        Name=group.row.name,
        ClusterId=group.row.cluster,
        CreateTime=created,
        UpdateTime=created,
        AccessToken=access_token,
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
    access_token: str | None = None,
    not_honoured: list[dict[str, str]] | None = None,
) -> ServicePublic:
    return ServicePublic(
        **ends.model_dump(),
        **eas_shapes.service_fields(row),
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
        Replicas=row.replicas or [],
        AutoscalerStatus=autoscaler_status,
        AccessToken=access_token,
        NotHonoured=not_honoured or [],
    )


def event_public(row: EventRow) -> EventPublic:
    return EventPublic(Time=row.created_at, Type=row.type, Reason=row.reason, Message=row.message)
