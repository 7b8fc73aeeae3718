"""RFC 9457 ``application/problem+json`` answers: the one place where a gateway refusal
becomes HTTP. Handlers raise :class:`Problem`; :func:`write_problem` renders it, so a
client never sees a traceback and every refusal has the same shape. A refusal of the
admission core (:class:`gateway.admission.Refused`) becomes one by :func:`refused_problem`,
its kind mapped to a status by :data:`HTTP_STATUS`.
"""

from __future__ import annotations

import json
from http import HTTPStatus
from typing import Final

from gateway import admission
from gateway.admission import Refused
from gateway.http.server import Request

EAS_TITLES = {450: "Queue Full"}  # EAS's own status, which HTTPStatus does not know

PROBLEM_CONTENT_TYPE = b"application/problem+json"
# EAS's answer when a service's queue is full (here: the calls held while it wakes); the
# request was not processed: retry.
QUEUE_FULL = 450

# Each kind of refusal (gateway.admission) as this door's status.
HTTP_STATUS: Final = {
    admission.NOT_FOUND: 404,
    admission.UNAUTHENTICATED: 401,
    admission.FORBIDDEN: 403,
    admission.TOO_LARGE: 413,
    admission.UNAVAILABLE: 503,
    admission.OVER_LIMIT: 429,
    admission.QUEUE_FULL: QUEUE_FULL,
    admission.WAKE_TIMEOUT: 504,
}


class Problem(Exception):
    """A refusal with its HTTP status, a short stable title and a human detail."""

    def __init__(
        self,
        status: int,
        detail: str,
        *,
        title: str | None = None,
        headers: dict[str, str] | None = None,
        service: str | None = None,
    ) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail
        self.title = title or EAS_TITLES.get(status) or HTTPStatus(status).phrase
        self.headers = headers or {}
        self.service = service

    def body(self) -> bytes:
        doc: dict[str, object] = {
            "type": "about:blank",
            "title": self.title,
            "status": self.status,
            "detail": self.detail,
            # Extension member in Triton's own error shape, so tritonclient reports
            # "[401] <detail>" instead of failing to decode the answer.
            "error": self.detail,
        }
        if self.service is not None:
            doc["service"] = self.service
        return json.dumps(doc).encode("utf-8")


def write_problem(request: Request, problem: Problem, *, close: bool = False) -> None:
    """Answer ``request`` with ``problem``; ``close`` ends the connection afterwards (a
    body we refused to read must not be parsed as the next request)."""
    if close:
        request.keep_alive = False
    headers = [(b"content-type", PROBLEM_CONTENT_TYPE), (b"cache-control", b"no-store")]
    headers += [(k.encode("latin-1"), v.encode("latin-1")) for k, v in problem.headers.items()]
    request.conn.write_response(problem.status, headers, problem.body())


def refused_problem(refused: Refused) -> Problem:
    """``refused`` as an HTTP answer: its status, ``Retry-After`` when it says when, and
    the challenge of a refused token."""
    headers = {}
    if refused.kind == admission.UNAUTHENTICATED:
        headers["WWW-Authenticate"] = 'Bearer realm="openeas"'
    if refused.retry_after_s is not None:
        headers["Retry-After"] = str(refused.retry_after_s)
    status = HTTP_STATUS[refused.kind]
    return Problem(
        status,
        refused.detail,
        title="Queue Full" if status == QUEUE_FULL else None,
        headers=headers,
        service=refused.service or None,
    )
