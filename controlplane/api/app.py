"""The control plane's ASGI app: services API, health, metrics, OpenAPI. Built by
``openeas controlplane`` and by ``openeas up`` from one Settings object."""

from __future__ import annotations

import asyncio
import shutil
from typing import Any

from fastapi import FastAPI, Response
from fastapi.openapi.utils import get_openapi
from sqlalchemy import Engine, select, text

from controlplane import metrics as metrics_mod
from controlplane.api import (
    auth,
    console_routes,
    identities,
    internal,
    problems,
    regions,
    scalers,
    service_actions,
)
from controlplane.api import groups as groups_api
from controlplane.api import services as services_api
from controlplane.elasticity.queues import Backlog
from controlplane.elasticity.scaling_loop import Autoscaling
from controlplane.model.errors import FieldProblem
from controlplane.model.spec import Check, ServiceSpec
from controlplane.runtime import make_log_source
from controlplane.runtime.base import LogSource
from controlplane.settings import Settings
from controlplane.store import route_feed, sealing
from controlplane.store.accesskeys import AccessKeys
from controlplane.store.audit import AuditTrail
from controlplane.store.db import make_sessions
from controlplane.store.groups import Groups
from controlplane.store.services import Services
from controlplane.store.tables import ServiceRow


def deployment_checks(settings: Settings) -> list[Check]:
    """Spec checks that depend on where replicas run (a 4xx at create time, not a Failed
    service later)."""
    if settings.runtime != "kubernetes":
        return [local_checks]
    from controlplane.runtime.kubernetes.manifests import check_resource_group

    def resource_group(spec: ServiceSpec) -> list[FieldProblem]:
        problem = check_resource_group(spec.metadata.resource, settings.k8s)
        fix = "use one of the resource groups configured in OPENEAS_K8S_RESOURCE_GROUPS"
        return [FieldProblem("metadata.resource", problem, fix)] if problem else []

    return [resource_group, image_warm_up]


def image_warm_up(spec: ServiceSpec) -> list[FieldProblem]:
    """On Kubernetes a container's image runs its own server, without the processor that
    replays warm-up requests: refused rather than dropped."""
    if not (spec.containers and spec.warm_up_data_path):
        return []
    return [
        FieldProblem(
            "warm_up_data_path",
            "on Kubernetes a containers[] image serves by itself, and nothing in it replays "
            "warm-up requests",
            'use "processor": "triton" with processor_params for a warm-up, or remove '
            "warm_up_data_path",
        )
    ]


def local_checks(spec: ServiceSpec) -> list[FieldProblem]:
    """What the local runtime cannot run: NFS mounts, and a container that is not Triton
    whose program is not on this machine's PATH (it runs no images)."""
    problems = [
        FieldProblem(
            f"storage[{i}].nfs",
            "the local runtime mounts no NFS share",
            "deploy on the kubernetes runtime, or copy the files to OSS and mount that",
        )
        for i, entry in enumerate(spec.storage or [])
        if entry.nfs is not None
    ]
    for i, container in enumerate((spec.containers or [])[:1]):  # the others: Kubernetes only
        argv = container.argv
        if container.runs_triton or (argv and shutil.which(argv[0])):
            continue
        program = argv[0] if argv else "(no command)"
        problems.append(
            FieldProblem(
                f"containers[{i}].image",
                f"the local runtime runs no images, so {container.image!r} cannot run here, "
                f"and its command's program {program!r} is not on this machine's PATH",
                "deploy on the kubernetes runtime, install the program locally, or run "
                "tritonserver (a Triton container runs through the local Triton processor)",
            )
        )
    return problems


def create_app(
    settings: Settings,
    engine: Engine,
    log_source: LogSource | None = None,
    autoscaling: Autoscaling | None = None,
    metrics: metrics_mod.ControlPlaneMetrics | None = None,
) -> FastAPI:
    app = FastAPI(
        title="OpenEAS control plane",
        version="0.1.0",
        description="EAS-compatible service management for NVIDIA Triton.",
    )
    problems.install(app)
    sessions = make_sessions(engine)
    sealer = sealing.from_settings(settings.secret_key, settings.data_dir)
    keys = AccessKeys(sessions, sealer)
    trail = AuditTrail(sessions, settings.audit_retention_days)
    auth.install(app, auth.Authenticator(settings.admin_token, settings.routes_token, keys), trail)
    app.include_router(identities.router(keys, trail))
    services = Services(
        sessions, settings.cluster_id, sealer, deployment_checks(settings), settings.runtime
    )
    # Without a reconciler in this process nothing leads: load reports are answered 421.
    backlog = Backlog(settings.redis_url) if settings.redis_url else None
    scaling = autoscaling or Autoscaling(sessions, services, backlog=backlog)
    app.include_router(services_api.router(services, settings, scaling))
    app.include_router(scalers.router(services, settings, scaling))
    app.include_router(service_actions.router(services, settings))
    app.include_router(regions.router(settings))
    groups = Groups(sessions, settings.cluster_id, sealer)
    app.include_router(groups_api.router(groups, services, settings))
    logs = log_source or make_log_source(settings)
    app.include_router(internal.router(sessions, services, settings, logs, scaling))

    app.include_router(console_routes.router(services, settings, scaling.signals))

    metrics = metrics or metrics_mod.ControlPlaneMetrics()
    app.add_middleware(metrics_mod.ApiTimer, metrics=metrics)
    cluster = settings.cluster_id

    def service_rows() -> list[metrics_mod.ServiceRow]:
        with sessions() as s:
            found = s.execute(
                select(
                    ServiceRow.name,
                    ServiceRow.status,
                    ServiceRow.total_instances,
                    ServiceRow.running_instances,
                ).where(ServiceRow.cluster == cluster)
            )
            return [metrics_mod.ServiceRow(*row) for row in found]

    def route_version() -> int:
        with sessions() as s:
            return route_feed.version(s)

    metrics.probe.services = lambda: asyncio.to_thread(service_rows)
    metrics.probe.route_version = lambda: asyncio.to_thread(route_version)

    @app.get("/metrics", tags=["health"], name="Metrics", include_in_schema=False)
    async def metrics_page() -> Response:
        return Response(await metrics.render(), media_type=metrics_mod.CONTENT_TYPE)

    @app.get("/healthz", tags=["health"], name="Healthz")
    def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/readyz", tags=["health"], name="Readyz")
    def readyz() -> Any:
        try:
            with engine.connect() as conn:
                conn.execute(text("SELECT 1"))
        except Exception as e:
            return problems.problem(503, "Not ready", f"database unreachable: {type(e).__name__}")
        return {"status": "ready", "database": engine.dialect.name}

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = get_openapi(title=app.title, version=app.version, routes=app.routes)
            spec = ServiceSpec.model_json_schema(ref_template="#/components/schemas/{model}")
            components = schema.setdefault("components", {}).setdefault("schemas", {})
            components.update(spec.pop("$defs", {}))
            components["ServiceSpec"] = spec
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
    return app
