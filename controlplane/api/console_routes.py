"""The web console's routes: its static files (``controlplane/console_assets/``: one page,
one script, one stylesheet, nothing fetched from elsewhere) and the one call it needs beyond
the services API, a service's traffic over the last hour for its charts."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Annotated

from fastapi import APIRouter, Depends, HTTPException, Query
from fastapi.responses import Response
from pydantic import BaseModel

from controlplane.api.auth import authorize
from controlplane.elasticity.load_reports import LoadReports
from controlplane.elasticity.metrics_history import POINTS, STEP_S
from controlplane.settings import Settings
from controlplane.store.services import Services

FILES = Path(__file__).resolve().parents[1] / "console_assets"
# The whole console; read once, so a request can name nothing else.
ASSETS = {
    "index.html": "text/html; charset=utf-8",
    "console.js": "text/javascript; charset=utf-8",
    "console.css": "text/css; charset=utf-8",
}
# Only this origin's script, style and API; no inline script, no framing.
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)


class MetricPoint(BaseModel):
    Time: float  # start of the step, Unix seconds
    RequestsPerSecond: float
    ErrorsPerSecond: float  # answered with a 5xx
    LatencyP50Ms: float | None  # None: nothing answered in the step
    LatencyP99Ms: float | None
    Replicas: int | None  # ready replicas; None: not known yet
    # An async service's messages not yet answered (read while it has an autoscaler).
    Backlog: int | None = None


class ServiceMetrics(BaseModel):
    RequestId: str
    ServiceName: str
    StepSeconds: int
    # False: this control plane does not lead, and the gateways report to the one that does.
    Leading: bool
    Points: list[MetricPoint]


def router(services: Services, settings: Settings, signals: LoadReports) -> APIRouter:
    api = APIRouter()
    assets = {name: (FILES / name).read_bytes() for name in ASSETS}

    def serve(name: str) -> Response:
        headers = {"Content-Security-Policy": CSP, "Cache-Control": "no-cache"}
        return Response(assets[name], media_type=ASSETS[name], headers=headers)

    @api.get("/", include_in_schema=False, name="Console")
    def index() -> Response:
        """The console (it asks for the admin token and keeps it in the tab only)."""
        return serve("index.html")

    @api.get("/console/{name}", include_in_schema=False, name="ConsoleAsset")
    def asset(name: str) -> Response:
        if name not in assets:
            raise HTTPException(404, f"no console file {name!r}")
        return serve(name)

    @api.get(
        "/api/v2/services/{cluster}/{name}/metrics",
        tags=["services"],
        dependencies=[Depends(authorize)],
        name="DescribeServiceMetrics",
    )
    def metrics(
        cluster: str,
        name: str,
        window: Annotated[int, Query(ge=STEP_S, le=STEP_S * POINTS)] = 3600,
    ) -> ServiceMetrics:
        """The service's traffic through the gateways over the last ``window`` seconds, one
        point per ``StepSeconds``: requests/s, 5xx/s, p50/p99 latency as the gateway saw it,
        and ready replicas. Kept in memory by the leading control plane (an hour at most)."""
        row = services.get(cluster, name)  # 404 for unknown services
        samples = signals.history.samples(row.name, window, row.running_instances)
        return ServiceMetrics(
            RequestId=str(uuid.uuid4()).upper(),
            ServiceName=row.name,
            StepSeconds=STEP_S,
            Leading=signals.leading,
            Points=[
                MetricPoint(
                    Time=s.time,
                    RequestsPerSecond=round(s.requests_per_s, 3),
                    ErrorsPerSecond=round(s.errors_per_s, 3),
                    LatencyP50Ms=None if s.p50_ms is None else round(s.p50_ms, 3),
                    LatencyP99Ms=None if s.p99_ms is None else round(s.p99_ms, 3),
                    Replicas=s.replicas,
                    Backlog=s.backlog,
                )
                for s in samples
            ],
        )

    return api
