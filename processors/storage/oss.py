"""OSS access for model pulls: the one module that imports ``oss2``.

:mod:`processors.storage.pull` calls :class:`OssBucket` to list a prefix and read byte ranges.
Every ``oss2``/``requests`` exception is turned here into a
:class:`~processors.storage.errors.PermanentStorageError` (the user must change something; the
message says what) or a :class:`~processors.storage.errors.TemporaryStorageError` (retry later),
raised ``from`` the original after scrubbing anything that could echo a credential.
``oss2`` (over a second to import, with its crypto and SDK-core dependencies) is imported on
first use, so validating a URI at spec time does not pay for it.

Configuration comes from the environment, like every Alibaba Cloud tool:
``OSS_ACCESS_KEY_ID``, ``OSS_ACCESS_KEY_SECRET``, optional ``OSS_SESSION_TOKEN`` (STS),
``OSS_ENDPOINT`` (overridden by the service's ``oss_endpoint``), and optional ``OSS_REGION``
which switches signing to V4 (OSS4-HMAC-SHA256; V1 otherwise). Without an AccessKey, RRSA's
variables (:mod:`processors.storage.rrsa`) give STS credentials renewed before they expire.
"""

from __future__ import annotations

import functools
import logging
import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from processors.storage.errors import (
    PermanentStorageError,
    StorageError,
    TemporaryStorageError,
)
from processors.storage.http_get import Connections, with_query
from processors.storage.rrsa import ENV_ROLE_ARN, OidcCredentials, configured
from processors.storage.uri import OssLocation

ENV_KEY_ID = "OSS_ACCESS_KEY_ID"
ENV_KEY_SECRET = "OSS_ACCESS_KEY_SECRET"
ENV_SESSION_TOKEN = "OSS_SESSION_TOKEN"
ENV_ENDPOINT = "OSS_ENDPOINT"
ENV_REGION = "OSS_REGION"

LIST_PAGE_SIZE = 1000  # the most ListObjectsV2 returns per page
TIMEOUT_SECONDS = 30.0  # oss2 uses it for connect and for each socket read

# Fields of OSS error replies that echo the signed material (including the STS token).
_ECHOED = ("StringToSign", "StringToSignBytes", "SignatureProvided", "CanonicalRequest")


def _sdk() -> Any:
    import oss2
    import oss2.exceptions

    # oss2 logs request headers (the STS token among them) at DEBUG and error details (whose
    # StringToSign repeats the token) at INFO: keep it quiet whatever the root logger level is.
    logging.getLogger("oss2").setLevel(logging.WARNING)
    return oss2


@dataclass(frozen=True)
class RemoteObject:
    key: str
    size: int
    etag: str  # without quotes, as OSS lists it


class ObjectBody:
    """A streaming ranged GET; :meth:`read` returns ``b""`` at the end of the range."""

    def __init__(self, result: Any, where: str) -> None:
        self._result = result
        self._where = where
        #: CRC64 of the whole object (OSS sends it on ranged reads too), if the server sent one.
        self.object_crc: int | None = result.server_crc
        # The lean client's answer reads straight into the caller's buffer; requests' not.
        self._readinto = getattr(result.resp, "readinto", None)

    def read(self, size: int) -> bytes:
        with _translated(self._where):
            return bytes(self._result.read(size))

    def readinto(self, buffer: memoryview) -> int:
        """Fill ``buffer`` with the next bytes (less only at the end): their count."""
        if self._readinto is not None:
            with _translated(self._where):
                return int(self._readinto(buffer))
        data = self.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)

    def close(self) -> None:
        self._result.close()

    def __enter__(self) -> ObjectBody:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class OssBucket:
    """One bucket of one endpoint, signed with the credentials in the environment."""

    def __init__(
        self,
        location: OssLocation,
        *,
        endpoint: str | None = None,
        pool_size: int = 8,
        env: Mapping[str, str] = os.environ,
    ) -> None:
        self.location = location
        self.endpoint = _endpoint(endpoint, env)
        self._env = env
        region = env.get(ENV_REGION, "").strip() or None
        oss2 = _sdk()
        auth = _auth(oss2, env, region, location)
        with _translated(str(location)):
            self._bucket = oss2.Bucket(
                auth,
                self.endpoint,
                location.bucket,
                connect_timeout=TIMEOUT_SECONDS,
                session=_Transport(oss2, pool_size, self.endpoint),
                # We check CRCs ourselves, per part, so ranged and resumed reads are verified too.
                enable_crc=False,
                region=region,
            )

    def copy(self, pool_size: int) -> OssBucket:
        """The same bucket with connections of its own (a forked process must not share
        sockets with its parent)."""
        return OssBucket(self.location, endpoint=self.endpoint, pool_size=pool_size, env=self._env)

    def list_page(self, token: str) -> tuple[list[RemoteObject], str | None]:
        """One ListObjectsV2 page under the prefix, and the token of the next page (if any)."""
        with _translated(str(self.location), self.endpoint):
            page = self._bucket.list_objects_v2(
                prefix=self.location.prefix, continuation_token=token, max_keys=LIST_PAGE_SIZE
            )
        objects = [RemoteObject(o.key, int(o.size), o.etag) for o in page.object_list]
        return objects, (page.next_continuation_token if page.is_truncated else None)

    def open_range(self, key: str, start: int, end: int, etag: str) -> ObjectBody:
        """Bytes ``start..end`` (inclusive) of ``key``, refused by OSS if its ETag changed."""
        where = f"oss://{self.location.bucket}/{key}"
        with _translated(where, self.endpoint):
            result = self._bucket.get_object(
                key, byte_range=(start, end), headers={"If-Match": f'"{etag}"'}
            )
        body = ObjectBody(result, where)
        got = result.content_range
        whole = result.status == 200 and start == 0 and result.content_length == end + 1
        if not whole and not (got and got.startswith(f"bytes {start}-{end}/")):
            body.close()
            raise TemporaryStorageError(f"{where}: OSS answered range {got!r} to {start}-{end}")
        return body


class _Transport:
    """What ``oss2.Bucket`` sends its signed requests through (its ``session``).

    A GET (an object's, a listing: no body) goes through
    :class:`~processors.storage.http_get.Connections`, a lean keep-alive client (a small
    object's GET in a third of the CPU), unless a proxy applies to the endpoint. The rest
    goes through one pooled ``requests.Session`` (:attr:`session`), given each request
    prepared: ``oss2.Session.do_request`` calls ``requests.Session.request``, which per call
    merges the session's headers, params, hooks and cookies into the request and formats a
    debug line of all headers, for settings a pull never makes. Either way the request is
    the one ``oss2`` built and signed, and answered as ``oss2`` expects.
    """

    def __init__(self, oss2: Any, pool_size: int, endpoint: str) -> None:
        import requests
        import requests.utils

        self._oss2 = oss2
        self._requests = requests  # imported once here, not per request
        self._pool_size = pool_size
        # requests reads the proxy variables (scanning the whole environment) and ~/.netrc
        # per request: resolve the proxy for this endpoint once, as it would (HTTPS_PROXY,
        # NO_PROXY...). OSS requests are signed, so a .netrc login is never wanted.
        self._proxies = requests.utils.get_environ_proxies(endpoint)
        self.gets = None if self._proxies else Connections(pool_size)

    @functools.cached_property
    def session(self) -> Any:
        """The ``requests.Session``, made when first needed: without a proxy a pull sends
        only GETs, all through :attr:`gets`."""
        import requests.adapters

        session = self._requests.Session()
        adapter = requests.adapters.HTTPAdapter(pool_connections=1, pool_maxsize=self._pool_size)
        session.mount("http://", adapter)
        session.mount("https://", adapter)
        session.proxies = self._proxies
        session.trust_env = False
        return session

    def do_request(self, req: Any, timeout: Any) -> Any:
        if self.gets is not None and req.method == "GET" and not req.data:
            try:
                return self.gets.get(with_query(req.url, req.params), req.headers, timeout)
            except OSError as e:
                raise self._oss2.exceptions.RequestError(e) from e
        requests = self._requests
        prepared = requests.PreparedRequest()
        prepared.prepare(
            method=req.method,
            url=req.url,
            # None marks a default requests must not add (oss2 sets Accept-Encoding so).
            headers={k: v for k, v in req.headers.items() if v is not None},
            params=req.params,
            data=req.data,
        )
        try:
            sent = self.session.send(
                prepared, stream=True, timeout=timeout, proxies=self.session.proxies
            )
        except requests.RequestException as e:
            raise self._oss2.exceptions.RequestError(e) from e
        return self._oss2.http.Response(sent)


def _endpoint(explicit: str | None, env: Mapping[str, str]) -> str:
    endpoint = (explicit or env.get(ENV_ENDPOINT, "")).strip()
    if not endpoint:
        raise PermanentStorageError(
            f"{ENV_ENDPOINT} is not set: set it to the bucket's region endpoint "
            "(e.g. https://oss-cn-hangzhou-internal.aliyuncs.com) or give the service an "
            "oss_endpoint"
        )
    if "://" not in endpoint:
        endpoint = "https://" + endpoint  # oss2 would assume plain http
    return endpoint


def _auth(oss2: Any, env: Mapping[str, str], region: str | None, location: OssLocation) -> Any:
    key_id = env.get(ENV_KEY_ID, "").strip()
    secret = env.get(ENV_KEY_SECRET, "").strip()
    if not key_id and not secret and configured(env):
        # The pod's ServiceAccount token for STS credentials, renewed before they expire.
        provider = OidcCredentials(env)
        return oss2.ProviderAuthV4(provider) if region else oss2.ProviderAuth(provider)
    for name, value in ((ENV_KEY_ID, key_id), (ENV_KEY_SECRET, secret)):
        if not value:
            raise PermanentStorageError(
                f"{name} is not set: export the AccessKey pair of a RAM user that may read "
                f"{location} ({ENV_KEY_ID}, {ENV_KEY_SECRET}, and {ENV_SESSION_TOKEN} for STS), "
                f"or run it with an RRSA ServiceAccount ({ENV_ROLE_ARN}, …)"
            )
    version = oss2.AUTH_VERSION_4 if region else oss2.AUTH_VERSION_1
    token = env.get(ENV_SESSION_TOKEN, "").strip()
    if token:
        return oss2.StsAuth(key_id, secret, token, auth_version=version)
    return oss2.make_auth(key_id, secret, version)


@contextmanager
def _translated(where: str, endpoint: str = "") -> Iterator[None]:
    try:
        yield
    except StorageError:
        raise
    except Exception as e:
        import requests

        if isinstance(e, _sdk().exceptions.OssError):
            error = _classify(e, where, endpoint)
            _scrub(e)
            raise error from e
        if isinstance(e, requests.RequestException | OSError):
            raise TemporaryStorageError(
                f"{where}: connection to OSS broke ({type(e).__name__})"
            ) from e
        raise


def _scrub(e: Any) -> None:
    for field in _ECHOED:
        e.details.pop(field, None)
    e.body = b""
    if hasattr(e.headers, "pop"):
        e.headers.pop("x-oss-err", None)


def _classify(e: Any, where: str, endpoint: str) -> StorageError:
    ex = _sdk().exceptions
    at = f" at {endpoint}" if endpoint else ""
    rid = f" (request id {e.request_id})" if e.request_id else ""
    if isinstance(e, ex.RequestError):
        cause = type(getattr(e, "exception", e)).__name__
        return TemporaryStorageError(f"{where}: cannot reach OSS{at} ({cause})")
    if isinstance(e, ex.InconsistentError):
        return TemporaryStorageError(f"{where}: data check failed in transit{rid}")
    if isinstance(e, ex.ClientError):
        return PermanentStorageError(f"{where}: {e.body}")
    code, message = e.code or "", (e.message or "")[:200]
    if e.status >= 500 or e.status == 429 or code == "RequestTimeout":
        return TemporaryStorageError(f"{where}: OSS answered {e.status} {code}{rid}")
    permanent = {
        "NoSuchBucket": f"bucket does not exist{at}: check the bucket name and that the "
        f"endpoint ({ENV_ENDPOINT} or oss_endpoint) is the bucket's region",
        "AccessDenied": "access denied: let this AccessKey list and read the prefix "
        "(oss:ListObjects, oss:GetObject in the bucket ACL or RAM policy)",
        "SignatureDoesNotMatch": f"OSS rejected the signature: {ENV_KEY_SECRET} is not the "
        f"secret of {ENV_KEY_ID} (check both for typos and stray spaces)",
        "InvalidAccessKeyId": f"OSS does not know {ENV_KEY_ID}{at}: check the key id and "
        f"endpoint (and {ENV_SESSION_TOKEN} for STS credentials)",
        "SecurityTokenExpired": f"{ENV_SESSION_TOKEN} has expired: fetch a fresh STS token",
        "RequestTimeTooSkewed": "this machine's clock is more than 15 minutes off OSS's: "
        "sync it (NTP)",
        "InvalidObjectState": "the object is archived: restore it (ossutil restore) first",
    }
    if code == "InvalidAccessKeyId" and "token" in message.lower():
        return PermanentStorageError(
            f"{where}: OSS rejected {ENV_SESSION_TOKEN}: fetch a fresh STS token{rid}"
        )
    if code in permanent:
        return PermanentStorageError(f"{where}: {permanent[code]}{rid}")
    if code in ("NoSuchKey", "PreconditionFailed"):
        # Listed a moment ago: the repository is being rewritten; a later pull will see it whole.
        return TemporaryStorageError(f"{where}: object changed during the pull ({code}){rid}")
    return PermanentStorageError(
        f"{where}: OSS refused the request: {e.status} {code} {message}{rid}"
    )
