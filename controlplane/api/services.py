"""REST handlers for ``/api/v2/services``: EAS-shaped paths, admin-authenticated. Each
route is named after the EAS SDK action it serves (authorization reads the action from it).

Thin: parse, call :class:`controlplane.store.services.Services`, shape the answer. Errors are raised
as domain exceptions and turned into problem+json by ``controlplane.api.problems``.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Annotated, Literal

from fastapi import APIRouter, Depends, Header, Query, Request, Response
from fastapi.concurrency import run_in_threadpool
from pydantic import BaseModel, ConfigDict, Field

from controlplane.api import eas_shapes, schemas, sdk_query
from controlplane.api.auth import audit_in, authorize
from controlplane.api.endpoints import endpoints_of
from controlplane.api.problems import json_body
from controlplane.api.visibility import sees_token
from controlplane.elasticity.scaling_loop import Autoscaling
from controlplane.model import eas_fields
from controlplane.model.errors import FieldProblem, InvalidSpec
from controlplane.model.paging import MAX_PAGE_NUMBER
from controlplane.model.roles import Principal
from controlplane.settings import Settings
from controlplane.store import changes, service_watch
from controlplane.store.services import Services, SortKey
from controlplane.store.tables import ServiceRow


def _body(schema: str) -> dict[str, object]:
    content = {"application/json": {"schema": {"$ref": f"#/components/schemas/{schema}"}}}
    return {"requestBody": {"required": True, "content": content}}


SPEC_BODY = _body("ServiceSpec")


class ScaleRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    Instance: int = Field(ge=0, le=100)


def _request_id() -> str:
    return str(uuid.uuid4()).upper()


def router(services: Services, settings: Settings, autoscaling: Autoscaling) -> APIRouter:
    api = APIRouter(
        prefix="/api/v2/services",
        tags=["services"],
        dependencies=[Depends(authorize)],
    )

    def public(
        request: Request, row: ServiceRow, response: Response, token: bool = False
    ) -> schemas.ServicePublic:
        response.headers["ETag"] = f'"{row.version}"'
        status = autoscaling.status(row.name) if row.spec.autoscaler else None
        shown = services.sealer.open(row.token) if token and sees_token(request) else None
        notes = eas_fields.not_honoured(row.spec, settings.runtime)
        return schemas.service_public(
            row, endpoints_of(settings, request, row.name), status, shown, notes
        )

    @api.post("", status_code=200, openapi_extra=SPEC_BODY, name="CreateService")
    async def create(
        request: Request,
        labels: Annotated[str | None, Query(alias="Labels", max_length=8192)] = None,
    ) -> schemas.ServiceCreated:
        """Create a service from an EAS spec; answers its endpoints and token. ``Labels``
        (a JSON object, as the SDK sends it) labels it."""
        tags = sdk_query.label_map(labels) if labels else None
        body = json_body(await request.body())
        row, token = await run_in_threadpool(services.create, body, tags, audit_in(request))
        return schemas.ServiceCreated(
            **endpoints_of(settings, request, row.name).model_dump(),
            RequestId=_request_id(),
            ServiceId=row.uid,
            ServiceName=row.name,
            Region=row.cluster,
            Status=row.status,
            Token=token,
        )

    @api.get("", name="ListServices")
    def list_services(
        request: Request,
        principal: Annotated[Principal, Depends(authorize)],
        page_number: Annotated[int, Query(alias="pageNumber", ge=1, le=MAX_PAGE_NUMBER)] = 1,
        page_size: Annotated[int, Query(alias="pageSize", ge=1, le=100)] = 20,
        name: Annotated[str | None, Query(max_length=63)] = None,
        status: str | None = None,
        sort: SortKey = "createTime",
        order: Literal["asc", "desc"] = "desc",
        page_token: Annotated[str | None, Query(alias="pageToken", max_length=512)] = None,
        sdk_page_number: Annotated[
            int | None, Query(alias="PageNumber", ge=1, le=MAX_PAGE_NUMBER)
        ] = None,
        sdk_page_size: Annotated[int | None, Query(alias="PageSize", ge=1, le=100)] = None,
        sdk_name: Annotated[str | None, Query(alias="ServiceName", max_length=63)] = None,
        sdk_filter: Annotated[str | None, Query(alias="Filter", max_length=63)] = None,
        sdk_status: Annotated[str | None, Query(alias="ServiceStatus", max_length=16)] = None,
        sdk_sort: Annotated[str | None, Query(alias="Sort", max_length=32)] = None,
        sdk_order: Annotated[str | None, Query(alias="Order", max_length=8)] = None,
        label: Annotated[str | None, Query(alias="Label", max_length=4096)] = None,
        group: Annotated[str | None, Query(alias="GroupName", max_length=63)] = None,
        label_pairs: Annotated[list[str] | None, Query(alias="label", max_length=16)] = None,
    ) -> schemas.ServiceList:
        """Services of this cluster, paged, filtered by name substring and status. Pages by
        ``pageNumber``, or by ``pageToken`` (the previous page's ``NextPageToken``): the
        latter stays stable while services are created and costs the same at any depth.
        The SDK's spellings work too: ``PageNumber``, ``PageSize``, ``ServiceName`` or
        ``Filter`` (a part of the name), ``ServiceStatus``, ``Sort`` (``CreateTime``...),
        ``Order``, ``Label`` (a JSON object: services with all of these labels) and
        ``GroupName``; and ``label=k:v`` (repeatable) for people. An AccessKey with
        ``Services`` lists only the names its globs match."""
        page_number = sdk_page_number or page_number
        page_size = sdk_page_size or page_size
        rows, total, next_token = services.page(
            page=page_number,
            size=page_size,
            name=sdk_name or sdk_filter or name,
            status=sdk_status or status,
            sort=sdk_query.sort_key(sdk_sort) if sdk_sort else sort,
            order=sdk_query.order(sdk_order) if sdk_order else order,
            page_token=page_token,
            group=group,
            labels={
                **(sdk_query.label_filter(label) or {}),
                **label_pairs_map(label_pairs or []),
            }
            or None,
            globs=principal.services if principal.role != "admin" else None,
        )
        return schemas.ServiceList(
            RequestId=_request_id(),
            TotalCount=total,
            PageNumber=page_number,
            PageSize=page_size,
            Services=[
                schemas.service_public(r, endpoints_of(settings, request, r.name)) for r in rows
            ],
            NextPageToken=next_token,
        )

    @api.get("/{cluster}/{name}", name="DescribeService")
    async def describe(
        request: Request,
        response: Response,
        cluster: str,
        name: str,
        after: Annotated[str | None, Query(max_length=64)] = None,
        wait: Annotated[float, Query(ge=0, le=service_watch.MAX_WAIT_S)] = 0,
    ) -> schemas.ServicePublic:
        """The service, with its token in ``AccessToken`` for callers that may see it
        (admin, developer). With `after` (the `X-OpenEAS-State` header of an earlier answer)
        and `wait` (seconds, at most 30), a long-poll: answers as soon as the service
        differs from that state, else after `wait` seconds as it is."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait
        commits = changes.SERVICES
        while True:
            seen = commits.count
            row = await run_in_threadpool(services.get, cluster, name)
            body = public(request, row, response, token=True)
            if row.spec.is_async and autoscaling.backlog is not None:
                body.QueueStatus = await autoscaling.backlog.status(row.name)
            state = service_watch.state_digest(body.model_dump_json(exclude={"RequestId"}).encode())
            left = deadline - loop.time()
            if after is None or state != after or left <= 0:
                response.headers["X-OpenEAS-State"] = state
                return body
            await commits.wait_past(seen, min(left, service_watch.REREAD_S))

    @api.put("/{cluster}/{name}", openapi_extra=SPEC_BODY, name="UpdateService")
    async def update(
        request: Request,
        response: Response,
        cluster: str,
        name: str,
        if_match: Annotated[str | None, Header()] = None,
        update_type: Annotated[Literal["merge", "replace"], Query(alias="UpdateType")] = "merge",
    ) -> schemas.ServicePublic:
        """Merge the body (RFC 7386) into the spec (``UpdateType=replace``: the body is the
        whole new spec). ``If-Match: "<ResourceVersion>"`` makes the write conditional
        (412 when the service changed since it was read)."""
        patch = json_body(await request.body())
        if not isinstance(patch, dict):
            raise InvalidSpec([FieldProblem("body", "expected a JSON object", "send {...}")])
        if update_type == "replace":
            patch = _replacing(patch, name)
        row = await run_in_threadpool(services.update, cluster, name, patch, _version(if_match))
        return public(request, row, response)

    @api.delete("/{cluster}/{name}", name="DeleteService")
    def delete(
        request: Request, response: Response, cluster: str, name: str
    ) -> schemas.ServicePublic:
        """Delete: the replicas go first, then the service (status ``Deleting`` meanwhile)."""
        return public(request, services.request_delete(cluster, name), response)

    @api.put("/{cluster}/{name}/start", name="StartService")
    def start(
        request: Request, response: Response, cluster: str, name: str
    ) -> schemas.ServicePublic:
        return public(request, services.set_stopped(cluster, name, False), response)

    @api.put("/{cluster}/{name}/stop", name="StopService")
    def stop(
        request: Request, response: Response, cluster: str, name: str
    ) -> schemas.ServicePublic:
        return public(request, services.set_stopped(cluster, name, True), response)

    @api.put("/{cluster}/{name}/scale", name="ScaleService")
    def scale(
        request: Request, response: Response, cluster: str, name: str, body: ScaleRequest
    ) -> schemas.ServicePublic:
        """Set the instance count (``{"Instance": n}``)."""
        return public(request, services.scale(cluster, name, body.Instance), response)

    @api.post("/{cluster}/{name}/token", name="RotateServiceToken")
    def rotate_token(cluster: str, name: str) -> schemas.TokenPublic:
        """Replace the service token; the old one stops working at the gateway."""
        row, token = services.rotate_token(cluster, name)
        return schemas.TokenPublic(RequestId=_request_id(), ServiceName=row.name, Token=token)

    @api.get("/{cluster}/{name}/token", name="DescribeServiceToken")
    def show_token(cluster: str, name: str) -> schemas.TokenPublic:
        """The service token alone (DescribeService shows it too, to admin and developer
        callers, as EAS does; a list never does)."""
        row, token = services.token(cluster, name)
        return schemas.TokenPublic(RequestId=_request_id(), ServiceName=row.name, Token=token)

    @api.get("/{cluster}/{name}/events", name="DescribeServiceEvent")
    def events(
        cluster: str,
        name: str,
        page_num: Annotated[int, Query(alias="PageNum", ge=1)] = 1,
        page_size: Annotated[int, Query(alias="PageSize", ge=1, le=200)] = 200,
        event_type: Annotated[str | None, Query(alias="EventType", max_length=16)] = None,
        start_time: Annotated[str | None, Query(alias="StartTime", max_length=40)] = None,
        end_time: Annotated[str | None, Query(alias="EndTime", max_length=40)] = None,
        instance: Annotated[str | None, Query(alias="InstanceName", max_length=128)] = None,
    ) -> schemas.EventList:
        """The service's recent events (the last 200), oldest first; ``PageNum`` and
        ``PageSize`` page them; ``EventType`` (Normal, Warning), ``StartTime`` and
        ``EndTime`` (UTC, ``2026-01-02 15:04:05`` or ISO 8601) and ``InstanceName`` (events
        that name it) filter them."""
        since = sdk_query.time(start_time, "StartTime")
        until = sdk_query.time(end_time, "EndTime")
        rows = [
            e
            for e in services.events(cluster, name)
            if event_type in (None, e.type)
            and (since is None or e.created_at >= since)
            and (until is None or e.created_at <= until)
            and (instance is None or instance in e.message)
        ]
        start = (page_num - 1) * page_size
        return schemas.EventList(
            RequestId=_request_id(),
            ServiceName=name,
            Events=[schemas.event_public(e) for e in rows[start : start + page_size]],
            PageNum=page_num,
            TotalCount=len(rows),
            TotalPageNum=eas_shapes.page_count(len(rows), page_size),
        )

    return api


def label_pairs_map(pairs: list[str]) -> dict[str, str]:
    """``["k:v", ...]`` as a map; 422 naming the parameter."""
    out: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition(":")
        if not sep or not key:
            fix = "write label=key:value, e.g. label=team:vision"
            raise InvalidSpec([FieldProblem("label", f"{pair!r} is not key:value", fix)])
        out[key] = value
    return out


def _replacing(spec: dict[str, object], name: str) -> object:
    """A whole new spec as a merge patch function: everything but the name replaced."""

    def replace(_: dict[str, object]) -> dict[str, object]:
        return {"name": name, **{k: v for k, v in spec.items() if k != "name"}}

    if spec.get("name", name) != name:
        raise InvalidSpec(
            [FieldProblem("name", "a service cannot be renamed", f"use {name!r} or omit it")]
        )
    return replace


def _version(if_match: str | None) -> int | None:
    if if_match is None or if_match.strip() == "*":  # "*": any current version (RFC 9110)
        return None
    raw = if_match.strip().removeprefix("W/").strip('"')
    if not raw.isdigit():
        raise InvalidSpec(
            [FieldProblem("If-Match", "expected a ResourceVersion", 'send If-Match: "3"')]
        )
    return int(raw)
