"""Which callers see a service's token in DescribeService (``AccessToken``), as EAS shows
it: admin and developer credentials do, viewers do not. The one place that decides it; the
handlers ask :func:`sees_token` with the request they serve.

Today every credential the API accepts is the admin token, so every caller sees it; the
roles of AccessKey identities decide here once they exist."""

from __future__ import annotations

from fastapi import Request


def sees_token(request: Request) -> bool:
    """True when the request's caller may read service (and group) tokens."""
    role = getattr(request.state, "role", "admin")
    return role in ("admin", "developer")
