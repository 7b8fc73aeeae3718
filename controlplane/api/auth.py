"""Authentication and authorization of the control-plane API, and its audit trail.

- :class:`Authenticator` turns any accepted credential into a :class:`Principal`: an
  AccessKey signature (``ACS3-HMAC-SHA256``, or ROA's ``acs <id>:<sig>``, as EAS's OpenAPI
  SDK sends them), a bearer credential (``Authorization: Bearer`` or ``x-acs-bearer-token``:
  the bootstrap admin token, the gateway's route-reader token, or ``<AccessKeyId>:<secret>``).
- :func:`authorize` is the one dependency every route declares. The action is the route's
  ``name=`` (the SDK's action name), the resource its ``name``/``group`` path parameter;
  a write's JSON body may name more (``name``, ``metadata.group``), each checked alike.
  ``controlplane.model.roles`` decides.
- :class:`AuditMiddleware` gives every request a RequestId and records writes and refusals
  once their status is known.

:func:`install` wires the three into an app. Secrets, tokens and signatures are never
logged nor echoed in an answer.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
import uuid
from calendar import timegm
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from email.utils import parsedate_to_datetime
from typing import Any
from urllib.parse import parse_qsl

from fastapi import FastAPI, Request
from fastapi.concurrency import run_in_threadpool
from sqlalchemy.orm import Session
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from contract import signing
from controlplane.model.errors import Refused
from controlplane.model.roles import ROOT, ROUTE_READER, Kind, Principal, kind, refusal
from controlplane.store.accesskeys import AccessKeys, Key
from controlplane.store.audit import AuditTrail, Entry

WINDOW = timedelta(minutes=15)  # how far a signed request's time may be from ours
# Path parameters that name the resource an action is on, most specific first.
RESOURCE_PARAMS = ("name", "service_name", "ServiceName", "group", "group_name", "GroupName")
# Reads that reveal a secret are recorded like writes.
AUDITED_READS = frozenset({"DescribeServiceToken", "DescribeGroupToken"})
AUDITED_PREFIXES = ("/api/v2/", "/internal/")


def _same(given: str, expected: str) -> bool:
    """Constant-time, and any text a client sent (not only ASCII) is merely unequal."""
    return hmac.compare_digest(given.encode("utf-8", "replace"), expected.encode())


def _unauthorized(code: str, message: str, principal: str = "anonymous") -> Refused:
    return Refused(401, code, message, principal)


class Authenticator:
    def __init__(self, admin_token: str, routes_token: str, keys: AccessKeys) -> None:
        self._tokens = [
            (t.encode(), p) for t, p in ((admin_token, ROOT), (routes_token, ROUTE_READER)) if t
        ]
        self._keys = keys

    async def principal(self, request: Request) -> Principal:
        header = request.headers.get("authorization", "").strip()
        if header.startswith(signing.ACS3):
            return await self._acs3(request, header)
        if header[:4].lower() == "acs ":
            return await self._roa(request, header)
        bearer = request.headers.get("x-acs-bearer-token", "").strip()
        scheme, _, presented = header.partition(" ")
        if not bearer and scheme.lower() == "bearer":
            bearer = presented.strip()
        if bearer:
            return await self._bearer(bearer)
        raise _unauthorized(
            "MissingAuthorization",
            "no credential: sign with an AccessKey pair (eascmd config -i <AccessKeyId> "
            "-k <AccessKeySecret>) or send 'Authorization: Bearer <admin token>'",
        )

    async def _bearer(self, presented: str) -> Principal:
        given = presented.encode()
        # Every comparison runs, so the time taken says nothing about which one matched.
        matched = [p for token, p in self._tokens if hmac.compare_digest(given, token)]
        if matched:
            return matched[0]
        key_id, sep, secret = presented.partition(":")
        if not sep:
            raise _unauthorized("InvalidBearerToken", "the bearer token is not accepted")
        key = await self._key(key_id)
        if not _same(secret, key.secret):
            raise _unauthorized(
                "InvalidAccessKeySecret", "the AccessKeySecret does not match", key_id
            )
        return key.principal

    async def _key(self, key_id: str) -> Key:
        key = await run_in_threadpool(self._keys.lookup, key_id)
        if key is None:
            raise _unauthorized(
                "InvalidAccessKeyId.NotFound",
                f"AccessKeyId {key_id[:40]!r} does not exist or was revoked",
                key_id,
            )
        return key

    async def _acs3(self, request: Request, header: str) -> Principal:
        try:
            auth = signing.parse_acs3(header)
        except signing.SignatureFormatError as e:
            raise Refused(400, "IncompleteSignature", f"Authorization: {e}") from None
        key_id = auth.access_key_id
        missing = [h for h in signing.ACS3_REQUIRED if h not in auth.signed_headers]
        if missing:
            raise Refused(
                400,
                "IncompleteSignature",
                f"SignedHeaders must include {', '.join(missing)}",
                key_id,
            )
        key = await self._key(key_id)
        headers: dict[str, list[str]] = {}
        for name, value in request.headers.items():
            headers.setdefault(name, []).append(value)
        body = await request.body()
        payload = request.headers.get("x-acs-content-sha256", "")
        if not _same(payload, signing.content_sha256(body)):
            raise _unauthorized(
                "SignatureDoesNotMatch", "the body does not match x-acs-content-sha256", key_id
            )
        canonical = signing.acs3_canonical_request(
            request.method,
            _raw_path(request),
            _query(request),
            headers,
            auth.signed_headers,
            payload,
        )
        if not _same(signing.acs3_signature(key.secret, canonical), auth.signature):
            raise _unauthorized(
                "SignatureDoesNotMatch",
                "the request signature does not match: the request was changed on the way, "
                "or signed with another AccessKeySecret",
                key_id,
            )
        signed_at = _acs_date(request.headers.get("x-acs-date", ""), key_id)
        await self._fresh(key, signed_at, request.headers.get("x-acs-signature-nonce", ""))
        return key.principal

    async def _roa(self, request: Request, header: str) -> Principal:
        try:
            key_id, given = signing.parse_roa(header)
        except signing.SignatureFormatError as e:
            raise Refused(400, "IncompleteSignature", f"Authorization: {e}") from None
        key = await self._key(key_id)
        headers = {name: value for name, value in request.headers.items()}
        sts = signing.roa_string_to_sign(
            request.method, _raw_path(request), _query(request), headers
        )
        if not _same(signing.roa_signature(key.secret, sts), given):
            raise _unauthorized(
                "SignatureDoesNotMatch", "the request signature does not match", key_id
            )
        md5 = headers.get("content-md5")
        if md5 is not None:
            body = await request.body()
            digest = base64.b64encode(hashlib.md5(body).digest()).decode()
            if not _same(md5, digest):
                raise _unauthorized(
                    "SignatureDoesNotMatch", "the body does not match Content-MD5", key_id
                )
        try:
            signed_at = parsedate_to_datetime(headers.get("date", ""))
        except (TypeError, ValueError):
            raise _unauthorized(
                "InvalidTimeStamp.Format", "the Date header is not an HTTP date", key_id
            ) from None
        if signed_at.tzinfo is None:
            signed_at = signed_at.replace(tzinfo=UTC)
        await self._fresh(key, signed_at, headers.get("x-acs-signature-nonce", ""))
        return key.principal

    async def _fresh(self, key: Key, signed_at: datetime, nonce: str) -> None:
        who = key.principal.name
        skew = abs(datetime.now(UTC) - signed_at)
        if skew > WINDOW:
            raise _unauthorized(
                "InvalidTimeStamp.Expired",
                f"the request was signed {int(skew.total_seconds())} s away from the server's "
                f"clock (at most {int(WINDOW.total_seconds())} s): check the client's clock",
                who,
            )
        if not nonce:
            raise _unauthorized("MissingSignatureNonce", "x-acs-signature-nonce is required", who)
        if not await run_in_threadpool(self._keys.use_nonce, who, nonce, signed_at + WINDOW):
            raise _unauthorized(
                "SignatureNonceUsed", "this x-acs-signature-nonce was already used", who
            )


def _acs_date(value: str, key_id: str) -> datetime:
    try:
        parsed = time.strptime(value, signing.DATE_FORMAT)
    except ValueError:
        raise _unauthorized(
            "InvalidTimeStamp.Format",
            f"x-acs-date must be UTC as {signing.DATE_FORMAT}, e.g. 2027-01-15T08:00:00Z",
            key_id,
        ) from None
    return datetime.fromtimestamp(timegm(parsed), UTC)


def _raw_path(request: Request) -> str:
    raw = request.scope.get("raw_path")
    return raw.decode("latin-1") if raw else request.url.path


def _query(request: Request) -> dict[str, str]:
    return dict(
        parse_qsl(request.scope.get("query_string", b"").decode("latin-1"), keep_blank_values=True)
    )


@dataclass
class Draft:
    """What the audit trail will record of this request, filled in as it is learned."""

    action: str
    resource: str
    principal: str = "anonymous"
    written: int | None = None  # the status already recorded by the request's transaction


async def authorize(request: Request) -> Principal:
    """The dependency of every API route: who calls, and whether the action is theirs."""
    route = request.scope.get("route")
    action = getattr(route, "name", "") or ""
    resource = next(
        (str(request.path_params[p]) for p in RESOURCE_PARAMS if p in request.path_params), None
    )
    draft = Draft(action, resource or "")
    request.state.audit = draft
    authenticator: Authenticator = request.app.state.authenticator
    try:
        principal = await authenticator.principal(request)
    except Refused as e:
        draft.principal = e.principal
        raise
    draft.principal = principal.name
    named: list[str] = []
    if kind(action) is Kind.WRITE and request.method in ("POST", "PUT", "PATCH"):
        # A body may name more: the service it creates, the group it joins.
        named = _named_in(await request.body())
        if resource is None and named:
            resource = draft.resource = named[0]
    for target in [resource, *named]:
        why = refusal(principal, action, target)
        if why is not None:
            raise Refused(403, "Forbidden", why, principal.name)
    request.state.principal = principal
    return principal


def audit_in(request: Request, status: int = 200) -> Callable[[Session], None]:
    """This request's audit entry, to write in the transaction that does its work: called
    with that transaction's session just before its commit, as answered with ``status``
    (a create: 200). The middleware then records nothing more, unless the request is
    answered with another status (the commit failed): then that too is recorded."""
    trail: AuditTrail = request.app.state.audit_trail
    draft: Draft = request.state.audit
    source = request.client.host if request.client else ""

    def write(session: Session) -> None:
        entry = Entry(
            draft.principal, draft.action, draft.resource, status, request.state.request_id, source
        )
        trail.record_in(session, entry)
        draft.written = status

    return write


def AdminAuth(admin_token: str = "", *, also: str = "") -> Callable[..., Awaitable[Principal]]:
    """The dependency's former name, for routers written before roles: every route is
    authorized by :func:`authorize` (its ``name=`` decides), whatever is passed here."""
    return authorize


def _named_in(body: bytes) -> list[str]:
    """Service and group names a write's JSON body names: ``name`` (or ``ServiceName``) and
    ``metadata.group``. Read as the routes read bodies (UTF-8); a body they refuse names
    nothing here."""
    try:
        spec = json.loads(body.decode("utf-8")) if body else None
    except (UnicodeDecodeError, ValueError):
        return []
    if not isinstance(spec, dict):
        return []
    meta = spec.get("metadata")
    found = [spec.get("name"), spec.get("ServiceName")]
    found.append(meta.get("group") if isinstance(meta, dict) else None)
    return [n for n in found if isinstance(n, str)]


class AuditMiddleware:
    """Gives API requests a RequestId (``x-acs-request-id``) and records each write and each
    refusal in the audit trail before its answer is sent."""

    def __init__(self, app: ASGIApp, trail: AuditTrail) -> None:
        self.app = app
        self.trail = trail

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not scope["path"].startswith(AUDITED_PREFIXES):
            await self.app(scope, receive, send)
            return
        state: dict[str, Any] = scope.setdefault("state", {})
        rid = str(uuid.uuid4()).upper()
        state["request_id"] = rid
        method = scope["method"]
        source = (scope.get("client") or ("", 0))[0]

        started = False

        async def record(status: int) -> None:
            draft = state.get("audit")
            if (
                isinstance(draft, Draft)
                and draft.written != status
                and _recorded(draft.action, method, status)
            ):
                entry = Entry(draft.principal, draft.action, draft.resource, status, rid, source)
                await run_in_threadpool(self.trail.record, entry)

        async def send_audited(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
                message["headers"] = [
                    *message.get("headers", []),
                    (b"x-acs-request-id", rid.encode()),
                ]
                await record(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, send_audited)
        except Exception:
            if not started:  # a crash: answered 500 by the server-error handler outside
                await record(500)
            raise


def _recorded(action: str, method: str, status: int) -> bool:
    if status in (401, 403):
        return True
    if kind(action) is Kind.INTERNAL:
        return False  # the gateways' load reports and route polls: not a user's write
    return method not in ("GET", "HEAD", "OPTIONS") or action in AUDITED_READS


def install(app: FastAPI, authenticator: Authenticator, trail: AuditTrail) -> None:
    app.state.authenticator = authenticator
    app.state.audit_trail = trail
    app.add_middleware(AuditMiddleware, trail=trail)
