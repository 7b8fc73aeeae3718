"""OSS credentials from RRSA (RAM Roles for Service Accounts): the pod's projected
ServiceAccount token exchanged for STS credentials with ``AssumeRoleWithOIDC``, refreshed
before they expire. :mod:`processors.storage.oss` uses it when no AccessKey is in the
environment and the RRSA variables are (ACK's pod identity webhook sets them on pods of a
ServiceAccount annotated with a RAM role):

- ``ALIBABA_CLOUD_ROLE_ARN``, ``ALIBABA_CLOUD_OIDC_PROVIDER_ARN``: the role and the cluster's
  OIDC provider;
- ``ALIBABA_CLOUD_OIDC_TOKEN_FILE``: the projected token (re-read at each exchange: the
  kubelet rotates it);
- optional ``ALIBABA_CLOUD_STS_ENDPOINT`` (default ``sts.aliyuncs.com``; a VPC endpoint such
  as ``sts-vpc.cn-hangzhou.aliyuncs.com`` from inside a VPC) and
  ``ALIBABA_CLOUD_ROLE_SESSION_NAME``.

``AssumeRoleWithOIDC`` is an anonymous call (the OIDC token is the proof), so nothing here
signs. Neither the OIDC token nor the credentials are ever logged or put in an error message.
:class:`OidcCredentials` is oss2's ``CredentialsProvider`` (duck-typed: ``get_credentials``),
called before each request; it is thread-safe.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from processors.storage.errors import PermanentStorageError, TemporaryStorageError

ENV_ROLE_ARN = "ALIBABA_CLOUD_ROLE_ARN"
ENV_PROVIDER_ARN = "ALIBABA_CLOUD_OIDC_PROVIDER_ARN"
ENV_TOKEN_FILE = "ALIBABA_CLOUD_OIDC_TOKEN_FILE"
ENV_STS_ENDPOINT = "ALIBABA_CLOUD_STS_ENDPOINT"
ENV_SESSION_NAME = "ALIBABA_CLOUD_ROLE_SESSION_NAME"

DURATION_S = 3600  # asked for; STS allows 900 s up to the role's maximum
# Refreshed when less than this is left: a request signed now still arrives in time.
REFRESH_MARGIN_S = 300.0
TIMEOUT_S = 10.0


@dataclass(frozen=True)
class StsCredentials:
    access_key_id: str
    access_key_secret: str
    security_token: str
    expires_at: float  # seconds since the epoch

    # oss2's Credentials interface.
    def get_access_key_id(self) -> str:
        return self.access_key_id

    def get_access_key_secret(self) -> str:
        return self.access_key_secret

    def get_security_token(self) -> str:
        return self.security_token

    def __repr__(self) -> str:  # never the secret or the token
        return f"StsCredentials({self.access_key_id!r}, expires_at={self.expires_at})"


def configured(env: Mapping[str, str]) -> bool:
    return all(env.get(n, "").strip() for n in (ENV_ROLE_ARN, ENV_PROVIDER_ARN, ENV_TOKEN_FILE))


class OidcCredentials:
    def __init__(
        self,
        env: Mapping[str, str],
        *,
        clock: Callable[[], float] = time.time,
        margin_s: float = REFRESH_MARGIN_S,
    ) -> None:
        self.role_arn = env[ENV_ROLE_ARN].strip()
        self.provider_arn = env[ENV_PROVIDER_ARN].strip()
        self.token_file = env[ENV_TOKEN_FILE].strip()
        endpoint = env.get(ENV_STS_ENDPOINT, "").strip() or "sts.aliyuncs.com"
        self.endpoint = endpoint if "://" in endpoint else "https://" + endpoint
        self.session_name = (
            env.get(ENV_SESSION_NAME, "").strip() or f"openeas-pull-{uuid.uuid4().hex[:8]}"
        )
        self._clock = clock
        self._margin = margin_s
        self._lock = threading.Lock()
        self._current: StsCredentials | None = None
        self.exchanges = 0  # how many times the token was exchanged (for tests, logs)

    def get_credentials(self) -> StsCredentials:
        with self._lock:
            current = self._current
            if current is None or current.expires_at - self._clock() < self._margin:
                current = self._current = self._exchange()
            return current

    def _exchange(self) -> StsCredentials:
        try:
            with open(self.token_file, encoding="utf-8") as f:
                token = f.read().strip()
        except OSError as e:
            raise PermanentStorageError(
                f"cannot read the ServiceAccount token {self.token_file} ({ENV_TOKEN_FILE}): "
                f"{e.strerror or e}; is the pod's ServiceAccount set up for RRSA?"
            ) from None
        form = {
            "Action": "AssumeRoleWithOIDC",
            "Format": "JSON",
            "Version": "2015-04-01",
            "Timestamp": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "RoleArn": self.role_arn,
            "OIDCProviderArn": self.provider_arn,
            "OIDCToken": token,
            "RoleSessionName": self.session_name,
            "DurationSeconds": str(DURATION_S),
        }
        # Here, not at the top: every replica imports this module, few ever call STS, and
        # urllib.request's HTTP stack is a good part of a replica's start.
        import urllib.error
        import urllib.parse
        import urllib.request

        request = urllib.request.Request(
            self.endpoint + "/",
            data=urllib.parse.urlencode(form).encode(),
            headers={"Content-Type": "application/x-www-form-urlencoded"},
            method="POST",
        )
        try:
            with urllib.request.urlopen(request, timeout=TIMEOUT_S) as answer:
                body = json.loads(answer.read())
        except urllib.error.HTTPError as e:
            raise _refused(e.code, _json(e.read()), self.role_arn) from None
        except (urllib.error.URLError, OSError, ValueError) as e:
            why = getattr(e, "reason", e)
            raise TemporaryStorageError(
                f"STS at {self.endpoint} did not answer AssumeRoleWithOIDC "
                f"({type(why).__name__}): retrying"
            ) from None
        self.exchanges += 1
        try:
            c = body["Credentials"]
            expires = datetime.strptime(c["Expiration"], "%Y-%m-%dT%H:%M:%SZ")
            return StsCredentials(
                c["AccessKeyId"],
                c["AccessKeySecret"],
                c["SecurityToken"],
                expires.replace(tzinfo=UTC).timestamp(),
            )
        except (KeyError, TypeError, ValueError):
            raise TemporaryStorageError(
                f"STS at {self.endpoint} answered AssumeRoleWithOIDC without credentials"
            ) from None


def _json(data: bytes) -> dict[str, Any]:
    try:
        body = json.loads(data)
    except ValueError:
        return {}
    return body if isinstance(body, dict) else {}


def _refused(status: int, body: Mapping[str, Any], role: str) -> Exception:
    code = str(body.get("Code", f"HTTP {status}"))[:100]
    message = str(body.get("Message", ""))[:300]
    text = f"STS refused AssumeRoleWithOIDC for {role}: {code} {message}".strip()
    if status >= 500 or code == "Throttling":
        return TemporaryStorageError(text)
    return PermanentStorageError(
        text + " (check the role's trust policy names this cluster's OIDC provider and the "
        "ServiceAccount, and that the token is not expired)"
    )
