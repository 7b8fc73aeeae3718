"""The control plane's ASGI app: services API, health, OpenAPI. Built by
``openeas controlplane`` and by ``openeas up`` from one Settings object."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from sqlalchemy import Engine, text

from controlplane.api import problems
from controlplane.api import services as services_api
from controlplane.db import make_sessions
from controlplane.services import Services
from controlplane.settings import Settings
from controlplane.spec import ServiceSpec


def create_app(settings: Settings, engine: Engine) -> FastAPI:
    app = FastAPI(
        title="OpenEAS control plane",
        version="0.1.0",
        description="EAS-compatible service management for NVIDIA Triton.",
    )
    problems.install(app)
    services = Services(make_sessions(engine), settings.cluster_id)
    app.state.services = services
    app.include_router(services_api.router(services, settings))

    @app.get("/healthz", tags=["health"])
    def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/readyz", tags=["health"])
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
