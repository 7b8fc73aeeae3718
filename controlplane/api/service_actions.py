"""REST handlers for the EAS SDK's service actions beyond create/describe/list/update:
restarts, endpoints, instances, diagnosis, versions, labels, the safety lock and clones.
Admin-authenticated; each route named after its SDK action; answers in the SDK's shapes
(``controlplane.api.eas_shapes``).
"""

from __future__ import annotations

import uuid
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request
from fastapi.concurrency import run_in_threadpool
from pydantic import BaseModel, ConfigDict, Field

from contract.merge import merge_patch
from controlplane.api import eas_shapes, sdk_query
from controlplane.api.auth import authorize
from controlplane.api.endpoints import endpoints_of
from controlplane.api.problems import json_body
from controlplane.api.visibility import sees_token
from controlplane.model.errors import FieldProblem, InvalidSpec, ServiceNotFound
from controlplane.model.paging import MAX_PAGE_NUMBER
from controlplane.settings import Settings
from controlplane.store import safety_lock
from controlplane.store.services import Services

PREFIX = "/api/v2/services/{cluster}/{name}"


def _request_id() -> str:
    return str(uuid.uuid4()).upper()


def _done(message: str) -> dict[str, str]:
    return {"RequestId": _request_id(), "Message": message}


class VersionRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    Version: int = Field(ge=1)


class LabelRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    Labels: dict[str, Any]


class LockRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    Lock: safety_lock.Level


def router(services: Services, settings: Settings) -> APIRouter:
    api = APIRouter(
        prefix=PREFIX,
        tags=["services"],
        dependencies=[Depends(authorize)],
    )

    @api.put("/restart", name="RestartService")
    def restart(cluster: str, name: str) -> dict[str, str]:
        """Roll every replica: a new one comes up before an old one goes."""
        services.restart(cluster, name)
        return _done(f"service {name!r} is restarting")

    @api.get("/endpoints", name="DescribeServiceEndpoints")
    def endpoints(request: Request, cluster: str, name: str) -> dict[str, Any]:
        """Where to call the service: the gateway's Internet and intranet endpoints, and
        the token for callers that may see it."""
        row = services.get(cluster, name)
        found = endpoints_of(settings, request, row.name)
        answer: dict[str, Any] = {
            "RequestId": _request_id(),
            "Message": "",
            "Endpoints": eas_shapes.endpoints(found.InternetEndpoint, found.IntranetEndpoint),
        }
        if sees_token(request):
            answer["AccessToken"] = services.sealer.open(row.token)
        return answer

    @api.get("/instances", name="ListServiceInstances")
    def instances(
        cluster: str,
        name: str,
        page_number: Annotated[int, Query(alias="PageNumber", ge=1, le=MAX_PAGE_NUMBER)] = 1,
        page_size: Annotated[int, Query(alias="PageSize", ge=1, le=500)] = 100,
        status: Annotated[str | None, Query(alias="InstanceStatus", max_length=32)] = None,
        instance: Annotated[str | None, Query(alias="InstanceName", max_length=128)] = None,
    ) -> dict[str, Any]:
        """The service's replicas as the reconciler last saw them; ``Status`` "Running"
        when ready to serve."""
        row = services.get(cluster, name)
        found = [
            eas_shapes.instance(r, row.created_at)
            for r in row.replicas or []
            if status in (None, r.get("state")) and instance in (None, r.get("name"))
        ]
        start = (page_number - 1) * page_size
        return {
            "RequestId": _request_id(),
            "PageNumber": page_number,
            "PageSize": page_size,
            "TotalCount": len(found),
            "Instances": found[start : start + page_size],
        }

    @api.delete("/instances", name="DeleteServiceInstances")
    def delete_instances(
        cluster: str,
        name: str,
        instance_list: Annotated[str | None, Query(alias="InstanceList", max_length=8192)] = None,
    ) -> dict[str, str]:
        """Restart the named instances (``InstanceList``, comma-separated): each is replaced
        as an update replaces replicas, a new one up before the old one goes."""
        wanted = sdk_query.names(instance_list, "InstanceList")
        if not wanted:
            raise InvalidSpec(
                [
                    FieldProblem(
                        "InstanceList",
                        "name the instances to restart",
                        "see ListServiceInstances for their names",
                    )
                ]
            )
        row = services.get(cluster, name)
        known = {r["name"] for r in row.replicas or []}
        unknown = [w for w in wanted if w not in known]
        if unknown:
            raise ServiceNotFound(
                f"service {name!r} has no instance {', '.join(unknown)}: it has "
                f"{', '.join(sorted(known)) or 'none'} (ListServiceInstances)"
            )
        services.restart_instances(cluster, name, wanted)
        return _done(f"instance(s) {', '.join(wanted)} of service {name!r} are restarting")

    @api.get("/diagnosis", name="DescribeServiceDiagnosis")
    def diagnosis(cluster: str, name: str) -> dict[str, Any]:
        """Why the service is not running, from its status, replicas and warning events;
        an empty list while it runs."""
        row = services.get(cluster, name)
        events = services.events(cluster, name, limit=50)
        return {
            "RequestId": _request_id(),
            "ServiceName": name,
            "Status": row.status,
            "DiagnosisList": eas_shapes.diagnosis(row, events),
        }

    @api.get("/versions", name="ListServiceVersions")
    def versions(
        cluster: str,
        name: str,
        page_number: Annotated[int, Query(alias="PageNumber", ge=1, le=MAX_PAGE_NUMBER)] = 1,
        page_size: Annotated[int, Query(alias="PageSize", ge=1, le=100)] = 100,
    ) -> dict[str, Any]:
        """Every version of the spec, newest first (``ImageId`` is the version number):
        one per update that changed what replicas run."""
        row, found = services.versions(cluster, name)
        start = (page_number - 1) * page_size
        return {
            "RequestId": _request_id(),
            "PageNumber": page_number,
            "PageSize": page_size,
            "TotalCount": len(found),
            "Versions": [
                eas_shapes.version(v, row.current_version) for v in found[start : start + page_size]
            ],
        }

    @api.put("/version", name="UpdateServiceVersion")
    def update_version(cluster: str, name: str, body: VersionRequest) -> dict[str, str]:
        """Run the spec of version ``Version`` again (ListServiceVersions' ``ImageId``)."""
        services.use_version(cluster, name, body.Version)
        return _done(f"service {name!r} is deploying version {body.Version}")

    @api.put("/label", name="UpdateServiceLabel")
    def update_labels(cluster: str, name: str, body: LabelRequest) -> dict[str, str]:
        """Add or replace labels (``{"Labels": {"key": "value"}}``); others stay."""
        services.set_labels(cluster, name, sdk_query.label_map(body.Labels))
        return _done(f"labels of service {name!r} updated")

    @api.delete("/label", name="DeleteServiceLabel")
    def delete_labels(
        cluster: str,
        name: str,
        keys: Annotated[str | None, Query(alias="Keys", max_length=4096)] = None,
    ) -> dict[str, str]:
        """Remove the labels named in ``Keys`` (comma-separated)."""
        wanted = sdk_query.names(keys, "Keys")
        if not wanted:
            raise InvalidSpec([FieldProblem("Keys", "name the labels to remove", "Keys=a,b")])
        services.delete_labels(cluster, name, wanted)
        return _done(f"labels {', '.join(wanted)} of service {name!r} removed")

    @api.put("/lock", name="UpdateServiceSafetyLock")
    def lock(cluster: str, name: str, body: LockRequest) -> dict[str, str]:
        """``Lock``: ``all`` refuses every change but this one, ``dangerous`` refuses
        deletes, stops, restarts, version changes and removing scalers, ``none`` nothing."""
        services.set_lock(cluster, name, body.Lock)
        return _done(f"safety lock of service {name!r} set to {body.Lock}")

    @api.post("/clone", name="CloneService")
    async def clone(
        request: Request,
        cluster: str,
        name: str,
        labels: Annotated[str | None, Query(alias="Labels", max_length=8192)] = None,
    ) -> dict[str, Any]:
        """A new service with this one's spec, the body (JSON merge patch, at least its new
        ``name``) applied; its own token (the source's is not copied), labels from
        ``Labels`` or else the source's."""
        source = await run_in_threadpool(services.get, cluster, name)
        raw = await request.body()
        patch = json_body(raw) if raw.strip() else {}
        if not isinstance(patch, dict) or not patch.get("name"):
            raise InvalidSpec(
                [FieldProblem("name", "a clone needs its own name", 'send {"name": "<new>"}')]
            )
        spec = merge_patch(source.spec.public(), patch)
        tags = sdk_query.label_map(labels) if labels else source.labels
        row, _ = await run_in_threadpool(services.create, spec, tags)
        found = endpoints_of(settings, request, row.name)
        return {
            "RequestId": _request_id(),
            "ServiceId": row.uid,
            "ServiceName": row.name,
            "Status": row.status,
            "Region": row.cluster,
            "InternetEndpoint": found.InternetEndpoint,
            "IntranetEndpoint": found.IntranetEndpoint,
        }

    return api
