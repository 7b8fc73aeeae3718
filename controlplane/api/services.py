"""REST handlers for ``/api/v2/services``: EAS-shaped paths, admin-authenticated.

Thin: parse, call :class:`controlplane.services.Services`, shape the answer. Errors are raised
as domain exceptions and turned into problem+json by ``controlplane.api.problems``.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from typing import Annotated, Literal

from fastapi import APIRouter, Depends, Header, Query, Request, Response
from fastapi.concurrency import run_in_threadpool
from pydantic import BaseModel, ConfigDict, Field

from controlplane import eas_fields, service_watch
from controlplane.api import schemas
from controlplane.api.auth import authorize
from controlplane.api.problems import json_body
from controlplane.autoscaling import Autoscaling
from controlplane.errors import FieldProblem, InvalidSpec, ServiceNotFound
from controlplane.models import ServiceRow
from controlplane.roles import Principal
from controlplane.services import Services, SortKey
from controlplane.settings import Settings
from controlplane.spec import Autoscaler


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

    def ends(request: Request, name: str) -> schemas.Endpoints:
        own = str(request.base_url).rstrip("/")
        return schemas.endpoints(name, settings.public_base(own), settings.intranet_base(own))

    def public(request: Request, row: ServiceRow, response: Response) -> schemas.ServicePublic:
        response.headers["ETag"] = f'"{row.version}"'
        status = autoscaling.status(row.name) if row.spec.autoscaler else None
        notes = eas_fields.not_honoured(row.spec, settings.runtime)
        return schemas.service_public(row, ends(request, row.name), status, notes)

    @api.post("", status_code=200, openapi_extra=SPEC_BODY, name="CreateService")
    async def create(request: Request) -> schemas.ServiceCreated:
        """Create a service from an EAS spec; answers its endpoints and token."""
        row, token = await run_in_threadpool(services.create, json_body(await request.body()))
        return schemas.ServiceCreated(
            **ends(request, row.name).model_dump(),
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
        page_number: Annotated[int, Query(alias="pageNumber", ge=1)] = 1,
        page_size: Annotated[int, Query(alias="pageSize", ge=1, le=100)] = 20,
        name: Annotated[str | None, Query(max_length=63)] = None,
        status: str | None = None,
        sort: SortKey = "createTime",
        order: Literal["asc", "desc"] = "desc",
        page_token: Annotated[str | None, Query(alias="pageToken", max_length=512)] = None,
        label: Annotated[list[str] | None, Query(max_length=16)] = None,
        label_json: Annotated[str | None, Query(alias="Label", max_length=4096)] = None,
    ) -> schemas.ServiceList:
        """Services of this cluster, paged, filtered by name substring, status and labels
        (``?label=k:v``, repeatable, or ``Label={"k": "v"}`` as EAS's SDK sends it: every
        label must match). Pages by ``pageNumber``, or by ``pageToken`` (the previous page's
        ``NextPageToken``): the latter stays stable while services are created and costs
        the same at any depth. An AccessKey with ``Services`` lists only the names its globs
        match."""
        rows, total, next_token = services.page(
            page=page_number,
            size=page_size,
            name=name,
            status=status,
            labels=label_filter(label or [], label_json),
            sort=sort,
            order=order,
            page_token=page_token,
            globs=principal.services if principal.role != "admin" else None,
        )
        return schemas.ServiceList(
            RequestId=_request_id(),
            TotalCount=total,
            PageNumber=page_number,
            PageSize=page_size,
            Services=[schemas.service_public(r, ends(request, r.name)) for r in rows],
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
        """The service. With `after` (the `X-OpenEAS-State` header of an earlier answer)
        and `wait` (seconds, at most 30), a long-poll: answers as soon as the service
        differs from that state, else after `wait` seconds as it is."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait
        commits = service_watch.SERVICE_COMMITS
        while True:
            seen = commits.count
            row = await run_in_threadpool(services.get, cluster, name)
            body = public(request, row, response)
            state = service_watch.state_digest(body.model_dump_json().encode())
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
    ) -> schemas.ServicePublic:
        """Merge the body (RFC 7386) into the spec. ``If-Match: "<ResourceVersion>"`` makes
        the write conditional (412 when the service changed since it was read)."""
        patch = json_body(await request.body())
        if not isinstance(patch, dict):
            raise InvalidSpec([FieldProblem("body", "expected a JSON object", "send {...}")])
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

    @api.get(
        "/{cluster}/{name}/autoscaler",
        response_model_exclude_none=True,
        name="DescribeServiceAutoScaler",
    )
    def get_autoscaler(cluster: str, name: str) -> Autoscaler:
        """The service's autoscaler (404 when it has none)."""
        auto = services.get(cluster, name).spec.autoscaler
        if auto is None:
            raise ServiceNotFound(
                f"service {name!r} has no autoscaler: set one with "
                f"'eascmd autoscale {name} --min 1 --max 4 --strategy qps=100'"
            )
        return auto

    @api.put(
        "/{cluster}/{name}/autoscaler",
        openapi_extra=_body("Autoscaler"),
        response_model_exclude_none=True,
        name="UpdateServiceAutoScaler",
    )
    async def put_autoscaler(request: Request, cluster: str, name: str) -> Autoscaler:
        """Set or replace the autoscaler (EAS's UpdateServiceAutoscaler); from now on it
        sets ``metadata.instance`` within [min, max]."""
        body = json_body(await request.body())
        row = await run_in_threadpool(services.set_autoscaler, cluster, name, body)
        assert row.spec.autoscaler is not None
        return row.spec.autoscaler

    @api.delete("/{cluster}/{name}/autoscaler", name="DeleteServiceAutoScaler")
    def delete_autoscaler(
        request: Request, response: Response, cluster: str, name: str
    ) -> schemas.ServicePublic:
        """Remove the autoscaler; the instance count stays where it was, set by hand again."""
        return public(request, services.set_autoscaler(cluster, name, None), response)

    @api.post("/{cluster}/{name}/token", name="RotateServiceToken")
    def rotate_token(cluster: str, name: str) -> schemas.TokenPublic:
        """Replace the service token; the old one stops working at the gateway."""
        row, token = services.rotate_token(cluster, name)
        return schemas.TokenPublic(RequestId=_request_id(), ServiceName=row.name, Token=token)

    @api.get("/{cluster}/{name}/token", name="DescribeServiceToken")
    def show_token(cluster: str, name: str) -> schemas.TokenPublic:
        """The explicit admin call that reveals a service's token (never in describe/list)."""
        row, token = services.token(cluster, name)
        return schemas.TokenPublic(RequestId=_request_id(), ServiceName=row.name, Token=token)

    @api.get("/{cluster}/{name}/events", name="DescribeServiceEvent")
    def events(cluster: str, name: str) -> schemas.EventList:
        rows = services.events(cluster, name)
        return schemas.EventList(
            RequestId=_request_id(),
            ServiceName=name,
            Events=[schemas.event_public(e) for e in rows],
        )

    return api


def label_filter(pairs: list[str], as_json: str | None) -> dict[str, str]:
    """``["k:v", ...]`` and ``'{"k": "v"}'`` as one map; 422 naming the parameter."""
    out: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition(":")
        if not sep or not key:
            fix = "write label=key:value, e.g. label=team:vision"
            raise InvalidSpec([FieldProblem("label", f"{pair!r} is not key:value", fix)])
        out[key] = value
    if as_json:
        try:
            given = json.loads(as_json)
        except ValueError:
            given = None
        if not isinstance(given, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in given.items()
        ):
            fix = 'write Label={"key": "value"} (a JSON object of strings)'
            raise InvalidSpec([FieldProblem("Label", "not a JSON object of strings", fix)])
        out.update(given)
    return out


def _version(if_match: str | None) -> int | None:
    if if_match is None or if_match.strip() == "*":  # "*": any current version (RFC 9110)
        return None
    raw = if_match.strip().removeprefix("W/").strip('"')
    if not raw.isdigit():
        raise InvalidSpec(
            [FieldProblem("If-Match", "expected a ResourceVersion", 'send If-Match: "3"')]
        )
    return int(raw)
