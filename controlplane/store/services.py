"""Service operations on the database: what each API call does to a stored service.

Called by the REST handlers (one session per request) and, for status, by the reconciler.
Each operation is one transaction; concurrent writers are serialised by the row's
``version`` (optimistic concurrency) and retried here, so no write is ever lost.
"""

from __future__ import annotations

import secrets
import uuid
from collections.abc import Callable, Sequence
from typing import Any, Literal

from sqlalchemy import Select, false, func, insert, literal, or_, select, tuple_
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, sessionmaker
from sqlalchemy.orm.exc import StaleDataError

from contract.merge import merge_patch
from contract.wire import token_digest
from controlplane.model import eas_spec, paging
from controlplane.model.eas_fields import Runtime, not_honoured
from controlplane.model.errors import (
    Conflict,
    FieldProblem,
    InvalidSpec,
    PreconditionFailed,
    ServiceExists,
    ServiceNotFound,
    TokenInUse,
)
from controlplane.model.roles import like_pattern
from controlplane.model.spec import Check, Mirror, StoredSpec, split_token, validate_spec
from controlplane.store import groups, queries, route_feed, safety_lock, service_watch
from controlplane.store.db import read_sessions
from controlplane.store.sealing import TokenSealer
from controlplane.store.tables import EventRow, ServiceRow, ServiceVersionRow, utcnow

SortKey = Literal["name", "createTime", "updateTime", "status"]
_SORT_COLUMNS = {
    "name": ServiceRow.name,
    "createTime": ServiceRow.created_at,
    "updateTime": ServiceRow.updated_at,
    "status": ServiceRow.status,
}
_RETRIES = 8
_INSERT_SERVICE = insert(ServiceRow.metadata.tables["services"]).returning(
    ServiceRow.metadata.tables["services"].c.id
)
_INSERT_EVENT = insert(EventRow.metadata.tables["service_events"])
_INSERT_VERSION = insert(EventRow.metadata.tables["service_versions"])


def new_token() -> str:
    return secrets.token_urlsafe(32)


class Services:
    """Operations on the services of one cluster."""

    def __init__(
        self,
        sessions: sessionmaker[Session],
        cluster: str,
        sealer: TokenSealer,
        checks: Sequence[Check] = (),
        runtime: Runtime = "local",
    ) -> None:
        self._sessions = sessions
        self._reads = read_sessions(sessions)
        self.cluster = cluster
        self.sealer = sealer
        self._checks = checks
        self.runtime: Runtime = runtime  # where replicas run: what of a spec is honoured

    # -- reads ---------------------------------------------------------------------------
    def get(self, cluster: str, name: str) -> ServiceRow:
        with self._reads() as s:
            return self._load(s, cluster, name)

    def page(
        self,
        *,
        page: int,
        size: int,
        name: str | None = None,
        status: str | None = None,
        sort: SortKey = "createTime",
        order: Literal["asc", "desc"] = "desc",
        page_token: str | None = None,
        group: str | None = None,
        labels: dict[str, str] | None = None,
        globs: Sequence[str] | None = None,
    ) -> tuple[list[ServiceRow], int, str | None]:
        """One page and the total count (an index count, no row bodies); with
        ``page_token`` the page starts after the row the previous page ended on (keyset),
        else at ``page``. Also returns the token of the next page (None on the last).
        ``labels``: only services carrying every one of these labels; ``globs``: only
        names matching one of them (an AccessKey's ``Services``)."""
        filters = [ServiceRow.cluster == self.cluster]
        if globs is not None:
            like = [ServiceRow.name.like(like_pattern(g), escape="\\") for g in globs]
            filters.append(or_(*like) if like else false())
        if name:
            filters.append(ServiceRow.name.contains(name, autoescape=True))
        if status:
            filters.append(ServiceRow.status == status)
        if group:
            filters.append(ServiceRow.group_name == group)
        for label, value in (labels or {}).items():
            filters.append(ServiceRow.labels[label].as_string() == value)
        column = _SORT_COLUMNS[sort]
        with self._reads() as s:
            total = s.scalar(select(func.count()).select_from(ServiceRow).where(*filters)) or 0
            rows = list(s.scalars(page_query(filters, sort, order, size, page, page_token)))
        last = rows[-1] if len(rows) == size else None
        token = paging.encode(sort, order, getattr(last, column.key), last.id) if last else None
        return rows, total, token

    def events(self, cluster: str, name: str, limit: int = 200) -> list[EventRow]:
        with self._sessions() as s:
            row = self._load(s, cluster, name)
            query = (
                select(EventRow)
                .where(EventRow.service_id == row.id)
                .order_by(EventRow.id.desc())
                .limit(limit)
            )
            return list(reversed(s.scalars(query).all()))

    def versions(self, cluster: str, name: str) -> tuple[ServiceRow, list[ServiceVersionRow]]:
        """The service and its versions, newest first."""
        with self._sessions() as s:
            row = self._load(s, cluster, name)
            query = (
                select(ServiceVersionRow)
                .where(ServiceVersionRow.service_id == row.id)
                .order_by(ServiceVersionRow.version.desc())
            )
            return row, list(s.scalars(query))

    # -- writes --------------------------------------------------------------------------
    def create(
        self,
        data: Any,
        labels: dict[str, str] | None = None,
        audit: Callable[[Session], None] | None = None,
    ) -> tuple[ServiceRow, str]:
        """A new service; ``audit`` (the request's audit entry) is written in the same
        transaction, so one commit stores both."""
        spec = validate_spec(data, self._checks)
        stored, custom_token = split_token(spec)
        stored = _owned(stored, stored.metadata.instance)
        token = custom_token or new_token()
        # The spec's labels are the service's labels, as the SDK's label routes set them;
        # the SDK's Labels parameter adds to them.
        labels = {**(stored.labels or {}), **(labels or {})} or None
        if stored.metadata.group is None:
            return self._insert(stored, token, custom_token is not None, labels, audit), token
        for _ in range(2):  # a concurrent first member may make the same group: once more
            row = ServiceRow(
                uid=_uid(),
                cluster=self.cluster,
                name=spec.name,
                spec=stored,
                token=self.sealer.seal(token),
                token_sha256=token_digest(token),
                status="Creating",
                total_instances=stored.metadata.instance,
                pending_instances=stored.metadata.instance,
                labels=labels,
            )
            row.add_event("Created", f"service created with {stored.metadata.instance} instance(s)")
            for note in not_honoured(stored, self.runtime, events=True):
                row.add_event("NotHonoured", f"{note['field']}: {note['reason']}", warning=True)
            with self._sessions() as s:
                _check_mirror(s, self.cluster, stored, None)
                if custom_token and queries.token_taken(s, self.cluster, row.token_sha256):
                    raise TokenInUse()
                s.add(row)
                try:
                    s.flush()
                    s.add(ServiceVersionRow(service_id=row.id, version=1, spec=stored.public()))
                    groups.follow(s, row, None, self.sealer)
                    if audit is not None:
                        audit(s)
                    s.commit()
                    return row, token
                except IntegrityError as e:
                    s.rollback()
                    self._why_not_created(s, spec.name, row.token_sha256, e)
        raise Conflict(f"group {spec.metadata.group!r} is being created concurrently: try again")

    def _insert(
        self,
        stored: StoredSpec,
        token: str,
        custom_token: bool,
        labels: dict[str, str] | None,
        audit: Callable[[Session], None] | None,
    ) -> ServiceRow:
        """A service outside any group, written with Core statements (a create touches no
        other row); the row answered is the one stored, detached."""
        now = utcnow()
        instance = stored.metadata.instance
        values: dict[str, Any] = {
            "uid": _uid(),
            "cluster": self.cluster,
            "name": stored.name,
            "spec": stored,
            "token": self.sealer.seal(token),
            "token_sha256": token_digest(token),
            "generation": 1,
            "observed_generation": 0,
            "stopped": False,
            "deleting": False,
            "status": "Creating",
            "reason": "",
            "message": "",
            "total_instances": instance,
            "pending_instances": instance,
            "running_instances": 0,
            "group_name": None,
            "template_hash": "",
            "route_version": 0,
            "replicas": [],
            "created_at": now,
            "updated_at": now,
            "version": 1,
            "safety_lock": "",
            "current_version": 1,
            "latest_version": 1,
            "restarts": 0,
        }
        # JSON columns left out when empty: SQL NULL, which their queries look for (a None
        # written by a Core statement would be JSON's 'null').
        if labels:
            values["labels"] = labels
        events = [
            {
                "created_at": now,
                "type": "Normal",
                "reason": "Created",
                "message": f"service created with {instance} instance(s)",
            }
        ]
        events += [
            {
                "created_at": now,
                "type": "Warning",
                "reason": "NotHonoured",
                "message": f"{note['field']}: {note['reason']}",
            }
            for note in not_honoured(stored, self.runtime, events=True)
        ]
        with self._sessions() as s:
            _check_mirror(s, self.cluster, stored, None)
            if custom_token and queries.token_taken(s, self.cluster, values["token_sha256"]):
                raise TokenInUse()
            try:
                conn = s.connection()  # Core statements on the session's transaction
                row_id = conn.execute(_INSERT_SERVICE, values).scalar_one()
                conn.execute(_INSERT_EVENT, [{"service_id": row_id, **e} for e in events])
                first = {"service_id": row_id, "version": 1, "spec": stored.public()}
                conn.execute(_INSERT_VERSION, {**first, "created_at": now})
                if audit is not None:
                    audit(s)
                values["route_version"] = route_feed.stamp(s, [row_id])
                service_watch.written(s)
                s.commit()
            except IntegrityError as e:
                s.rollback()
                self._why_not_created(s, stored.name, values["token_sha256"], e)
                raise
        empty = {"labels": None, "cron_scaler": None, "retired_instances": None}
        return ServiceRow(id=row_id, **{**empty, **values})

    def _why_not_created(self, s: Session, name: str, digest: str, e: IntegrityError) -> None:
        """Raise what a create's rolled-back insert ran into, when it is the user's to fix:
        the name taken, or the token (by a concurrent create with the same token)."""
        if queries.find(s, self.cluster, name) is not None:
            raise ServiceExists(
                f"a service named {name!r} already exists: pick another name, "
                f"or change it with 'eascmd modify {name} -s <file>'"
            ) from e
        if queries.token_taken(s, self.cluster, digest):
            raise TokenInUse() from e

    def update(
        self,
        cluster: str,
        name: str,
        patch: dict[str, Any] | Callable[[dict[str, Any]], dict[str, Any]],
        if_match: int | None = None,
    ) -> ServiceRow:
        """Apply an RFC 7386 merge patch (or a function of the spec) to the spec; the result
        is validated whole."""
        if isinstance(patch, dict) and "name" in patch and patch["name"] != name:
            raise InvalidSpec(
                [FieldProblem("name", "a service cannot be renamed", f"use {name!r} or omit it")]
            )
        return self._patch(
            cluster, name, patch, ("Updated", "spec updated"), if_match, action="UpdateService"
        )

    def use_version(self, cluster: str, name: str, version: int) -> ServiceRow:
        """EAS's UpdateServiceVersion: run the spec of an earlier (or later) version again;
        no new version is made, the service's current version becomes ``version``."""
        _, found = self.versions(cluster, name)
        spec = next((v.spec for v in found if v.version == version), None)
        if spec is None:
            known = ", ".join(str(v.version) for v in reversed(found))
            raise InvalidSpec(
                [
                    FieldProblem(
                        "Version",
                        f"service {name!r} has no version {version}",
                        f"use one of: {known} (ListServiceVersions)",
                    )
                ]
            )
        event = ("VersionChanged", f"version {version} deployed again")
        return self._patch(
            cluster,
            name,
            lambda _: dict(spec),
            event,
            action="UpdateServiceVersion",
            to_version=version,
        )

    def release(
        self, cluster: str, name: str, weight: int | None, traffic_state: str | None
    ) -> ServiceRow:
        """EAS's ReleaseService: a member's weight and whether it takes group traffic (each
        optional, the other kept). Routing only: replicas and generation stay."""
        metadata: dict[str, Any] = {}
        if weight is not None:
            metadata["weight"] = weight
        if traffic_state is not None:
            metadata["traffic_state"] = traffic_state
        detail = ", ".join(f"{k} {v}" for k, v in metadata.items()) or "nothing changed"
        event = ("Released", detail)
        return self._patch(cluster, name, {"metadata": metadata}, event, action="ReleaseService")

    def mirror(
        self, cluster: str, name: str, ratio: int, targets: list[str], tolerance: float | None
    ) -> ServiceRow:
        """Send ``ratio`` % of the service's requests also to ``targets`` and compare the
        answers; ratio 0 or no target removes the mirror. Routing only, as a release."""
        if ratio == 0 or not targets:
            patch: dict[str, Any] = {"metadata": {"mirror": None}}
            detail = "mirror removed"
        else:
            # Validated with the whole spec by _patch, so errors name the field.
            mirror = {"ratio": ratio, "targets": targets, "tolerance": tolerance}
            patch = {"metadata": {"mirror": mirror}}
            within = "byte-equal" if tolerance is None else f"within {tolerance:g}"
            detail = f"{ratio}% mirrored to {', '.join(targets)}, compared {within}"
        event = ("Mirrored", detail)
        return self._patch(cluster, name, patch, event, action="UpdateServiceMirror")

    def scale(self, cluster: str, name: str, instance: int) -> ServiceRow:
        row = self.get(cluster, name)
        auto = row.spec.autoscaler
        if auto is not None and instance != row.spec.metadata.instance:
            raise Conflict(
                f"service {name!r} is autoscaled between {auto.min} and {auto.max} instances: "
                f"change the range with 'eascmd autoscale {name} --min N --max N', or turn "
                f"the autoscaler off with 'eascmd autoscale {name} --off' first"
            )
        patch = {"metadata": {"instance": instance}}
        event = ("Scaled", f"instances set to {instance}")
        return self._patch(cluster, name, patch, event, action="ScaleService")

    def set_autoscaler(
        self, cluster: str, name: str, autoscaler: Any, action: str = "UpdateServiceAutoScaler"
    ) -> ServiceRow:
        """Replace (``None``: remove) the spec's ``autoscaler`` as a whole, validated."""

        def patch(spec: dict[str, Any]) -> dict[str, Any]:
            spec.pop("autoscaler", None)
            return spec if autoscaler is None else {**spec, "autoscaler": autoscaler}

        event = (
            ("AutoscalerRemoved", "autoscaler removed: metadata.instance is set by hand again")
            if autoscaler is None
            else ("AutoscalerSet", "autoscaler set")
        )
        if autoscaler is None:
            action = "DeleteServiceAutoScaler"
        return self._patch(cluster, name, patch, event, action=action)

    def autoscale(
        self,
        cluster: str,
        name: str,
        expected: int,
        instance: int,
        why: str,
        reason: str = "Autoscaled",
    ) -> int | None:
        """The autoscaler's scale (and a wake-up's, with its own event ``reason``): the same
        write as a manual one, but only while the service is still autoscaled at
        ``expected`` instances (else a newer state decides). The generation written, or None
        when nothing was."""
        written: int | None = None

        def change(s: Session, row: ServiceRow) -> None:
            nonlocal written
            written = None  # a retry after a concurrent write decides afresh
            spec = row.spec
            if spec.autoscaler is None or spec.metadata.instance != expected:
                return
            metadata = spec.metadata.model_copy(update={"instance": instance})
            row.spec = spec.model_copy(update={"metadata": metadata})
            _bump(row, reason, why)
            written = row.generation

        self._write(cluster, name, change)
        return written

    def cron_scale(self, cluster: str, name: str, job: str, target: int, at: str) -> None:
        """A scheduled job fired: the instance count becomes ``target``; beside an
        autoscaler, its range does instead (as Alibaba's CronHPA does to an HPA): ``min``
        becomes ``target``, and ``max`` too when below it; the count moves into the new
        range and the autoscaler scales from there. The job's last run is kept with the
        scheduled scaler for DescribeServiceCronScaler."""

        def change(s: Session, row: ServiceRow) -> None:
            spec, auto = row.spec, row.spec.autoscaler
            if auto is not None:
                auto = auto.model_copy(update={"min": target, "max": max(auto.max, target, 1)})
                spec = spec.model_copy(update={"autoscaler": auto})
                what = f"autoscaler range set to [{auto.min}, {auto.max}] by scheduled job {job!r}"
            else:
                what = f"instances set to {target} by scheduled job {job!r}"
            instance = auto.clamp(spec.metadata.instance) if auto else target
            spec = spec.model_copy(
                update={"metadata": spec.metadata.model_copy(update={"instance": instance})}
            )
            if spec != row.spec:
                row.spec = spec
                _bump(row, "CronScaled", what)
            if row.cron_scaler is not None:
                status = dict(row.cron_scaler.get("JobStatus", {}))
                status[job] = {"LastProbeTime": at, "State": "Succeeded", "Message": what}
                row.cron_scaler = {**row.cron_scaler, "JobStatus": status}

        self._write(cluster, name, change)

    def note(self, cluster: str, name: str, reason: str, message: str) -> None:
        """An event alone (no change to the spec), e.g. a cold start's breakdown."""
        self._write(cluster, name, lambda s, row: row.add_event(reason, message))

    def set_stopped(self, cluster: str, name: str, stopped: bool) -> ServiceRow:
        def change(s: Session, row: ServiceRow) -> None:
            if row.stopped != stopped:
                row.stopped = stopped
                _bump(
                    row,
                    "Stopping" if stopped else "Starting",
                    "stop requested" if stopped else "start requested",
                )
                row.status = "Stopping" if stopped else "Updating"

        return self._write(
            cluster, name, change, action="StopService" if stopped else "StartService"
        )

    def restart(self, cluster: str, name: str) -> ServiceRow:
        """Roll every replica (a new one up before an old one goes, as an update)."""

        def change(s: Session, row: ServiceRow) -> None:
            row.restarts += 1
            _bump(row, "Restarting", "restart requested")

        return self._write(cluster, name, change, action="RestartService")

    def restart_instances(self, cluster: str, name: str, instances: list[str]) -> ServiceRow:
        """Replace these replicas (a new one up before each goes, as an update). Names asked
        for before stay while their replicas are still seen (not replaced yet)."""

        def change(s: Session, row: ServiceRow) -> None:
            seen = {r.get("name") for r in row.replicas or []}
            pending = {n for n in row.retired_instances or () if n in seen}
            row.retired_instances = sorted(pending | set(instances))
            _bump(row, "InstancesRestarting", "restart requested: " + ", ".join(instances))

        return self._write(cluster, name, change, action="DeleteServiceInstances")

    def set_labels(self, cluster: str, name: str, labels: dict[str, str]) -> ServiceRow:
        """Add or replace these labels; the others stay."""

        def change(s: Session, row: ServiceRow) -> None:
            merged = {**(row.labels or {}), **labels}
            if merged != (row.labels or {}):
                row.labels = merged
                row.add_event("Labeled", "labels set: " + ", ".join(sorted(labels)))

        return self._write(cluster, name, change, action="UpdateServiceLabel")

    def delete_labels(self, cluster: str, name: str, keys: list[str]) -> ServiceRow:
        def change(s: Session, row: ServiceRow) -> None:
            kept = {k: v for k, v in (row.labels or {}).items() if k not in keys}
            if kept != (row.labels or {}):
                row.labels = kept or None
                row.add_event("Unlabeled", "labels removed: " + ", ".join(sorted(keys)))

        return self._write(cluster, name, change, action="DeleteServiceLabel")

    def set_lock(self, cluster: str, name: str, lock: safety_lock.Level) -> ServiceRow:
        stored = "" if lock == "none" else lock

        def change(s: Session, row: ServiceRow) -> None:
            if row.safety_lock != stored:
                row.safety_lock = stored
                row.add_event("SafetyLock", f"safety lock set to {lock}")

        return self._write(cluster, name, change, action=safety_lock.UNLOCK)

    def set_cron_scaler(
        self, cluster: str, name: str, cron: dict[str, Any] | None, action: str
    ) -> ServiceRow:
        """Replace (None: remove) the scheduled scaler, already validated by the caller."""

        def change(s: Session, row: ServiceRow) -> None:
            if row.cron_scaler != cron:
                row.cron_scaler = cron
                jobs = len(cron["ScaleJobs"]) if cron else 0
                row.add_event(
                    "CronScalerSet" if cron else "CronScalerRemoved",
                    f"scheduled scaler set with {jobs} job(s)"
                    if cron
                    else "scheduled scaler removed",
                )

        return self._write(cluster, name, change, action=action)

    def request_delete(self, cluster: str, name: str) -> ServiceRow:
        """Mark for deletion; the reconciler removes the replicas, then the row."""

        def change(s: Session, row: ServiceRow) -> None:
            if not row.deleting:
                row.deleting = True
                _bump(row, "Deleting", "delete requested")
                row.status = "Deleting"
                # The last member takes its group along.
                groups.follow(s, row, row.group_name, self.sealer)

        return self._write(cluster, name, change, action="DeleteService")

    def rotate_token(self, cluster: str, name: str) -> tuple[ServiceRow, str]:
        token = new_token()

        def change(s: Session, row: ServiceRow) -> None:
            self._set_token(row, token)
            row.add_event("TokenRotated", "service token rotated")

        return self._write(cluster, name, change, action="RotateServiceToken"), token

    # -- plumbing ------------------------------------------------------------------------
    def _patch(
        self,
        cluster: str,
        name: str,
        patch: dict[str, Any] | Callable[[dict[str, Any]], dict[str, Any]],
        event: tuple[str, str],
        if_match: int | None = None,
        *,
        action: str | None = None,
        to_version: int | None = None,
    ) -> ServiceRow:
        """Merge ``patch`` (or apply it, when a function) into the stored spec (and token),
        validate the whole, and record a new generation with ``event`` only when the spec
        really changed — only the event when just routing fields changed (a release or a
        group move rolls no replica). An autoscaled service keeps the autoscaler's count.
        A change to what replicas run is a new version, unless ``to_version`` names the
        version being gone back to."""

        def change(s: Session, row: ServiceRow) -> None:
            current = row.spec.public()
            merged = patch(current) if callable(patch) else merge_patch(current, _nested(patch))
            spec = validate_spec(merged, self._checks)
            stored, token = split_token(spec)  # a token only when the patch carries one
            asked, have = stored.metadata.instance, row.spec.metadata.instance
            if stored.autoscaler is not None and row.spec.autoscaler is not None:
                stored = _owned(stored, have)
                if asked != have:
                    row.add_event(
                        "InstanceKept",
                        f"metadata.instance {asked} not applied: the autoscaler sets it "
                        f"(now {stored.metadata.instance}); change min/max instead",
                        warning=True,
                    )
            else:
                stored = _owned(stored, asked)
            if token and token_digest(token) != row.token_sha256:
                if queries.token_taken(s, cluster, token_digest(token), by=row.id):
                    raise TokenInUse()
                self._set_token(row, token)
                row.add_event("TokenChanged", "service token replaced by the spec's token")
            if stored != row.spec:
                _check_mirror(s, cluster, stored, row.spec.metadata.mirror)
                before, deployment = row.group_name, row.spec.deployment()
                if stored.labels != row.spec.labels:  # the spec's labels are the service's
                    dropped = row.spec.labels or {}
                    kept = {k: v for k, v in (row.labels or {}).items() if k not in dropped}
                    row.labels = {**kept, **(stored.labels or {})} or None
                row.spec = stored
                groups.follow(s, row, before, self.sealer)
                if stored.deployment() == deployment:
                    row.add_event(*event)
                else:
                    _bump(row, *event)
                    if to_version is None:
                        _new_version(s, row)
            if to_version is not None:
                row.current_version = to_version

        return self._write(cluster, name, change, if_match, action)

    def token(self, cluster: str, name: str) -> tuple[ServiceRow, str]:
        """The explicit admin call that opens a service's sealed token."""
        row = self.get(cluster, name)
        return row, self.sealer.open(row.token)

    def _set_token(self, row: ServiceRow, token: str) -> None:
        row.token = self.sealer.seal(token)
        row.token_sha256 = token_digest(token)

    def _load(self, s: Session, cluster: str, name: str) -> ServiceRow:
        if cluster != self.cluster:
            raise ServiceNotFound(
                f"unknown cluster {cluster!r}: this control plane serves {self.cluster!r}"
            )
        row = queries.find(s, cluster, name)
        if row is None:
            raise ServiceNotFound(f"no service named {name!r}: see 'eascmd list'")
        return row

    def _write(
        self,
        cluster: str,
        name: str,
        change: Callable[[Session, ServiceRow], None],
        if_match: int | None = None,
        action: str | None = None,
    ) -> ServiceRow:
        """One transaction: ``change`` applied to the row as read, retried on a concurrent
        write. ``action`` (the SDK action name; None for the control plane's own writes) is
        checked against the service's safety lock in the same transaction."""
        for _ in range(_RETRIES):
            with self._sessions() as s:
                row = self._load(s, cluster, name)
                if if_match is not None and row.version != if_match:
                    raise PreconditionFailed(
                        f"service {name!r} is at version {row.version}, not {if_match}: "
                        "read it again and re-apply your change"
                    )
                if row.deleting:
                    raise Conflict(f"service {name!r} is being deleted")
                if action is not None:
                    safety_lock.check(name, row.safety_lock, action)
                try:
                    with s.no_autoflush:  # so the check below sees what the change did
                        change(s, row)
                    if not s.dirty and not s.new:
                        return row
                    row.updated_at = utcnow()
                    s.commit()
                    return row
                except StaleDataError:
                    s.rollback()  # someone else wrote first: re-read and re-apply
                except IntegrityError as e:
                    s.rollback()
                    # SQLite names the columns, PostgreSQL the index.
                    if "token_sha256" in str(e.orig) or "uq_services_cluster_token" in str(e.orig):
                        raise TokenInUse() from e  # a concurrent write took the token first
                    raise
        raise Conflict(f"service {name!r} is being changed concurrently: try again")


def page_query(
    filters: list[Any],
    sort: SortKey,
    order: Literal["asc", "desc"],
    size: int,
    page: int,
    page_token: str | None,
) -> Select[ServiceRow]:
    """The rows of one page: after the row ``page_token`` names (a seek), else at page
    ``page`` (an offset). The page's ids are found first on the sort column's index alone
    (its entries carry the id: an index-only scan, which skips ``(page - 1) * size``
    entries without reading their rows), then only those rows are read."""
    column = _SORT_COLUMNS[sort]
    keys = select(ServiceRow.id.label("id"), column.label("key")).where(*filters)
    if page_token:
        value, row_id = paging.decode(page_token, sort, order)
        key, after = tuple_(column, ServiceRow.id), tuple_(literal(value, column.type), row_id)
        keys = keys.where(key < after if order == "desc" else key > after)
    else:
        keys = keys.offset((page - 1) * size)
    ids = keys.order_by(*_direction(column, ServiceRow.id, order)).limit(size).subquery()
    return (
        select(ServiceRow)
        .join(ids, ServiceRow.id == ids.c.id)
        .order_by(*_direction(ids.c.key, ids.c.id, order))
    )


def _direction(key: Any, row_id: Any, order: Literal["asc", "desc"]) -> list[Any]:
    return [key.desc(), row_id.desc()] if order == "desc" else [key, row_id]


def _nested(patch: dict[str, Any]) -> dict[str, Any]:
    """A patch in EAS's other spellings (``"rpc.keepalive"``, ``strategies``) as the stored
    nested form, so it replaces what is stored instead of contradicting it."""
    try:
        nested: dict[str, Any] = eas_spec.normalise(patch)
    except ValueError as e:  # a contradiction within the patch itself
        raise InvalidSpec([FieldProblem("body", str(e), "write each field once")]) from e
    if "name" not in patch:
        nested.pop("name", None)  # metadata.name alone: the same service, not a rename
    return nested


def _owned(spec: StoredSpec, instance: int) -> StoredSpec:
    """``spec`` with ``instance`` — inside the autoscaler's range when it has one: while an
    autoscaler is set, the count is its to change (a patch's own count is not applied)."""
    if spec.autoscaler is not None:
        instance = spec.autoscaler.clamp(instance)
    if instance == spec.metadata.instance:
        return spec
    return spec.model_copy(
        update={"metadata": spec.metadata.model_copy(update={"instance": instance})}
    )


def _new_version(s: Session, row: ServiceRow) -> None:
    """Record the row's spec as its next version, and run it."""
    row.latest_version += 1
    row.current_version = row.latest_version
    s.add(ServiceVersionRow(service_id=row.id, version=row.current_version, spec=row.spec.public()))


def _bump(row: ServiceRow, reason: str, message: str) -> None:
    row.generation += 1
    if row.status in ("Running", "Failed", "Waiting"):
        row.status = "Updating"
    row.add_event(reason, message)


def _check_mirror(s: Session, cluster: str, spec: StoredSpec, before: Mirror | None) -> None:
    """A changed mirror names existing services other than its own (a target deleted later
    only makes the gateway count its shadows as errors)."""
    mirror = spec.metadata.mirror
    if mirror is None or mirror == before:
        return
    problems = spec.mirror_problems()
    for i, target in enumerate(mirror.targets):
        if target == spec.name:
            continue  # said by mirror_problems
        found = queries.find(s, cluster, target)
        if found is None or found.deleting:
            problems.append(
                FieldProblem(
                    f"metadata.mirror.targets[{i}]",
                    f"no service named {target!r} in this cluster",
                    "create the target service first, or correct the name (see 'eascmd list')",
                )
            )
    if problems:
        raise InvalidSpec(problems)


def _uid() -> str:
    return str(uuid.uuid4())
