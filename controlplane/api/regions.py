"""DescribeRegions: the EAS SDK's ``region_id`` is OpenEAS's cluster id, so the one region
this control plane serves is its cluster. Admin-authenticated."""

from __future__ import annotations

import uuid
from typing import Any

from fastapi import APIRouter, Depends

from controlplane.api.auth import authorize
from controlplane.settings import Settings


def router(settings: Settings) -> APIRouter:
    api = APIRouter(tags=["regions"], dependencies=[Depends(authorize)])

    @api.get("/api/v2/regions", name="DescribeRegions")
    def regions() -> dict[str, Any]:
        """This control plane's cluster, as the SDK's region (``RegionId``: pass it as
        ``Config(region_id=...)`` and as every call's ``ClusterId``)."""
        cluster = settings.cluster_id
        return {
            "RequestId": str(uuid.uuid4()).upper(),
            "Regions": [{"RegionId": cluster, "RegionName": f"OpenEAS cluster {cluster}"}],
        }

    return api
