"""Output shapes of the REST API, in EAS's OpenAPI style (PascalCase keys), built from
stored rows. Input shapes are in ``controlplane.spec``; rows in ``controlplane.models``."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel

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


def endpoints(name: str, public_base: str, intranet_base: str) -> Endpoints:
    path = f"/api/predict/{name}"
    return Endpoints(InternetEndpoint=public_base + path, IntranetEndpoint=intranet_base + path)


def service_public(
    row: ServiceRow, ends: Endpoints, autoscaler_status: dict[str, Any] | None = None
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
    )


def event_public(row: EventRow) -> EventPublic:
    return EventPublic(Time=row.created_at, Type=row.type, Reason=row.reason, Message=row.message)
