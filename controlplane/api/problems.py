"""Errors as ``application/problem+json`` (RFC 9457): the one place where domain errors,
request-parsing errors and crashes become HTTP responses. Never a traceback to the client.

Each answer also carries Alibaba Cloud's error fields, ``RequestId``, ``Code`` and
``Message``, which EAS's OpenAPI SDK reads into its exception (``code``, ``message``,
``request_id``)."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Mapping
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException

from contract.configfile import ConfigSyntaxError, parse, repaired
from controlplane.model.errors import ControlPlaneError, InvalidSpec


def request_id(request: Request) -> str:
    """The RequestId the audit middleware gave this request (``controlplane.api.auth``)."""
    rid = getattr(request.state, "request_id", None)
    return rid if isinstance(rid, str) else str(uuid.uuid4()).upper()


log = logging.getLogger(__name__)


# Codes of the errors raised without a domain type, by status.
CODES = {
    400: "InvalidParameter",
    401: "InvalidCredential",
    403: "Forbidden",
    404: "NotFound",
    405: "MethodNotAllowed",
    409: "Conflict",
    412: "PreconditionFailed",
    413: "RequestEntityTooLarge",
    421: "MisdirectedRequest",
    422: "InvalidParameter",
    429: "Throttling",
    500: "InternalError",
    503: "ServiceUnavailable",
}


def problem(
    status: int,
    title: str,
    detail: str,
    *,
    headers: Mapping[str, str] | None = None,
    code: str | None = None,
    request_id: str | None = None,
    **extra: Any,
) -> JSONResponse:
    body = {
        "type": "about:blank",
        "title": title,
        "status": status,
        "detail": detail,
        "RequestId": request_id or str(uuid.uuid4()).upper(),
        "Code": code or CODES.get(status, "InvalidParameter" if status < 500 else "InternalError"),
        "Message": detail,
        **extra,
    }
    return JSONResponse(
        body, status, headers=dict(headers or {}), media_type="application/problem+json"
    )


def install(app: FastAPI) -> None:
    @app.exception_handler(ControlPlaneError)
    async def _domain(request: Request, exc: ControlPlaneError) -> JSONResponse:
        extra: dict[str, Any] = {}
        if isinstance(exc, InvalidSpec):
            extra["errors"] = [
                {"field": p.field, "message": p.message, "fix": p.fix} for p in exc.problems
            ]
        elif isinstance(exc, MalformedBody):
            extra = exc.extra
        headers = {"WWW-Authenticate": "Bearer"} if exc.status == 401 else None
        return problem(
            exc.status,
            exc.title,
            str(exc),
            code=exc.code,
            headers=headers,
            request_id=request_id(request),
            **extra,
        )

    @app.exception_handler(RequestValidationError)
    async def _request(request: Request, exc: RequestValidationError) -> JSONResponse:
        rid = request_id(request)
        errors = []
        for err in exc.errors():
            if err["type"] == "json_invalid":
                ctx = err.get("ctx", {})
                return problem(
                    400,
                    "Malformed JSON",
                    f"request body is not valid JSON: {ctx.get('error', err['msg'])}",
                    request_id=rid,
                )
            field = ".".join(str(p) for p in err["loc"][1:]) or str(err["loc"][0])
            errors.append({"field": field, "message": err["msg"], "fix": ""})
        detail = "; ".join(f"{e['field']}: {e['message']}" for e in errors)
        return problem(422, "Invalid request", detail, errors=errors, request_id=rid)

    @app.exception_handler(HTTPException)
    async def _http(request: Request, exc: HTTPException) -> JSONResponse:
        code = CODES.get(exc.status_code)
        if exc.status_code == 404 and request.url.path.startswith("/api/v2/services"):
            code = "InvalidService.NotFound" if "service" in str(exc.detail) else code
        return problem(
            exc.status_code,
            _title(exc.status_code),
            str(exc.detail),
            headers=exc.headers,
            code=code,
            request_id=request_id(request),
        )

    @app.exception_handler(Exception)
    async def _crash(request: Request, exc: Exception) -> JSONResponse:
        log.exception("unhandled error on %s %s", request.method, request.url.path)
        return problem(
            500,
            "Internal error",
            "the control plane failed; see its log",
            request_id=request_id(request),
        )


def _title(status: int) -> str:
    from http import HTTPStatus

    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return "Error"


def json_body(raw: bytes) -> Any:
    """Parse a request body. JSON pasted from a blog or chat (typographic quotes, an en dash
    for ``--``, trailing commas) is answered as ``eascmd`` answers it: every problem with
    line and column, each damaged line as it should read, and the whole text corrected."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise MalformedBody(f"request body is not UTF-8 text (byte {e.start})") from e
    try:
        return parse(text)
    except ConfigSyntaxError as e:
        errors = [
            {
                "field": f"line {p.line} column {p.column}",
                "line": p.line,
                "column": p.column,
                "message": p.message,
                "fix": f"should read: {e.fixed_lines[p.line].strip()}"
                if p.line in e.fixed_lines
                else "",
            }
            for p in e.problems
        ]
        fixed = repaired(text, e) if e.fixed_lines else None
        raise MalformedBody(e.render("request body", text), errors=errors, corrected=fixed) from e


class MalformedBody(ControlPlaneError):
    """A body that is not JSON; ``extra`` goes into the problem (``errors`` with line and
    column, ``corrected``: the text with every fixable line as it should read)."""

    status = 400
    title = "Malformed JSON"

    def __init__(self, detail: str, **extra: Any) -> None:
        super().__init__(detail)
        self.extra = {k: v for k, v in extra.items() if v is not None}
