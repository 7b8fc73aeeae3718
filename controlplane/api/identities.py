"""REST handlers for AccessKey pairs (``/api/v2/accesskeys``) and the audit trail
(``/api/v2/audit``). Both are the admin role's alone (``controlplane.model.roles``)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Annotated

from fastapi import APIRouter, Depends, Query
from pydantic import BaseModel, ConfigDict, Field

from controlplane.api.auth import authorize
from controlplane.model.errors import FieldProblem, InvalidSpec
from controlplane.model.roles import Role
from controlplane.store.accesskeys import AccessKeys
from controlplane.store.audit import AuditTrail
from controlplane.store.tables import AccessKeyRow


class AccessKeyCreate(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    Role: Role
    Services: list[str] | None = Field(default=None, max_length=64)
    Description: str = Field(default="", max_length=1024)


class AccessKeyPublic(BaseModel):
    AccessKeyId: str
    Role: str
    Services: list[str] | None  # None: every service and group
    Description: str
    CreateTime: str


class AccessKeyCreated(AccessKeyPublic):
    RequestId: str
    AccessKeySecret: str  # shown this once; sealed at rest


class AccessKeyList(BaseModel):
    RequestId: str
    AccessKeys: list[AccessKeyPublic]


class Deleted(BaseModel):
    RequestId: str
    AccessKeyId: str


class AuditEntry(BaseModel):
    Time: str
    Principal: str
    Action: str
    Resource: str
    Status: int
    RequestId: str
    SourceIp: str


class AuditList(BaseModel):
    RequestId: str
    Entries: list[AuditEntry]


def _request_id() -> str:
    return str(uuid.uuid4()).upper()


def _public(row: AccessKeyRow) -> AccessKeyPublic:
    return AccessKeyPublic(
        AccessKeyId=row.id,
        Role=row.role,
        Services=row.services,
        Description=row.description,
        CreateTime=row.created_at.isoformat(),
    )


def router(keys: AccessKeys, trail: AuditTrail) -> APIRouter:
    api = APIRouter(tags=["identities"], dependencies=[Depends(authorize)])

    @api.post("/api/v2/accesskeys", name="CreateAccessKey")
    def create(body: AccessKeyCreate) -> AccessKeyCreated:
        """A new AccessKey pair; its secret is in this answer only."""
        row, secret = keys.create(body.Role, body.Services, body.Description)
        public = _public(row).model_dump()
        return AccessKeyCreated(RequestId=_request_id(), AccessKeySecret=secret, **public)

    @api.get("/api/v2/accesskeys", name="ListAccessKeys")
    def list_keys() -> AccessKeyList:
        """Every AccessKey, without secrets."""
        return AccessKeyList(RequestId=_request_id(), AccessKeys=[_public(r) for r in keys.list()])

    @api.delete("/api/v2/accesskeys/{AccessKeyId}", name="DeleteAccessKey")
    def delete(AccessKeyId: str) -> Deleted:
        """Revoke a key: every control-plane replica refuses it within a second."""
        keys.delete(AccessKeyId)
        return Deleted(RequestId=_request_id(), AccessKeyId=AccessKeyId)

    @api.get("/api/v2/audit", name="ListAuditEntries")
    def audit(
        since: Annotated[str | None, Query(max_length=40)] = None,
        principal: Annotated[str | None, Query(max_length=64)] = None,
        service: Annotated[str | None, Query(max_length=128)] = None,
        limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    ) -> AuditList:
        """Writes and refused requests, newest first: from ``since`` (ISO 8601 or Unix
        seconds), by ``principal`` (an AccessKeyId or ``admin-token``), on ``service``."""
        rows = trail.entries(_since(since), principal, service, limit)
        return AuditList(
            RequestId=_request_id(),
            Entries=[
                AuditEntry(
                    Time=r.time.isoformat(),
                    Principal=r.principal,
                    Action=r.action,
                    Resource=r.resource,
                    Status=r.status,
                    RequestId=r.request_id,
                    SourceIp=r.source_ip,
                )
                for r in rows
            ],
        )

    return api


def _since(raw: str | None) -> datetime | None:
    if not raw:
        return None
    try:
        return datetime.fromtimestamp(float(raw), UTC)
    except ValueError:
        pass
    try:
        when = datetime.fromisoformat(raw.replace("Z", "+00:00"))
    except ValueError:
        raise InvalidSpec(
            [
                FieldProblem(
                    "since", f"{raw!r} is not a time", "use 2027-01-15T08:00:00Z or Unix seconds"
                )
            ]
        ) from None
    return when if when.tzinfo else when.replace(tzinfo=UTC)
