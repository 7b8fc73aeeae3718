"""Alibaba Cloud's request signatures for ``/api/v2``, as the official OpenAPI SDK
(``alibabacloud_tea_openapi``) computes them: ``ACS3-HMAC-SHA256`` (its default) and the
older ROA ``acs <AccessKeyId>:<signature>`` (HMAC-SHA1). Pure functions of a request's
parts, no I/O.

Callers: ``eascmd.client`` signs with :func:`acs3_headers`; the control plane's
authentication (``controlplane.api.auth``) rebuilds the same canonical text from the
request it received and compares. Both sides share this module so they cannot drift; the
tests check it against the SDK's own signer.

Invariants: query keys and values are the decoded ones (each side encodes them here);
``path`` is the request path exactly as sent (already percent-encoded).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from urllib.parse import quote

ACS3 = "ACS3-HMAC-SHA256"
EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()
# Headers an ACS3 signature must cover, else a replayed or altered request could pass.
ACS3_REQUIRED = ("host", "x-acs-date", "x-acs-signature-nonce", "x-acs-content-sha256")
DATE_FORMAT = "%Y-%m-%dT%H:%M:%SZ"  # x-acs-date, UTC


class SignatureFormatError(ValueError):
    """An Authorization header that is not a well-formed signature of its kind."""


@dataclass(frozen=True)
class Acs3Authorization:
    access_key_id: str
    signed_headers: tuple[str, ...]  # lower-case, in the order the client listed them
    signature: str  # hex


def content_sha256(body: bytes) -> str:
    return hashlib.sha256(body).hexdigest()


def canonical_query(query: Mapping[str, str]) -> str:
    """``k=v`` pairs sorted by key, values percent-encoded (``~`` kept), joined by ``&``."""
    return "&".join(f"{k}={quote(query[k], safe='~')}" for k in sorted(query))


def canonical_headers(headers: Mapping[str, Sequence[str]], signed: Iterable[str]) -> str:
    """``name:value\\n`` per signed header, in sorted order; a repeated header's values
    (stripped) are sorted and joined by ``,``. ``headers`` keys are lower-case."""
    lines = []
    for name in sorted(signed):
        values = sorted(v.strip() for v in headers.get(name, ()))
        lines.append(f"{name}:{','.join(values)}\n")
    return "".join(lines)


def acs3_canonical_request(
    method: str,
    path: str,
    query: Mapping[str, str],
    headers: Mapping[str, Sequence[str]],
    signed: Sequence[str],
    payload_sha256: str,
) -> str:
    return "\n".join(
        (
            method.upper(),
            path or "/",
            canonical_query(query),
            canonical_headers(headers, signed),
            ";".join(sorted(signed)),
            payload_sha256,
        )
    )


def acs3_signature(secret: str, canonical_request: str) -> str:
    digest = hashlib.sha256(canonical_request.encode("utf-8")).hexdigest()
    to_sign = f"{ACS3}\n{digest}"
    return hmac.new(secret.encode("utf-8"), to_sign.encode("utf-8"), hashlib.sha256).hexdigest()


def parse_acs3(header: str) -> Acs3Authorization:
    """``ACS3-HMAC-SHA256 Credential=<id>,SignedHeaders=<a;b>,Signature=<hex>``."""
    scheme, _, rest = header.strip().partition(" ")
    if scheme != ACS3:
        raise SignatureFormatError(f"expected the {ACS3} scheme")
    fields: dict[str, str] = {}
    for part in rest.split(","):
        key, sep, value = part.strip().partition("=")
        if not sep:
            raise SignatureFormatError(f"{part.strip()!r} is not key=value")
        fields[key] = value
    missing = [k for k in ("Credential", "SignedHeaders", "Signature") if not fields.get(k)]
    if missing:
        raise SignatureFormatError(f"the Authorization header lacks {', '.join(missing)}")
    signed = tuple(h.strip().lower() for h in fields["SignedHeaders"].split(";") if h.strip())
    return Acs3Authorization(fields["Credential"], signed, fields["Signature"].lower())


def acs3_headers(
    access_key_id: str,
    secret: str,
    method: str,
    host: str,
    path: str,
    query: Mapping[str, str],
    body: bytes,
    *,
    content_type: str = "",
    now: float | None = None,
    nonce: str | None = None,
) -> dict[str, str]:
    """The headers that sign one request (``host`` included: send it as given)."""
    headers = {
        "host": host,
        "x-acs-date": time.strftime(DATE_FORMAT, time.gmtime(time.time() if now is None else now)),
        "x-acs-signature-nonce": nonce or secrets.token_hex(16),
        "x-acs-content-sha256": content_sha256(body),
    }
    if content_type:
        headers["content-type"] = content_type
    signed = sorted(headers)
    canonical = acs3_canonical_request(
        method,
        path,
        query,
        {k: [v] for k, v in headers.items()},
        signed,
        headers["x-acs-content-sha256"],
    )
    headers["authorization"] = (
        f"{ACS3} Credential={access_key_id},SignedHeaders={';'.join(signed)},"
        f"Signature={acs3_signature(secret, canonical)}"
    )
    return headers


def parse_roa(header: str) -> tuple[str, str]:
    """``acs <AccessKeyId>:<base64 signature>`` -> (id, signature)."""
    scheme, _, rest = header.strip().partition(" ")
    key_id, sep, signature = rest.strip().rpartition(":")
    if scheme.lower() != "acs" or not sep or not key_id or not signature:
        raise SignatureFormatError("expected 'acs <AccessKeyId>:<signature>'")
    return key_id, signature


def roa_string_to_sign(
    method: str, path: str, query: Mapping[str, str], headers: Mapping[str, str]
) -> str:
    """Method, Accept, Content-MD5, Content-Type, Date, every ``x-acs-*`` header sorted,
    then the path with the query sorted and not encoded (a blank value as the bare key).
    ``headers`` keys are lower-case."""
    head = "".join(
        f"{headers.get(h, '')}\n" for h in ("accept", "content-md5", "content-type", "date")
    )
    acs = "".join(f"{k}:{headers[k]}\n" for k in sorted(headers) if k.startswith("x-acs-"))
    resource = path
    if query:
        resource += "?" + "&".join(
            k if query[k] == "" else f"{k}={query[k]}" for k in sorted(query)
        )
    return f"{method.upper()}\n{head}{acs}{resource}"


def roa_signature(secret: str, string_to_sign: str) -> str:
    mac = hmac.new(secret.encode("utf-8"), string_to_sign.encode("utf-8"), hashlib.sha1)
    return base64.b64encode(mac.digest()).decode("ascii")
