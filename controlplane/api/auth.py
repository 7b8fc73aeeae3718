"""Admin authentication of the control-plane API: ``Authorization: Bearer <admin token>``
compared in constant time. The token is never logged."""

from __future__ import annotations

import hmac

from fastapi import HTTPException, Request


class AdminAuth:
    def __init__(self, admin_token: str) -> None:
        self._token = admin_token.encode()

    def __call__(self, request: Request) -> None:
        header = request.headers.get("authorization", "")
        scheme, _, presented = header.partition(" ")
        if scheme.lower() != "bearer" or not presented:
            raise HTTPException(
                401,
                "missing admin credential: send 'Authorization: Bearer <admin token>' "
                "(eascmd config -e <endpoint> -k <token>)",
                headers={"WWW-Authenticate": "Bearer"},
            )
        if not hmac.compare_digest(presented.strip().encode(), self._token):
            raise HTTPException(401, "wrong admin token", headers={"WWW-Authenticate": "Bearer"})
