"""Service-token check for predict calls: pure functions, called by the proxy per request.

The route table carries only SHA-256 digests of tokens (``contract.wire.token_digest``). A
presented token is hashed and the two digests compared with :func:`hmac.compare_digest`,
so the comparison's timing says nothing about how much of a guess was right. Tokens are
never logged nor kept beyond the call.
"""

from __future__ import annotations

import hashlib
import hmac


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
    """The stored digest in the form :func:`token_matches` compares (lower-case hex)."""
    return token_sha256.strip().lower().encode("ascii")


def token_digest_of(token: bytes) -> bytes:
    """``token``'s digest in the form :func:`digest_bytes` gives the stored one; the bytes
    are hashed as sent, which is UTF-8 for any token the platform issues."""
    return hashlib.sha256(token).hexdigest().encode("ascii")


def token_matches(token: bytes, expected_digest: bytes) -> bool:
    """Whether ``token`` hashes to ``expected_digest`` (as made by :func:`digest_bytes`)."""
    return hmac.compare_digest(token_digest_of(token), expected_digest)
