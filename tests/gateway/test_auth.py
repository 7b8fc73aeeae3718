"""Token extraction, the digest check and EAS's signature (pure), the signatures made by
the unmodified ``eas_prediction`` SDK's own code."""

from __future__ import annotations

import base64
import hashlib
import hmac
from datetime import UTC, datetime
from email.utils import format_datetime
from typing import Any

import pytest
from eas_prediction import PredictClient

from contract.wire import token_digest
from gateway.routing.auth import (
    DATE,
    MALFORMED,
    MD5_MISMATCH,
    NO_KEY,
    NO_MD5,
    SIGNATURE,
    SKEWED,
    SigningKey,
    date_seconds,
    digest_bytes,
    is_signed,
    presented_token,
    token_matches,
    verify_signed,
)


@pytest.mark.parametrize(
    ("header", "token"),
    [
        (b"abc", b"abc"),
        (b"Bearer abc", b"abc"),
        (b"bearer abc", b"abc"),
        (b"BEARER   abc ", b"abc"),
        (b"  abc  ", b"abc"),
        (b"", None),
        (b"Bearer ", None),
        (None, None),
    ],
)
def test_presented_token(header: bytes | None, token: bytes | None) -> None:
    assert presented_token(header) == token


def test_token_matches_digest_only() -> None:
    digest = digest_bytes(token_digest("s3cret-token"))
    assert token_matches(b"s3cret-token", digest)
    assert not token_matches(b"s3cret-tokeN", digest)
    assert not token_matches(b"", digest)
    # The digest itself is not a token.
    assert not token_matches(token_digest("s3cret-token").encode(), digest)


def test_digest_case_insensitive() -> None:
    assert token_matches(b"t", digest_bytes(token_digest("t").upper()))


# -- EAS's signature (eas_prediction.PredictClient's default mode) ------------------------

KEY = "svc-token-" + "k" * 22
SERVICE_PATH = "svc/v2/models/add_sub/infer"
BODY = b'{"inputs": [{"name": "INPUT0", "shape": [4], "datatype": "FP32", "data": [1,2,3,4]}]}'


def sdk_headers(
    body: bytes = BODY,
    *,
    key: str = KEY,
    service: str = SERVICE_PATH,
    content_type: str = "",
) -> dict[bytes, bytes]:
    """The headers the unmodified SDK sends with ``body`` (its own signing code), as the
    gateway's HTTP server gives them: lower-case names, bytes."""
    client = PredictClient("127.0.0.1:1", service)
    client.set_token(key)
    if content_type:
        client.set_content_type(content_type)
    made = client.generate_singaure(bytearray(body))
    return {k.lower().encode(): v.encode() for k, v in made.items()}


def now_of(headers: dict[bytes, bytes]) -> float:
    seconds = date_seconds(headers[b"date"])
    assert seconds is not None
    return seconds


def changed(headers: dict[bytes, bytes], **values: bytes | None) -> dict[bytes, bytes]:
    out = dict(headers)
    for name, value in values.items():
        key = name.replace("_", "-").encode()
        if value is None:
            out.pop(key, None)
        else:
            out[key] = value
    return out


def test_the_sdk_signs_what_the_issue_says() -> None:
    """The SDK's bytes, spelled out: HMAC-SHA1 keyed by the token over method, hex MD5,
    Content-Type, Date and the path, base64."""
    headers = sdk_headers()
    md5 = hashlib.md5(BODY).hexdigest()
    assert headers[b"content-md5"] == md5.encode()
    assert headers[b"content-type"] == b"application/octet-stream"
    to_sign = f"POST\n{md5}\napplication/octet-stream\n{headers[b'date'].decode()}\n"
    to_sign += f"/api/predict/{SERVICE_PATH}"
    mac = hmac.new(KEY.encode(), to_sign.encode(), hashlib.sha1).digest()
    assert headers[b"authorization"] == b"EAS " + base64.b64encode(mac)


PATH = f"/api/predict/{SERVICE_PATH}"
SKEW = 900.0


def _cases() -> list[Any]:
    h = sdk_headers()
    t = now_of(h)
    typed = sdk_headers(content_type="application/json")
    long_key = "L" * 128  # a custom token's longest: HMAC hashes keys over 64 bytes first
    tampered_md5 = hashlib.md5(BODY + b" ").hexdigest().encode()
    later = format_datetime(datetime.fromtimestamp(t + 1, UTC), usegmt=True).encode()
    c = pytest.param
    return [
        c(KEY, "POST", PATH, h, BODY, t, None, id="good"),
        c(KEY, "POST", PATH, h, BODY, t + SKEW - 1, None, id="date-just-within-skew"),
        c(KEY, "POST", PATH, h, BODY, t - SKEW + 1, None, id="date-just-within-skew-ahead"),
        c(KEY, "POST", PATH, typed, BODY, t, None, id="content-type-signed"),
        c(long_key, "POST", PATH, sdk_headers(key=long_key), BODY, t, None, id="long-key"),
        c(
            KEY,
            "POST",
            "/api/predict/svc/v2/models/m/infer?x=1",
            sdk_headers(service="svc/v2/models/m/infer?x=1"),
            BODY,
            t,
            None,
            id="query-signed-as-sent",
        ),
        c(KEY, "POST", PATH, h, b"", t, MD5_MISMATCH, id="empty-body"),
        c(KEY, "POST", PATH, h, BODY + b" ", t, MD5_MISMATCH, id="tampered-body"),
        c(KEY, "POST", PATH + "x", h, BODY, t, SIGNATURE, id="tampered-path"),
        c(KEY, "POST", "/api/predict/other/v2", h, BODY, t, SIGNATURE, id="other-service"),
        c(KEY, "PUT", PATH, h, BODY, t, SIGNATURE, id="tampered-method"),
        c(KEY, "POST", PATH, changed(h, content_type=b"text/plain"), BODY, t, SIGNATURE,
          id="tampered-content-type"),
        c(KEY, "POST", PATH, changed(h, content_md5=tampered_md5), BODY + b" ", t, SIGNATURE,
          id="tampered-content-md5-to-match-a-tampered-body"),
        c(KEY, "POST", PATH, changed(h, date=later), BODY, t, SIGNATURE, id="tampered-date"),
        c(KEY + "x", "POST", PATH, h, BODY, t, SIGNATURE, id="other-key"),
        c(None, "POST", PATH, h, BODY, t, NO_KEY, id="no-key-at-the-gateway"),
        c(KEY, "POST", PATH, h, BODY, t + SKEW + 1, SKEWED, id="date-too-old"),
        c(KEY, "POST", PATH, h, BODY, t - SKEW - 1, SKEWED, id="date-ahead"),
        c(KEY, "POST", PATH, changed(h, content_md5=None), BODY, t, NO_MD5,
          id="missing-content-md5"),
        c(KEY, "POST", PATH, changed(h, date=None), BODY, t, DATE, id="missing-date"),
        c(KEY, "POST", PATH, changed(h, date=b"yesterday"), BODY, t, DATE, id="garbage-date"),
        c(KEY, "POST", PATH, changed(h, authorization=b"EAS "), BODY, t, MALFORMED,
          id="no-signature"),
        c(KEY, "POST", PATH, changed(h, authorization=KEY.encode()), BODY, t, MALFORMED,
          id="a-token-is-not-a-signature"),
        c(KEY, "POST", PATH, changed(h, authorization=None), BODY, t, MALFORMED,
          id="no-authorization"),
    ]  # fmt: skip


@pytest.mark.parametrize(("key", "method", "path", "headers", "body", "now", "kind"), _cases())
def test_verify_signed(
    key: str | None,
    method: str,
    path: str,
    headers: dict[bytes, bytes],
    body: bytes,
    now: float,
    kind: str | None,
) -> None:
    refusal = verify_signed(
        None if key is None else key.encode(), method, path, headers, body, now, SKEW
    )
    assert (refusal.kind if refusal is not None else None) == kind
    if refusal is not None:  # the detail names what was wrong, never the secret parts
        signature = headers.get(b"authorization", b"")[4:].decode()
        assert KEY not in refusal.detail
        assert not signature or signature not in refusal.detail


def test_verify_signed_reads_the_clock_by_default() -> None:
    assert verify_signed(KEY.encode(), "POST", PATH, sdk_headers(), BODY) is None


def test_the_scheme_is_case_insensitive_and_tokens_never_read_as_signatures() -> None:
    assert is_signed(b"EAS abc") and is_signed(b"eas abc") and is_signed(b"Eas abc")
    assert not is_signed(b"EASabc") and not is_signed(b"Bearer abc") and not is_signed(None)
    h = sdk_headers()
    lower = changed(h, authorization=b"eas" + h[b"authorization"][3:])
    assert verify_signed(KEY.encode(), "POST", PATH, lower, BODY, now_of(h)) is None


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        (b"Mon, 07 Dec 2026 19:30:00 GMT", 1796671800.0),
        (b"Monday, 07-Dec-26 19:30:00 GMT", 1796671800.0),  # RFC 850
        (b"Mon Dec  7 19:30:00 2026", 1796671800.0),  # asctime: no zone, read as UTC
        (b"Mon, 07 Dec 2026 20:30:00 +0100", 1796671800.0),
        (b"", None),
        (b"not a date", None),
        (b"\xff\xfe", None),
    ],
)
def test_date_seconds(value: bytes, seconds: float | None) -> None:
    assert date_seconds(value) == seconds


@pytest.mark.parametrize("length", [0, 1, 16, 32, 63, 64, 65, 128, 200])
def test_a_signing_key_macs_as_hmac_does(length: int) -> None:
    """Its precomputed states give HMAC-SHA1 for any key length (over 64 bytes, RFC 2104
    hashes the key first), call after call."""
    token = bytes((7 * i + length) % 256 for i in range(length))
    key = SigningKey(token)
    for message in (b"", b"POST\nabc\n\nDate\n/api/predict/x", bytes(range(256)) * 3):
        assert key.mac(message) == hmac.new(token, message, hashlib.sha1).digest()
    assert token.hex() not in repr(key) or not token
