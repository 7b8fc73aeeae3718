"""Which callers see a service's token in DescribeService (``AccessToken``), as EAS shows
it: admin and developer credentials do, viewers do not. The one place that decides it; the
handlers ask :func:`sees_token` with the request they serve, after ``authorize`` put its
principal on the request."""

from __future__ import annotations

from fastapi import Request

from controlplane.model.roles import Principal


def sees_token(request: Request) -> bool:
    """True when the request's caller may read service (and group) tokens."""
    principal = getattr(request.state, "principal", None)
    return isinstance(principal, Principal) and principal.role in ("admin", "developer")
