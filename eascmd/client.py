"""HTTP client of ``eascmd`` for the control plane's REST API. Turns problem+json answers
and connection failures into :class:`ApiError` with a message a user can act on."""

from __future__ import annotations

from typing import Any

import httpx

from eascmd.profile import Profile


class ApiError(RuntimeError):
    def __init__(self, message: str, status: int = 0) -> None:
        super().__init__(message)
        self.status = status


class Client:
    def __init__(self, profile: Profile, timeout: float = 30.0) -> None:
        self.profile = profile
        self._http = httpx.Client(
            base_url=profile.endpoint,
            headers={"Authorization": f"Bearer {profile.token}"},
            timeout=timeout,
            # Loading the CA bundle costs ~0.1 s of every command; a plain-HTTP endpoint
            # (openeas up) never uses it. Redirects are not followed, so no TLS either.
            verify=profile.endpoint.startswith("https:"),
        )

    def service_path(self, name: str, action: str = "") -> str:
        return f"/api/v2/services/{self.profile.region}/{name}" + (f"/{action}" if action else "")

    def call(self, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        body: dict[str, Any] = self._request(method, path, **kwargs).json()
        return body

    def watch(self, path: str, after: str | None, wait: float) -> tuple[dict[str, Any], str | None]:
        """GET ``path`` as a long-poll: once it differs from the state ``after`` (None: at
        once), or after ``wait`` seconds. Also the state to pass next; None from a control
        plane that does not long-poll (the caller then paces itself)."""
        params = {"after": after, "wait": f"{wait:.3f}"} if after is not None else None
        response = self._request("GET", path, params=params)
        body: dict[str, Any] = response.json()
        return body, response.headers.get("X-OpenEAS-State")

    def text(self, path: str, **kwargs: Any) -> str:
        return self._request("GET", path, **kwargs).text

    def _request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        try:
            response = self._http.request(method, path, **kwargs)
        except httpx.TransportError as e:
            raise ApiError(
                f"cannot reach the control plane at {self.profile.endpoint} "
                f"({type(e).__name__}): is 'openeas up' running? (eascmd config -e ...)"
            ) from e
        if response.is_success:
            return response
        raise ApiError(_problem_text(response), response.status_code)


def _problem_text(response: httpx.Response) -> str:
    try:
        body = response.json()
    except ValueError:
        return f"HTTP {response.status_code} from the control plane"
    if not isinstance(body, dict):
        return f"HTTP {response.status_code} from the control plane"
    title = body.get("title", "Error")
    errors = body.get("errors") or []
    if not errors:
        return f"{title}: {body.get('detail', '')}"
    lines = [f"{title}:"]
    for err in errors:
        fix = f" - {err['fix']}" if err.get("fix") else ""
        lines.append(f"  {err['field']}: {err['message']}{fix}")
    return "\n".join(lines)
