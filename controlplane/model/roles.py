"""Who may do what: principals, roles, the action table and the one decision. Pure.

The API's authorization dependency (``controlplane.api.auth``) names the action by the
route's ``name=`` (the SDK's action name, e.g. ``CreateService``) and the resource by the
route's path (a service or group name), then asks :func:`refusal`. An action missing from
the table is a write only an admin may make, so a new route is closed until classified.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum
from functools import cache
from typing import Literal

Role = Literal["admin", "developer", "viewer"]
ROLES: tuple[Role, ...] = ("admin", "developer", "viewer")
ADMIN_TOKEN = "admin-token"  # the bootstrap token's principal, as the audit trail names it


class Kind(Enum):
    READ = "read"  # viewers and up, within their globs
    WRITE = "write"  # developers and up, within their globs
    ADMIN = "admin"  # AccessKeys and the audit trail: admins only
    INTERNAL = "internal"  # the gateway's calls: the route-reader token or an admin


_READ = """
ListServices DescribeService DescribeServiceEndpoints ListServiceInstances
DescribeServiceEvent DescribeServiceLog DescribeServiceDiagnosis DescribeServiceAutoScaler
DescribeServiceCronScaler DescribeServiceMirror ListServiceVersions DescribeServiceMetrics
ListGroups DescribeGroup DescribeGroupEndpoints DescribeRegions
"""
_WRITE = """
CreateService DeleteService UpdateService UpdateServiceVersion StartService StopService
RestartService ScaleService DeleteServiceInstances CreateServiceAutoScaler
UpdateServiceAutoScaler DeleteServiceAutoScaler CreateServiceCronScaler
UpdateServiceCronScaler DeleteServiceCronScaler CreateServiceMirror UpdateServiceMirror
DeleteServiceMirror ReleaseService UpdateServiceLabel DeleteServiceLabel
UpdateServiceSafetyLock CloneService DescribeServiceToken RotateServiceToken
UpdateGroup DescribeGroupToken RotateGroupToken
"""
_ADMIN = "CreateAccessKey ListAccessKeys DeleteAccessKey ListAuditEntries"
_INTERNAL = "GetRouteTable ReportLoad WakeService"

ACTIONS: dict[str, Kind] = {
    **{a: Kind.READ for a in _READ.split()},
    **{a: Kind.WRITE for a in _WRITE.split()},
    **{a: Kind.ADMIN for a in _ADMIN.split()},
    **{a: Kind.INTERNAL for a in _INTERNAL.split()},
}


def kind(action: str) -> Kind:
    return ACTIONS.get(action, Kind.ADMIN)


@dataclass(frozen=True)
class Principal:
    """An authenticated caller. ``name`` is what the audit trail records: the AccessKeyId,
    ``admin-token`` or ``routes-token``."""

    name: str
    role: Role | None  # None: the gateway's route-reader token, internal calls only
    services: tuple[str, ...] | None = None  # globs; None: every service and group

    def covers(self, resource: str) -> bool:
        if self.services is None:
            return True
        return any(_matcher(glob).match(resource) for glob in self.services)


# A glob is over what a service or group name may hold (controlplane.model.spec.NAME_RE), with
# ``*`` (any run) and ``?`` (one character): so the same glob reads alike here and as the
# database's LIKE pattern (:func:`like_pattern`), on every database.
GLOB_RE = re.compile(r"^[a-z0-9_*?]{1,128}$")


@cache
def _matcher(glob: str) -> re.Pattern[str]:
    return re.compile("".join(_WILD.get(c, re.escape(c)) for c in glob) + r"\Z")


_WILD = {"*": ".*", "?": "."}


def like_pattern(glob: str) -> str:
    """The glob as a LIKE pattern with ``\\`` as its escape character."""
    out = {"*": "%", "?": "_", "_": "\\_", "%": "\\%", "\\": "\\\\"}
    return "".join(out.get(c, c) for c in glob)


ROOT = Principal(ADMIN_TOKEN, "admin")
ROUTE_READER = Principal("routes-token", None)


def refusal(principal: Principal, action: str, resource: str | None) -> str | None:
    """Why ``principal`` may not do ``action`` on ``resource`` (None: it may). ``resource``
    None: the action names no one service or group (a list, a create without a name)."""
    need = kind(action)
    role = principal.role
    if role is None:
        if need is Kind.INTERNAL:
            return None
        return f"the route-reader token opens only the gateway's calls, not {action}"
    if role == "admin":
        return None
    if need is Kind.INTERNAL:
        return f"{action} is the gateway's call: it needs the route-reader token or an admin"
    if need is Kind.ADMIN:
        return f"{action} needs the admin role; this key is a {role}"
    if need is Kind.WRITE and role == "viewer":
        return f"{action} changes things; this key is a viewer and may only read"
    if resource is not None and not principal.covers(resource):
        globs = ", ".join(principal.services or ())
        return f"{resource!r} matches none of this key's Services ({globs})"
    return None
