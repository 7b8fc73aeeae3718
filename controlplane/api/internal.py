"""Internal endpoints: the route table the gateway watches, its load
reports and wake-ups (these three also open with the gateway's route-reader token), and
replica logs (from the runtime's log source, so any control-plane replica answers)."""

from __future__ import annotations

import asyncio
import functools
import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Coroutine
from typing import Annotated, Any

from fastapi import APIRouter, Depends, HTTPException, Query, Request, Response
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import PlainTextResponse, StreamingResponse
from sqlalchemy.orm import Session, sessionmaker

from contract.wire import (
    ROUTES_PATH,
    SIGNALS_PATH,
    WAKE_PATH,
    LoadReport,
    WakeAnswer,
    WakeRequest,
)
from controlplane.api.auth import authorize
from controlplane.elasticity.scaling_loop import Autoscaling, NotWakeable
from controlplane.runtime.base import LogSource, RuntimeError_
from controlplane.settings import Settings
from controlplane.store import route_feed
from controlplane.store.services import Services

POLL_SECONDS = 0.5  # how soon a change committed by another process is seen


async def _unless_gone(request: Request, waiting: Coroutine[Any, Any, bool]) -> bool:
    """``waiting``'s answer, or False as soon as the client goes away (a gateway's long-poll
    ends with it): told by the server, not found by waking every second to ask."""
    answer = asyncio.ensure_future(waiting)
    gone = asyncio.ensure_future(_disconnect(request))
    try:
        done, _ = await asyncio.wait((answer, gone), return_when=asyncio.FIRST_COMPLETED)
    finally:
        answer.cancel()
        gone.cancel()
    return answer in done and answer.result()


async def _disconnect(request: Request) -> None:
    """Returns with the client's ``http.disconnect`` (its request's own messages, an empty
    body for a GET, come first)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


def router(
    sessions: sessionmaker[Session],
    services: Services,
    settings: Settings,
    log_source: LogSource,
    scaling: Autoscaling,
) -> APIRouter:
    api = APIRouter()
    # The route-reader token opens the gateway's three calls only (controlplane.model.roles).
    admin = route_reader = [Depends(authorize)]

    watch = route_feed.VersionWatch(sessions, POLL_SECONDS)

    @api.get(
        ROUTES_PATH,
        tags=["internal"],
        response_model=None,
        dependencies=route_reader,
        name="GetRouteTable",
    )
    async def route_table(
        request: Request,
        after: Annotated[int, Query(ge=-1)] = -1,
        wait: Annotated[float, Query(ge=0, le=60)] = 0,
        page_size: Annotated[int | None, Query(ge=1, le=route_feed.PAGE_SIZE_MAX)] = None,
        page: Annotated[str | None, Query(max_length=64)] = None,
    ) -> Response:
        """The gateway's route table: the changes after version ``after`` (a whole table
        without one). With ``wait`` it is a long-poll: answered at once when the version
        differs from ``after``, else 204 after ``wait`` seconds. With ``page_size`` a whole
        table comes in pages: ``page`` (a page's ``next_page``) asks for the next one, at
        once (``after`` and ``wait`` unused)."""
        if page is not None:
            try:
                route_feed.parse_page(page)
            except ValueError as e:
                raise HTTPException(400, str(e)) from e
        elif not await _unless_gone(request, watch.wait_past(after, wait)):
            return Response(status_code=204)
        table = await run_in_threadpool(
            functools.partial(
                route_feed.table,
                sessions,
                settings.cluster_id,
                settings.default_timeout_ms,
                after,
                services.sealer.open,
                page_size=page_size,
                page=page,
            )
        )
        # A contract.wire.RouteTable, serialized by pydantic itself: FastAPI's encoder walks
        # a returned model field by field, which cost more than reading the rows.
        return Response(table.model_dump_json(), media_type="application/json")

    @api.post(
        SIGNALS_PATH,
        tags=["internal"],
        status_code=204,
        dependencies=route_reader,
        name="ReportLoad",
    )
    def load_report(report: LoadReport) -> Response:
        """A gateway process's per-service load for the autoscaler, sent with the gateway's
        own credential (the route-reader token, or the admin token). 421 from a control
        plane that does not lead: the gateway reconnects and reaches another."""
        _leading(scaling)
        scaling.signals.receive(report)
        return Response(status_code=204)

    @api.post(WAKE_PATH, tags=["internal"], dependencies=route_reader, name="WakeService")
    async def wake(request: WakeRequest) -> WakeAnswer:
        """A gateway holds requests for a service at zero: scale it to its
        ``scaleUpActivationReplicas`` at once (the autoscaler's write, a ``Woken`` event).
        409 when the service does not scale to zero (no autoscaler with min 0, stopped);
        421 from a control plane that does not lead, as for load reports."""
        _leading(scaling)
        try:
            instances = await scaling.wake(request.service)
        except NotWakeable as e:
            raise HTTPException(409, str(e)) from e
        return WakeAnswer(service=request.service, instances=instances)

    @api.get(
        "/api/v2/services/{cluster}/{name}/logs",
        tags=["services"],
        dependencies=admin,
        name="DescribeServiceLog",
        response_model=None,
    )
    async def logs(
        request: Request,
        cluster: str,
        name: str,
        replica: int | None = None,
        tail: Annotated[int, Query(ge=1, le=10_000)] = 200,
        instance: Annotated[str | None, Query(alias="InstanceName", max_length=128)] = None,
        page_num: Annotated[int, Query(alias="PageNum", ge=1)] = 1,
        page_size: Annotated[int | None, Query(alias="PageSize", ge=1, le=10_000)] = None,
        keyword: Annotated[str | None, Query(alias="Keyword", max_length=256)] = None,
        previous: bool = False,
        follow: bool = False,
    ) -> Response | dict[str, Any]:
        """A replica's recent output (``replica`` as shown by describe, or ``InstanceName``;
        default the newest): plain text, or, to a caller that accepts JSON (the SDK), the
        SDK's shape: ``Logs`` (lines, newest last, those with ``Keyword`` when given),
        paged by ``PageNum``/``PageSize`` from the newest. ``previous``: its run before the
        last restart (a crash's last words). ``follow``: then what it writes, streamed as
        text until the caller hangs up or the replica ends."""
        await run_in_threadpool(services.get, cluster, name)  # 404 for unknown services
        if instance is not None:
            replica = _replica_index(instance)
        if previous and follow:
            raise HTTPException(
                400, "previous and follow exclude each other: a previous run writes no more"
            )
        try:
            if follow:
                chunks = log_source.follow(name, replica, tail)
                first = await anext(chunks, "")  # a missing replica is a 404, not a stream
                return StreamingResponse(
                    _then(first, chunks), media_type="text/plain; charset=utf-8"
                )
            count = page_size * page_num if page_size else tail
            text = await log_source.logs(name, replica, count, previous=previous)
            if "application/json" not in request.headers.get("accept", ""):
                return PlainTextResponse(text)
            lines = [ln for ln in text.splitlines() if keyword is None or keyword in ln]
            size = page_size or max(len(lines), 1)
            end = len(lines) - (page_num - 1) * size
            return {
                "RequestId": str(uuid.uuid4()).upper(),
                "ServiceName": name,
                "Logs": lines[max(0, end - size) : max(0, end)],
                "PageNum": page_num,
                "TotalCount": len(lines),
                "TotalPageNum": max(1, -(-len(lines) // size)),
            }
        except FileNotFoundError as e:
            raise HTTPException(404, str(e)) from e
        except RuntimeError_ as e:  # the cluster's API cannot be reached
            raise HTTPException(503, f"replica logs are unavailable: {e}") from e

    return api


def _replica_index(instance: str) -> int:
    """A replica's log index from its instance name (``<service>-<index>``)."""
    index = instance.rsplit("-", 1)[-1]
    if not index.isdigit():
        raise HTTPException(404, f"no instance {instance!r}: name one from ListServiceInstances")
    return int(index)


async def _then(first: str, rest: AsyncIterator[str]) -> AsyncIterator[str]:
    try:
        yield first
        async for chunk in rest:
            yield chunk
    finally:
        if isinstance(rest, AsyncGenerator):
            await rest.aclose()  # the caller hung up: close the replica's stream too


def _leading(scaling: Autoscaling) -> None:
    if not scaling.signals.leading:
        raise HTTPException(
            421,
            "this control plane does not lead the autoscaler: send to another replica",
            headers={"Connection": "close"},
        )
