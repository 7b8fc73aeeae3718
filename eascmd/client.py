"""HTTP client of ``eascmd`` for the control plane's REST API. Turns problem+json answers
and connection failures into :class:`ApiError` with a message a user can act on.

With an AccessKey pair in the profile each request is signed (``ACS3-HMAC-SHA256``, by
``contract.signing``, as EAS's own SDK signs); else it carries the admin token as a bearer.

On the standard library's ``urllib.request`` (proxies from the environment, HTTPS with the
system's CAs): an HTTP library's import cost more than most commands' whole request.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from email.message import Message
from typing import Any

from contract import signing
from eascmd.profile import Profile


class ApiError(RuntimeError):
    def __init__(self, message: str, status: int = 0) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class Response:
    status: int
    headers: Message
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)

    @property
    def text(self) -> str:
        return self.body.decode("utf-8", "replace")


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    """A redirect is answered as it is (the admin token never follows it elsewhere)."""

    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


class Client:
    def __init__(self, profile: Profile, timeout: float = 30.0) -> None:
        self.profile = profile
        self.timeout = timeout
        self._base = profile.endpoint.rstrip("/")
        self._headers = {"Accept": "application/json"}
        if not profile.access_key_id:
            self._headers["Authorization"] = f"Bearer {profile.token}"
        self._open = urllib.request.build_opener(_NoRedirects).open

    def service_path(self, name: str, action: str = "") -> str:
        """``name`` or EAS's ``<region>/<name>`` (``cn-shanghai/svc``: the region is the
        cluster)."""
        region, _, name = name.rpartition("/")
        cluster = region or self.profile.region
        return f"/api/v2/services/{cluster}/{name}" + (f"/{action}" if action else "")

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
        return self._request("GET", path, accept="text/plain", **kwargs).text

    def stream(self, path: str, params: dict[str, Any] | None = None) -> Iterator[str]:
        """GET ``path`` and its body as it arrives (a followed log), with no read timeout:
        the server decides when it ends. Errors as :meth:`call`'s, before the first text."""
        url = self._base + path + ("?" + urllib.parse.urlencode(params) if params else "")
        request = urllib.request.Request(url, headers=dict(self._headers), method="GET")
        try:
            answer = self._open(request, timeout=None)
        except urllib.error.HTTPError as e:
            raise ApiError(_problem_text(Response(e.code, e.headers, e.read())), e.code) from e
        except (urllib.error.URLError, OSError) as e:
            why = getattr(e, "reason", e)
            raise ApiError(
                f"cannot reach the control plane at {self.profile.endpoint} "
                f"({type(why).__name__}): is 'openeas up' running? (eascmd config -e ...)"
            ) from e
        with answer:
            while True:
                chunk = answer.read1(65536)
                if not chunk:
                    return
                yield chunk.decode("utf-8", "replace")

    def _request(
        self,
        method: str,
        path: str,
        *,
        json: Any = None,
        params: dict[str, Any] | None = None,
        accept: str = "application/json",
    ) -> Response:
        url = self._base + path
        query = {k: str(v) for k, v in (params or {}).items()}
        if query:
            url += "?" + urllib.parse.urlencode(query, quote_via=urllib.parse.quote)
        headers = {**self._headers, "Accept": accept}
        data = None
        if json is not None:
            data = _dumps(json)
            headers["Content-Type"] = "application/json"
        if self.profile.access_key_id:
            parts = urllib.parse.urlsplit(url)
            headers |= signing.acs3_headers(
                self.profile.access_key_id,
                self.profile.token,
                method,
                parts.netloc,
                parts.path,
                query,
                data or b"",
                content_type=headers.get("Content-Type", ""),
            )
            headers.pop("Content-Type", None)  # signed as content-type: sent once
        request = urllib.request.Request(url, data=data, headers=headers, method=method)
        try:
            with self._open(request, timeout=self.timeout) as answer:
                response = Response(answer.status, answer.headers, answer.read())
        except urllib.error.HTTPError as e:
            response = Response(e.code, e.headers, e.read())
        except (urllib.error.URLError, OSError) as e:
            why = getattr(e, "reason", e)
            raise ApiError(
                f"cannot reach the control plane at {self.profile.endpoint} "
                f"({type(why).__name__}): is 'openeas up' running? (eascmd config -e ...)"
            ) from e
        if 200 <= response.status < 300:
            return response
        raise ApiError(_problem_text(response), response.status)


def _dumps(value: Any) -> bytes:
    return json.dumps(value, ensure_ascii=False).encode("utf-8")


def _problem_text(response: Response) -> str:
    try:
        body = response.json()
    except ValueError:
        return f"HTTP {response.status} from the control plane"
    if not isinstance(body, dict):
        return f"HTTP {response.status} from the control plane"
    title = body.get("title", "Error")
    code = body.get("Code")
    if isinstance(code, str) and code.replace(".", "") != title.replace(" ", ""):
        title = f"{title} [{code}]"  # Alibaba Cloud's error code, as EAS's SDK shows it
    errors = body.get("errors") or []
    if not errors:
        return f"{title}: {body.get('detail', '')}"
    lines = [f"{title}:"]
    for err in errors:
        fix = f" - {err['fix']}" if err.get("fix") else ""
        lines.append(f"  {err['field']}: {err['message']}{fix}")
    return "\n".join(lines)
