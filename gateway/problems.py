"""RFC 9457 ``application/problem+json`` answers: the one place where a gateway refusal
becomes HTTP. Handlers raise :class:`Problem`; :func:`write_problem` renders it, so a
client never sees a traceback and every refusal has the same shape.
"""

from __future__ import annotations

import json
from http import HTTPStatus

from gateway.server import Request

EAS_TITLES = {450: "Queue Full"}  # EAS's own status, which HTTPStatus does not know

PROBLEM_CONTENT_TYPE = b"application/problem+json"


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


def unauthorized(service: str, detail: str) -> Problem:
    return Problem(
        401,
        detail,
        service=service,
        headers={"WWW-Authenticate": 'Bearer realm="openeas"'},
    )
