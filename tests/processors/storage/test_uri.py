"""Model repository URIs: what parses to what, and the one-line fix for what does not."""

from __future__ import annotations

from pathlib import Path

import pytest

from processors.storage import (
    LocalLocation,
    OssLocation,
    PermanentStorageError,
    parse_uri,
    resolve_local,
)


@pytest.mark.parametrize(
    ("uri", "expected"),
    [
        ("oss://triton-model-repo/models", OssLocation("triton-model-repo", "models/")),
        ("oss://triton-model-repo/models/", OssLocation("triton-model-repo", "models/")),
        ("oss://triton-model-repo//models", OssLocation("triton-model-repo", "models/")),
        ("oss://b0b/a/b c/ü", OssLocation("b0b", "a/b c/ü/")),
        ("OSS://bucket/m", OssLocation("bucket", "m/")),
        ("oss://bucket", OssLocation("bucket", "")),
        ("oss://bucket/", OssLocation("bucket", "")),
        ("  oss://bucket/m  ", OssLocation("bucket", "m/")),
        ("file:///srv/models", LocalLocation(Path("/srv/models"))),
        ("file://localhost/srv/models", LocalLocation(Path("/srv/models"))),
        ("file:///srv/my%20models/", LocalLocation(Path("/srv/my models"))),
        ("/srv/models/", LocalLocation(Path("/srv/models"))),
    ],
)
def test_parses(uri: str, expected: object) -> None:
    assert parse_uri(uri) == expected


@pytest.mark.parametrize(
    ("uri", "reason"),
    [
        ("", "empty model repository URI: use oss://<bucket>/<prefix>"),
        ("models", "is relative: use oss://<bucket>/<prefix>"),
        ("oss:/bucket/m", "write the scheme with two slashes"),
        ("oss://", "no bucket in 'oss://': use oss://<bucket>/<prefix>"),
        ("oss:///models", "no bucket"),
        ("oss://Bucket_1/m", "invalid bucket name 'Bucket_1'"),
        ("oss://ab/m", "invalid bucket name 'ab'"),
        ("oss://-bucket/m", "invalid bucket name"),
        ("oss://bucket.oss-cn-hangzhou.aliyuncs.com/m", "put the endpoint in OSS_ENDPOINT"),
        ("s3://bucket/m", "unsupported scheme 's3'"),
        ("https://bucket/m", "unsupported scheme 'https'"),
        ("file://host/srv/m", "use file:///abs/path"),
        ("file://srv", "use file:///abs/path"),
        ("/srv/../etc", "contains '..'"),
    ],
)
def test_refuses_with_a_fix(uri: str, reason: str) -> None:
    with pytest.raises(PermanentStorageError) as caught:
        parse_uri(uri)
    assert reason in str(caught.value)
    assert "\n" not in str(caught.value)


def test_str_round_trips() -> None:
    for uri in ("oss://bucket/models/", "oss://bucket/"):
        assert str(parse_uri(uri)) == uri


def test_resolve_local() -> None:
    assert resolve_local("file:///srv/models") == Path("/srv/models")
    assert resolve_local("/srv/models") == Path("/srv/models")
    assert resolve_local("oss://bucket/models") is None
    with pytest.raises(PermanentStorageError):
        resolve_local("relative/models")
