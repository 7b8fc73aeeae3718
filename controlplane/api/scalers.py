"""REST handlers for a service's scalers: the autoscaler (EAS's
Create/Describe/Update/DeleteServiceAutoScaler, ``/autoscaler``) and the scheduled scaler
(Create/Describe/Update/DeleteServiceCronScaler, ``/cronscaler``). Admin-authenticated;
each route named after its SDK action.

Answers carry the SDK's fields (``MinReplica``/``MaxReplica``, ``ScaleJobs``...) beside the
spec's own (``min``/``max``...), which ``eascmd`` and the console read.
"""

from __future__ import annotations

import uuid
from typing import Any

from fastapi import APIRouter, Depends, Request, Response
from fastapi.concurrency import run_in_threadpool

from controlplane.api import eas_shapes, schemas
from controlplane.api.auth import authorize
from controlplane.api.endpoints import endpoints_of
from controlplane.api.problems import json_body
from controlplane.elasticity.scaling_loop import Autoscaling
from controlplane.model import cron_schedule
from controlplane.model.errors import FieldProblem, InvalidSpec, ServiceNotFound
from controlplane.settings import Settings
from controlplane.store.services import Services

PREFIX = "/api/v2/services/{cluster}/{name}"


def _body(schema: str) -> dict[str, object]:
    content = {"application/json": {"schema": {"$ref": f"#/components/schemas/{schema}"}}}
    return {"requestBody": {"required": True, "content": content}}


def _request_id() -> str:
    return str(uuid.uuid4()).upper()


def sdk_autoscaler(body: Any, name: str) -> Any:
    """The autoscaler as the SDK sends it: each strategy may name its ``service`` (this
    one; OpenEAS scales a service on its own metrics only), dropped before validation."""
    if not isinstance(body, dict) or not isinstance(body.get("scaleStrategies"), list):
        return body
    strategies = []
    for i, strategy in enumerate(body["scaleStrategies"]):
        if isinstance(strategy, dict) and "service" in strategy:
            strategy = dict(strategy)
            other = strategy.pop("service")
            if other not in (name, "", None):
                raise InvalidSpec(
                    [
                        FieldProblem(
                            f"scaleStrategies[{i}].service",
                            f"a service scales on its own metrics, not {other!r}'s",
                            f"omit it or name {name!r}",
                        )
                    ]
                )
        strategies.append(strategy)
    return {**body, "scaleStrategies": strategies}


def router(services: Services, settings: Settings, autoscaling: Autoscaling) -> APIRouter:
    api = APIRouter(
        prefix=PREFIX,
        tags=["services"],
        dependencies=[Depends(authorize)],
    )

    @api.get("/autoscaler", name="DescribeServiceAutoScaler")
    def get_autoscaler(cluster: str, name: str) -> dict[str, Any]:
        """The service's autoscaler (404 when it has none): ``min``/``max``/
        ``scaleStrategies``/``behavior`` as set, and the SDK's ``MinReplica``/``MaxReplica``/
        ``ScaleStrategies``/``Behavior``/``CurrentMetrics``."""
        auto = services.get(cluster, name).spec.autoscaler
        if auto is None:
            raise ServiceNotFound(
                f"service {name!r} has no autoscaler: set one with "
                f"'eascmd autoscale {name} --min 1 --max 4 --strategy qps=100'"
            )
        return {
            "RequestId": _request_id(),
            **eas_shapes.autoscaler(name, auto, autoscaling.status(name)),
        }

    async def set_autoscaler(request: Request, cluster: str, name: str, action: str) -> Any:
        body = sdk_autoscaler(json_body(await request.body()), name)
        row = await run_in_threadpool(services.set_autoscaler, cluster, name, body, action)
        assert row.spec.autoscaler is not None
        return {
            "RequestId": _request_id(),
            "Message": f"autoscaler of service {name!r} set",
            **row.spec.autoscaler.model_dump(exclude_none=True),
        }

    @api.put("/autoscaler", openapi_extra=_body("Autoscaler"), name="UpdateServiceAutoScaler")
    async def put_autoscaler(request: Request, cluster: str, name: str) -> Any:
        """Set or replace the autoscaler; from now on it sets ``metadata.instance`` within
        [min, max]. Answers the autoscaler as stored."""
        return await set_autoscaler(request, cluster, name, "UpdateServiceAutoScaler")

    @api.post("/autoscaler", openapi_extra=_body("Autoscaler"), name="CreateServiceAutoScaler")
    async def post_autoscaler(request: Request, cluster: str, name: str) -> Any:
        """As UpdateServiceAutoScaler (one that exists is replaced)."""
        return await set_autoscaler(request, cluster, name, "CreateServiceAutoScaler")

    @api.delete("/autoscaler", name="DeleteServiceAutoScaler")
    def delete_autoscaler(
        request: Request, response: Response, cluster: str, name: str
    ) -> schemas.ServicePublic:
        """Remove the autoscaler; the instance count stays where it was, set by hand again."""
        row = services.set_autoscaler(cluster, name, None)
        response.headers["ETag"] = f'"{row.version}"'
        return schemas.service_public(row, endpoints_of(settings, request, row.name))

    @api.get("/cronscaler", name="DescribeServiceCronScaler")
    def get_cron(cluster: str, name: str) -> dict[str, Any]:
        """The scheduled scaler: its jobs with their last run (404 when it has none)."""
        row = services.get(cluster, name)
        if row.cron_scaler is None:
            raise ServiceNotFound(
                f"service {name!r} has no scheduled scaler: set one with "
                f"'eascmd cronscale {name} -s cronscale.json'"
            )
        return {
            "RequestId": _request_id(),
            **eas_shapes.cron_scaler(name, row.cron_scaler, row.updated_at),
        }

    async def set_cron(request: Request, cluster: str, name: str, action: str) -> Any:
        scaler = cron_schedule.parse(json_body(await request.body()))
        await run_in_threadpool(services.set_cron_scaler, cluster, name, scaler, action)
        jobs = len(scaler["ScaleJobs"])
        return {
            "RequestId": _request_id(),
            "Message": f"scheduled scaler of service {name!r} set with {jobs} job(s)",
            **scaler,
        }

    cron_doc = (
        "Set the scheduled scaler: ``ScaleJobs`` [{Name, Schedule (6-field cron, seconds "
        "first), TargetSize, TimeZone (IANA, default UTC)}] and ``ExcludeDates`` (cron "
        "expressions of times no job runs). A job sets the instance count, or beside an "
        "autoscaler its range: ``min`` becomes TargetSize (``max`` too when below it). "
        "Replaces what was set."
    )

    @api.post("/cronscaler", name="CreateServiceCronScaler", description=cron_doc)
    async def post_cron(request: Request, cluster: str, name: str) -> Any:
        return await set_cron(request, cluster, name, "CreateServiceCronScaler")

    @api.put("/cronscaler", name="UpdateServiceCronScaler", description=cron_doc)
    async def put_cron(request: Request, cluster: str, name: str) -> Any:
        return await set_cron(request, cluster, name, "UpdateServiceCronScaler")

    @api.delete("/cronscaler", name="DeleteServiceCronScaler")
    def delete_cron(cluster: str, name: str) -> dict[str, str]:
        """Remove the scheduled scaler; the instance count stays where it was."""
        services.set_cron_scaler(cluster, name, None, "DeleteServiceCronScaler")
        return {
            "RequestId": _request_id(),
            "Message": f"scheduled scaler of service {name!r} removed",
        }

    return api
