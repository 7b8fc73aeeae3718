"""Token extraction and the digest check (pure)."""

from __future__ import annotations

import pytest

from contract.wire import token_digest
from gateway.routing.auth import digest_bytes, presented_token, token_matches


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
