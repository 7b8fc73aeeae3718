"""A service's or group's endpoints as the caller reached this API: the gateway's public
and intranet bases (``OPENEAS_PUBLIC_URL``/``OPENEAS_INTRANET_URL``, else this request's
own base URL) followed by ``/api/predict/<name>``. Shared by every route that answers them."""

from __future__ import annotations

from fastapi import Request

from controlplane.api import schemas
from controlplane.settings import Settings


def endpoints_of(settings: Settings, request: Request, name: str) -> schemas.Endpoints:
    own = str(request.base_url).rstrip("/")
    return schemas.endpoints(name, settings.public_base(own), settings.intranet_base(own))
