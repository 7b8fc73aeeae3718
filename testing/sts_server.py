"""A local stand-in for Alibaba Cloud STS's ``AssumeRoleWithOIDC`` (RRSA), for tests.

Faithful on the wire for that one action: a form POST (RPC style, ``Format=JSON``,
``Version=2015-04-01``), anonymous (the OIDC token is the proof), answering
``{"RequestId", "Credentials": {AccessKeyId, AccessKeySecret, SecurityToken, Expiration},
"AssumedRoleUser", "OIDCTokenInfo"}`` or an error body ``{"RequestId", "Code", "Message"}``
with STS's codes for what it checks: the action and version, ``DurationSeconds`` in
900..43200, the role (``EntityNotExist.Role``), the OIDC provider
(``EntityNotExist.OIDCProvider``), the token (``AuthenticationFail.OIDCToken``). Each issued
credential is handed to ``on_issue`` (the OSS stand-in's ``add_credential``) so OSS accepts
it. Not covered: signature-based actions, policies, token claims and expiry (the test names
the one accepted token), throttling.
"""

from __future__ import annotations

import json
import secrets
import threading
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs


class StsStandIn:
    def __init__(
        self,
        role_arn: str,
        provider_arn: str,
        token: str,
        on_issue: Callable[[str, str, str], None],
    ) -> None:
        self.role_arn = role_arn
        self.provider_arn = provider_arn
        self.token = token
        self.on_issue = on_issue
        # How long issued credentials last, whatever was asked (tests shorten it).
        self.lifetime_s: float | None = None
        self.issued: list[str] = []  # AccessKeyIds, in order
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def start(self) -> StsStandIn:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def answer(self, form: dict[str, str]) -> tuple[int, dict[str, Any]]:
        request_id = str(uuid.uuid4()).upper()

        def error(status: int, code: str, message: str) -> tuple[int, dict[str, Any]]:
            return status, {"RequestId": request_id, "Code": code, "Message": message}

        if form.get("Action") != "AssumeRoleWithOIDC":
            return error(400, "InvalidAction.NotFound", "Specified api is not found.")
        if form.get("Version") != "2015-04-01" or form.get("Format", "XML") != "JSON":
            return error(400, "InvalidVersion", "Specified parameter Version is not valid.")
        for name in ("RoleArn", "OIDCProviderArn", "OIDCToken", "RoleSessionName"):
            if not form.get(name):
                return error(400, "MissingParameter", f"{name} is mandatory for this action.")
        duration = int(form.get("DurationSeconds", "3600"))
        if not 900 <= duration <= 43200:
            return error(400, "InvalidParameter.DurationSeconds", "The duration is invalid.")
        if form["OIDCProviderArn"] != self.provider_arn:
            return error(404, "EntityNotExist.OIDCProvider", "The OIDC provider does not exist.")
        if form["RoleArn"] != self.role_arn:
            return error(404, "EntityNotExist.Role", "The role does not exist.")
        if form["OIDCToken"] != self.token:
            return error(400, "AuthenticationFail.OIDCToken", "The OIDC token is invalid.")
        key_id = "STS.NRrsa" + secrets.token_hex(8)
        secret = secrets.token_urlsafe(24)
        security_token = "CAIS" + secrets.token_urlsafe(48)
        lasts = self.lifetime_s if self.lifetime_s is not None else duration
        expires = datetime.fromtimestamp(time.time() + lasts, UTC)
        self.on_issue(key_id, secret, security_token)
        self.issued.append(key_id)
        return 200, {
            "RequestId": request_id,
            "Credentials": {
                "AccessKeyId": key_id,
                "AccessKeySecret": secret,
                "SecurityToken": security_token,
                "Expiration": expires.strftime("%Y-%m-%dT%H:%M:%SZ"),
            },
            "AssumedRoleUser": {
                "Arn": f"{self.role_arn}/{form['RoleSessionName']}",
                "AssumedRoleId": f"3{secrets.randbelow(10**17)}:{form['RoleSessionName']}",
            },
            "OIDCTokenInfo": {"Issuer": "https://oidc-ack.example", "Subject": "system:sa"},
        }

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        sts = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = parse_qs(self.rfile.read(length).decode(), keep_blank_values=True)
                form = {k: v[-1] for k, v in raw.items()}
                status, body = sts.answer(form)
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json;charset=utf-8")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        return Handler
