"""REST handlers for service groups (``/api/v2/groups``), a member's release
(``PUT /api/v2/services/{cluster}/{name}/release``) and a service's mirror
(``PUT /api/v2/services/{cluster}/{name}/mirror``), in EAS's shapes; admin-authenticated."""

from __future__ import annotations

import uuid
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Query, Request, Response
from pydantic import BaseModel, ConfigDict, Field

from controlplane.api import eas_shapes, schemas
from controlplane.api.auth import authorize
from controlplane.api.endpoints import endpoints_of
from controlplane.api.visibility import sees_token
from controlplane.model.errors import FieldProblem, InvalidSpec
from controlplane.model.paging import MAX_PAGE_NUMBER
from controlplane.model.roles import Principal
from controlplane.settings import Settings
from controlplane.store.groups import Group, Groups, TrafficMode
from controlplane.store.services import Services
from controlplane.store.tables import ServiceRow


class TrafficModeRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    TrafficMode: TrafficMode


class ReleaseRequest(BaseModel):
    """EAS's ReleaseService: each field optional, the other kept."""

    model_config = ConfigDict(extra="forbid", strict=True)
    Weight: int | None = Field(default=None, ge=0, le=1000)
    TrafficState: Literal["grouping", "standalone"] | None = None


class MirrorRequest(BaseModel):
    """EAS's mirror settings: ``Ratio`` % of the requests also go to each ``Target``."""

    model_config = ConfigDict(extra="forbid", strict=True)
    Ratio: int = Field(ge=0, le=100)
    Target: list[str] = Field(default_factory=list, max_length=8)
    Tolerance: float | None = Field(default=None, ge=0, allow_inf_nan=False)


# The spec's mirror fields under the names the mirror call uses, for its error messages.
_MIRROR_FIELDS = {
    "metadata.mirror.ratio": "Ratio",
    "metadata.mirror.targets": "Target",
    "metadata.mirror.tolerance": "Tolerance",
}


def _as_mirror_call(e: InvalidSpec) -> InvalidSpec:
    def rename(field: str) -> str:
        for spec_name, call_name in _MIRROR_FIELDS.items():
            if field.startswith(spec_name):
                return call_name + field.removeprefix(spec_name)
        return field

    return InvalidSpec([FieldProblem(rename(p.field), p.message, p.fix) for p in e.problems])


def _request_id() -> str:
    return str(uuid.uuid4()).upper()


def router(groups: Groups, services: Services, settings: Settings) -> APIRouter:
    api = APIRouter(tags=["groups"], dependencies=[Depends(authorize)])

    def public(request: Request, group: Group, token: str | None = None) -> schemas.GroupPublic:
        return schemas.group_public(group, endpoints_of(settings, request, group.row.name), token)

    @api.get("/api/v2/groups", name="ListGroups")
    def list_groups(
        request: Request,
        principal: Annotated[Principal, Depends(authorize)],
        page_number: Annotated[int, Query(alias="PageNumber", ge=1, le=MAX_PAGE_NUMBER)] = 1,
        page_size: Annotated[int, Query(alias="PageSize", ge=1, le=100)] = 100,
        name: Annotated[str | None, Query(alias="Filter", max_length=63)] = None,
    ) -> schemas.GroupList:
        """The groups of this cluster with their members (tokens are never shown here); for
        an AccessKey with ``Services``, the groups they match; ``Filter``: a part of the
        name."""
        found = [g for g in groups.list() if not name or name in g.row.name]
        if principal.role != "admin":
            found = [g for g in found if principal.covers(g.row.name)]
        start = (page_number - 1) * page_size
        return schemas.GroupList(
            RequestId=_request_id(),
            TotalCount=len(found),
            PageNumber=page_number,
            PageSize=page_size,
            Groups=[public(request, g) for g in found[start : start + page_size]],
        )

    @api.get("/api/v2/groups/{cluster}/{group}", name="DescribeGroup")
    def describe(request: Request, cluster: str, group: str) -> schemas.GroupPublic:
        """Members, weights, traffic states, expected shares, the endpoint and how to
        authenticate against it; the group token in ``AccessToken`` for callers that may
        see it."""
        if sees_token(request):
            found, token = groups.token(cluster, group)
            return public(request, found, token)
        return public(request, groups.get(cluster, group))

    @api.get("/api/v2/groups/{cluster}/{group}/endpoints", name="DescribeGroupEndpoints")
    def endpoints(request: Request, cluster: str, group: str) -> dict[str, Any]:
        """Where to call the group (the gateway's endpoints), with the group token for
        callers that may see it."""
        found = groups.get(cluster, group)
        ends = endpoints_of(settings, request, found.row.name)
        answer: dict[str, Any] = {
            "RequestId": _request_id(),
            "Message": "",
            "Endpoints": eas_shapes.endpoints(ends.InternetEndpoint, ends.IntranetEndpoint),
        }
        if sees_token(request):
            answer["AccessToken"] = groups.token(cluster, group)[1]
        return answer

    @api.put("/api/v2/groups/{cluster}/{group}", name="UpdateGroup")
    def set_mode(
        request: Request, cluster: str, group: str, body: TrafficModeRequest
    ) -> schemas.GroupPublic:
        """``auto`` splits by members' running instances, ``customized`` by weights."""
        return public(request, groups.set_mode(cluster, group, body.TrafficMode))

    @api.get("/api/v2/groups/{cluster}/{group}/token", name="DescribeGroupToken")
    def show_token(cluster: str, group: str) -> schemas.GroupToken:
        """The group token (opens /api/predict/<group>); DescribeGroup shows it too, to
        admin and developer callers; a list never does."""
        found, token = groups.token(cluster, group)
        return schemas.GroupToken(RequestId=_request_id(), GroupName=found.row.name, Token=token)

    @api.post("/api/v2/groups/{cluster}/{group}/token", name="RotateGroupToken")
    def rotate_token(cluster: str, group: str) -> schemas.GroupToken:
        found, token = groups.rotate_token(cluster, group)
        return schemas.GroupToken(RequestId=_request_id(), GroupName=found.row.name, Token=token)

    def service_public(
        request: Request, response: Response, row: ServiceRow
    ) -> schemas.ServicePublic:
        response.headers["ETag"] = f'"{row.version}"'
        own = str(request.base_url).rstrip("/")
        ends = schemas.endpoints(row.name, settings.public_base(own), settings.intranet_base(own))
        return schemas.service_public(row, ends)

    @api.put("/api/v2/services/{cluster}/{name}/release", tags=["services"], name="ReleaseService")
    def release(
        request: Request, response: Response, cluster: str, name: str, body: ReleaseRequest
    ) -> schemas.ServicePublic:
        """Set a group member's ``Weight`` (0..1000) and ``TrafficState`` (``grouping`` takes
        group traffic, ``standalone`` only its own endpoint). Rolls no replica."""
        row = services.release(cluster, name, body.Weight, body.TrafficState)
        return service_public(request, response, row)

    @api.put(
        "/api/v2/services/{cluster}/{name}/mirror", tags=["services"], name="UpdateServiceMirror"
    )
    def mirror(
        request: Request, response: Response, cluster: str, name: str, body: MirrorRequest
    ) -> schemas.ServicePublic:
        """Copy ``Ratio`` % (0..100) of the service's requests to each ``Target`` service
        (1..8) after its own answer, and compare the answers: byte-equal, or with
        ``Tolerance`` the output tensors within that absolute difference. The caller only
        sees this service's answer; the gateway counts matches per target. ``Ratio`` 0 or
        no ``Target`` removes the mirror. Rolls no replica."""
        try:
            row = services.mirror(cluster, name, body.Ratio, body.Target, body.Tolerance)
        except InvalidSpec as e:
            raise _as_mirror_call(e) from None
        return service_public(request, response, row)

    @api.post(
        "/api/v2/services/{cluster}/{name}/mirror", tags=["services"], name="CreateServiceMirror"
    )
    def create_mirror(
        request: Request, response: Response, cluster: str, name: str, body: MirrorRequest
    ) -> schemas.ServicePublic:
        """As UpdateServiceMirror (a mirror that exists is replaced)."""
        return mirror(request, response, cluster, name, body)

    @api.get(
        "/api/v2/services/{cluster}/{name}/mirror", tags=["services"], name="DescribeServiceMirror"
    )
    def describe_mirror(cluster: str, name: str) -> dict[str, Any]:
        """The mirror: ``Ratio`` (an integer percentage, as the SDK reads it, ``"0"`` without
        a mirror) and ``Target`` (the target services, comma-separated), and OpenEAS's own
        ``Targets`` (a list) and ``Tolerance``."""
        found = services.get(cluster, name).spec.metadata.mirror
        return {
            "RequestId": _request_id(),
            "ServiceName": name,
            "Ratio": str(found.ratio) if found else "0",
            "Target": ",".join(found.targets) if found else "",
            "Targets": list(found.targets) if found else [],
            "Tolerance": found.tolerance if found else None,
        }

    @api.delete(
        "/api/v2/services/{cluster}/{name}/mirror", tags=["services"], name="DeleteServiceMirror"
    )
    def delete_mirror(
        request: Request, response: Response, cluster: str, name: str
    ) -> schemas.ServicePublic:
        """Remove the mirror."""
        return service_public(request, response, services.mirror(cluster, name, 0, [], None))

    return api
