"""Model repository URIs: ``oss://bucket/prefix``, ``file:///abs/path`` and absolute paths.

The triton processor calls :func:`parse_uri` to validate ``--model-repository`` when a spec is
created (so a typo fails the request, not a replica later) and :func:`resolve_local` to use a
local repository in place; :func:`processors.storage.pull` calls :func:`parse_uri` too.
Parsing is pure: nothing here touches the network or the filesystem.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from urllib.parse import unquote

from processors.storage.errors import PermanentStorageError

# OSS bucket naming rules: 3-63 characters, lowercase letters, digits and hyphens,
# starting and ending with a letter or digit.
_BUCKET = re.compile(r"[a-z0-9][a-z0-9-]{1,61}[a-z0-9]")
_FORMS = "oss://<bucket>/<prefix>, file:///abs/path or an absolute path"


@dataclass(frozen=True)
class OssLocation:
    """A bucket and a key prefix that is either empty (bucket root) or ends with ``/``."""

    bucket: str
    prefix: str

    def __str__(self) -> str:
        return f"oss://{self.bucket}/{self.prefix}"


@dataclass(frozen=True)
class LocalLocation:
    path: Path

    def __str__(self) -> str:
        return str(self.path)


Location = OssLocation | LocalLocation


def parse_uri(uri: str) -> Location:
    """Parse a model repository URI or raise :class:`PermanentStorageError` saying what to type."""
    text = uri.strip()
    if not text:
        raise PermanentStorageError(f"empty model repository URI: use {_FORMS}")
    scheme, sep, rest = text.partition("://")
    if not sep:
        if text.startswith("/"):
            return LocalLocation(_absolute(text, uri))
        if re.match(r"[A-Za-z][A-Za-z0-9+.-]*:", text):
            raise PermanentStorageError(
                f"malformed model repository URI {uri!r}: write the scheme with two slashes "
                f"({_FORMS})"
            )
        raise PermanentStorageError(f"model repository path {uri!r} is relative: use {_FORMS}")
    scheme = scheme.lower()
    if scheme == "oss":
        return _parse_oss(rest, uri)
    if scheme == "file":
        host, slash, path = rest.partition("/")
        if host not in ("", "localhost") or not slash:
            raise PermanentStorageError(
                f"file URI {uri!r} names a host or a relative path: use file:///abs/path"
            )
        return LocalLocation(_absolute("/" + unquote(path), uri))
    raise PermanentStorageError(f"unsupported scheme {scheme!r} in {uri!r}: use {_FORMS}")


def resolve_local(uri: str) -> Path | None:
    """The directory a local URI names (used in place), or ``None`` for a remote one."""
    location = parse_uri(uri)
    return location.path if isinstance(location, LocalLocation) else None


def _parse_oss(rest: str, uri: str) -> OssLocation:
    bucket, _, prefix = rest.partition("/")
    if not bucket:
        raise PermanentStorageError(f"no bucket in {uri!r}: use oss://<bucket>/<prefix>")
    if "." in bucket:
        raise PermanentStorageError(
            f"{uri!r} names a host, not a bucket: write oss://<bucket>/<prefix> and put the "
            "endpoint in OSS_ENDPOINT (or the service's oss_endpoint)"
        )
    if not _BUCKET.fullmatch(bucket):
        raise PermanentStorageError(
            f"invalid bucket name {bucket!r} in {uri!r}: OSS bucket names are 3-63 lowercase "
            "letters, digits or hyphens, starting and ending with a letter or digit"
        )
    prefix = prefix.lstrip("/")  # OSS keys never start with "/": tolerate oss://b//models
    if prefix and not prefix.endswith("/"):
        prefix += "/"  # "models" must not also match "models-old/..."
    return OssLocation(bucket, prefix)


def _absolute(path: str, uri: str) -> Path:
    pure = PurePosixPath(path)
    if ".." in pure.parts:
        raise PermanentStorageError(
            f"model repository path {uri!r} contains '..': give it resolved"
        )
    return Path(pure)
