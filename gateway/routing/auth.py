"""Credentials of predict calls: pure functions, called per request by the HTTP door
(:mod:`gateway.http.proxy`), the gRPC door (:mod:`gateway.grpc.rules`, tokens only) and EAS's
queue calls.

Two credentials open a service or a group:

- its token, as EAS's bare ``Authorization: <token>`` or ``Bearer <token>``. The route
  table's SHA-256 digest of it (``contract.wire.token_digest``) is compared with the
  presented token's by :func:`hmac.compare_digest`, so the comparison's timing says
  nothing about how much of a guess was right;
- EAS's signature (``eas_prediction.PredictClient``'s default), HTTP only::

      Authorization: EAS base64(HMAC-SHA1(token, string_to_sign))
      string_to_sign = "<method>\\n<Content-MD5>\\n<Content-Type>\\n<Date>\\n<target>"

  where Content-MD5 is the hex MD5 of the body, Date an RFC 1123 date within
  ``max_skew_s`` of the gateway's clock, and target the request-target as sent (path and
  query, beginning ``/api/predict/``). :func:`verify_signed` checks all of it;
  the proxy uses its parts (:func:`signed_head`, :func:`signature_matches`,
  :func:`body_matches`) so that a group's keys are tried against one parse, and a body
  still arriving is checked once read.

A refusal is a :class:`SignatureRefusal`: a kind (which part was wrong) and a detail the
door answers 401 with. Tokens and signatures are never logged nor kept beyond the call.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import time
from collections.abc import Iterable, Mapping
from email.utils import mktime_tz, parsedate_tz
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from _hashlib import HASH

MAX_SKEW_S: Final = 900.0  # EAS's 15 minutes between a signed call's Date and our clock
# Dates already parsed, by their header value: a client's Date changes once a second.
DATES_KEPT: Final = 64

# What a signed call got wrong (SignatureRefusal.kind); each is a 401 at the HTTP door.
MALFORMED: Final = "malformed"  # "EAS" with no signature after it
DATE: Final = "date"  # no Date, or one that is not an RFC 1123 date
SKEWED: Final = "skewed-date"
NO_MD5: Final = "missing-content-md5"
MD5_MISMATCH: Final = "content-md5-mismatch"
SIGNATURE: Final = "signature-mismatch"
NO_KEY: Final = "no-key"  # the gateway does not have the token to check it with


def presented_token(authorization: bytes | None) -> bytes | None:
    """The token in an ``Authorization`` header value: EAS's bare ``<token>`` or
    ``Bearer <token>`` (scheme case-insensitive, RFC 9110 §11.1). ``None`` when absent
    or empty."""
    if authorization is None:
        return None
    value = authorization.strip()
    scheme = value[:7].lower()
    if scheme == b"bearer ":
        value = value[7:].strip()
    elif scheme == b"bearer":
        return None  # the scheme without a credential
    return value or None


def digest_bytes(token_sha256: str) -> bytes:
    """The stored digest (hex, either case) in the form :func:`token_matches` compares: its
    32 bytes. A digest that is not hex gives bytes no token's digest equals."""
    try:
        return bytes.fromhex(token_sha256)
    except ValueError:
        return b""


def token_digest_of(token: bytes) -> bytes:
    """``token``'s digest in the form :func:`digest_bytes` gives the stored one; the bytes
    are hashed as sent, which is UTF-8 for any token the platform issues."""
    return hashlib.sha256(token).digest()


def token_matches(token: bytes, expected_digest: bytes) -> bool:
    """Whether ``token`` hashes to ``expected_digest`` (as made by :func:`digest_bytes`)."""
    return hmac.compare_digest(token_digest_of(token), expected_digest)


# -- EAS's signature ---------------------------------------------------------------------


def is_signed(authorization: bytes | None) -> bool:
    """Whether ``authorization`` is EAS's signature scheme (``EAS <signature>``, the scheme
    case-insensitive); a token never has a space in it, so no token reads as one."""
    return authorization is not None and authorization[:4].lower() == b"eas "


class SignatureRefusal:
    """Why a signed call is refused: ``kind`` (one of this module's constants) and a
    ``detail`` for the caller, which names the header at fault and never echoes a value
    but the Date."""

    __slots__ = ("detail", "kind")

    def __init__(self, kind: str, detail: str) -> None:
        self.kind = kind
        self.detail = detail

    def __repr__(self) -> str:
        return f"SignatureRefusal({self.kind!r}, {self.detail!r})"


class SigningKey:
    """A token as signatures are checked with: HMAC-SHA1's inner and outer hash states,
    made once per token (when its route arrives). A call then costs two copies of them;
    an HMAC made from the token each time costs several times more (OpenSSL 3 sets up a
    MAC context per call)."""

    __slots__ = ("inner", "outer")

    def __init__(self, token: bytes) -> None:
        key = hashlib.sha1(token).digest() if len(token) > 64 else token  # RFC 2104
        key = key.ljust(64, b"\0")
        self.inner: HASH = hashlib.sha1(bytes(b ^ 0x36 for b in key))
        self.outer: HASH = hashlib.sha1(bytes(b ^ 0x5C for b in key))

    def mac(self, message: bytes) -> bytes:
        """HMAC-SHA1(token, message)."""
        inner = self.inner.copy()
        inner.update(message)
        outer = self.outer.copy()
        outer.update(inner.digest())
        return outer.digest()

    def __repr__(self) -> str:
        return "SigningKey(...)"  # never the states: they sign as the token does


class SignedHead:
    """What a signed call's head says, checked for form and time: the signature, the
    string it must sign (:func:`signature_matches`) and the body's MD5 it declares
    (:func:`body_matches`)."""

    __slots__ = ("content_md5", "signature", "to_sign")

    def __init__(self, signature: bytes, to_sign: bytes, content_md5: bytes) -> None:
        self.signature = signature
        self.to_sign = to_sign
        self.content_md5 = content_md5


_dates: dict[bytes, float] = {}


def date_seconds(value: bytes) -> float | None:
    """Seconds since the epoch of an HTTP date (RFC 1123; RFC 850 and asctime forms
    too), None when it is not one. A value without a zone is read as UTC."""
    seconds = _dates.get(value)
    if seconds is not None:
        return seconds
    try:
        parsed = parsedate_tz(value.decode("latin-1"))
        if parsed is None:
            return None
        if parsed[9] is None:
            parsed = (*parsed[:9], 0)
        seconds = float(mktime_tz(parsed))
    except (ValueError, TypeError, OverflowError, IndexError):
        return None
    if len(_dates) >= DATES_KEPT:
        _dates.clear()
    _dates[value] = seconds
    return seconds


def signed_head(
    authorization: bytes,
    method: str,
    target: str,
    headers: Mapping[bytes, bytes],
    now: float,
    max_skew_s: float = MAX_SKEW_S,
) -> SignedHead | SignatureRefusal:
    """The signed call's :class:`SignedHead`, or what its head got wrong: no signature, no
    Date or one off ``now`` (``time.time()``) by more than ``max_skew_s``, no Content-MD5.
    ``headers``: names in lower case, as the gateway's HTTP server gives them."""
    signature = authorization[4:].strip()
    if not signature:
        return SignatureRefusal(MALFORMED, "the Authorization header has no signature after 'EAS'")
    date = headers.get(b"date")
    if date is None:
        return SignatureRefusal(DATE, "a signed call needs a Date header (RFC 1123, in GMT)")
    seconds = date_seconds(date)
    if seconds is None:
        return SignatureRefusal(
            DATE, "the Date header is not an RFC 1123 date (e.g. 'Mon, 07 Dec 2026 19:30:00 GMT')"
        )
    skew = seconds - now
    if skew > max_skew_s or skew < -max_skew_s:
        return SignatureRefusal(
            SKEWED,
            f"the Date header ({date.decode('latin-1')}) is {abs(skew):.0f} s "
            f"{'ahead of' if skew > 0 else 'behind'} the gateway's clock; a signed call's "
            f"Date must be within {max_skew_s:.0f} s of it, in GMT (eas-prediction writes "
            "the client's local time as GMT: run it with TZ=UTC)",
        )
    md5 = headers.get(b"content-md5")
    if md5 is None:
        return SignatureRefusal(
            NO_MD5, "a signed call needs a Content-MD5 header: the hex MD5 of its body"
        )
    content_type = headers.get(b"content-type", b"")
    to_sign = b"\n".join((method.encode("latin-1"), md5, content_type, date, _raw(target)))
    # The SDK strips the string it signs (spaces at the ends of the method or target).
    return SignedHead(signature, to_sign.strip(), md5)


def _raw(target: str) -> bytes:
    """The request-target's bytes as sent: the HTTP server decodes them as Latin-1."""
    try:
        return target.encode("latin-1")
    except UnicodeEncodeError:
        return target.encode("utf-8")


def signature_matches(key: SigningKey, head: SignedHead) -> bool:
    """Whether ``head``'s signature is the one ``key`` (a service's or group's token)
    makes."""
    return hmac.compare_digest(base64.b64encode(key.mac(head.to_sign)), head.signature)


def body_matches(content_md5: bytes, chunks: Iterable[bytes | memoryview]) -> bool:
    """Whether the body made of ``chunks`` has ``content_md5`` (hex, either case)."""
    md5 = hashlib.md5(usedforsecurity=False)
    for chunk in chunks:
        md5.update(chunk)
    return md5.hexdigest().encode("ascii") == content_md5.strip().lower()


def md5_refusal() -> SignatureRefusal:
    return SignatureRefusal(
        MD5_MISMATCH, "the body does not match its Content-MD5 header (the hex MD5 of the body)"
    )


def signature_refusal(has_key: bool) -> SignatureRefusal:
    if not has_key:
        return SignatureRefusal(
            NO_KEY,
            "this gateway cannot check signed calls for it yet (its route table came from "
            "a snapshot or an older control plane): send the token itself",
        )
    return SignatureRefusal(
        SIGNATURE,
        "the signature does not match: sign 'POST\\n<Content-MD5>\\n<Content-Type>\\n<Date>\\n"
        "<path>' with HMAC-SHA1 keyed by the token, the path as sent",
    )


def verify_signed(
    key: SigningKey | bytes | None,
    method: str,
    target: str,
    headers: Mapping[bytes, bytes],
    body: bytes | memoryview,
    now: float | None = None,
    max_skew_s: float = MAX_SKEW_S,
) -> SignatureRefusal | None:
    """None when the call (``headers`` with lower-case names, Authorization among them;
    ``target``: path and query as sent) is signed by ``key`` (the token, or its
    :class:`SigningKey`: keep one per token where calls repeat) within ``max_skew_s`` of
    ``now`` (default: the clock) and ``body`` matches its Content-MD5; else why not."""
    authorization = headers.get(b"authorization")
    if authorization is None or not is_signed(authorization):
        return SignatureRefusal(MALFORMED, "the Authorization header is not 'EAS <signature>'")
    head = signed_head(
        authorization, method, target, headers, time.time() if now is None else now, max_skew_s
    )
    if isinstance(head, SignatureRefusal):
        return head
    if isinstance(key, bytes):
        key = SigningKey(key)
    if key is None or not signature_matches(key, head):
        return signature_refusal(key is not None)
    if not body_matches(head.content_md5, (body,)):
        return md5_refusal()
    return None
