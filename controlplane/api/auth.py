"""Admin authentication of the control-plane API: ``Authorization: Bearer <admin token>``,
or the EAS SDK's bearer credential ``x-acs-bearer-token: <admin token>``, compared in
constant time. The token is never logged."""

from __future__ import annotations

import hmac

from fastapi import HTTPException, Request


class AdminAuth:
    """The admin token opens every call; ``also`` (the gateway's route-reader token, where
    set) opens only the routes this dependency guards."""

    def __init__(self, admin_token: str, *, also: str = "") -> None:
        self._tokens = [t.encode() for t in (admin_token, also) if t]

    def __call__(self, request: Request) -> None:
        header = request.headers.get("authorization", "")
        scheme, _, presented = header.partition(" ")
        if scheme.lower() != "bearer" or not presented:
            # The SDK's Config(type="bearer", bearer_token=...) sends it in its own header.
            scheme, presented = "bearer", request.headers.get("x-acs-bearer-token", "")
        if not presented:
            raise HTTPException(
                401,
                "missing admin credential: send 'Authorization: Bearer <admin token>' "
                "(eascmd config -e <endpoint> -k <token>)",
                headers={"WWW-Authenticate": "Bearer"},
            )
        given = presented.strip().encode()
        # Every comparison runs, so the time taken says nothing about which one matched.
        if not sum(hmac.compare_digest(given, token) for token in self._tokens):
            raise HTTPException(401, "wrong admin token", headers={"WWW-Authenticate": "Bearer"})
