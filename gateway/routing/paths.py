"""Request-target parsing for ``/api/predict/<service>/<triton path>``: pure functions.

The proxy calls :func:`parse_target` on the raw request-target (path and query exactly as
the client sent them). Dot-segments, empty segments and percent-escapes are resolved here,
*before* the admin-surface check, so ``/v2/models/../repository/index`` or
``/v2/%72epository/index`` cannot slip past it; the replica then receives the canonical
path, never the client's spelling of it.
"""

from __future__ import annotations

import functools
from typing import NamedTuple
from urllib.parse import quote, unquote

PREDICT_PREFIX = "/api/predict/"
_PREFIX_LEN = len(PREDICT_PREFIX)

# RFC 3986 pchar minus "%" and "/": re-encoding a decoded segment keeps these literal.
_SEGMENT_SAFE = "!$&'()*+,;=:@-._~"

# Triton's HTTP/REST admin surface, as the first segment after ``v2``.
_ADMIN_ROOTS = frozenset(
    {"repository", "systemsharedmemory", "cudasharedmemory", "trace", "logging"}
)

# A decoded segment must not carry these: an encoded "/" or "\" would re-split differently
# wherever the path is decoded again, NUL and controls have no business in a model name.
_FORBIDDEN_CHARS = frozenset("/\\") | frozenset(chr(c) for c in range(0x20)) | {"\x7f"}


class BadTarget(ValueError):
    """The request-target cannot be mapped to a service path (answered with 400)."""


class Target(NamedTuple):
    """A parsed predict call: which service, and what to ask its replica for."""

    service: str
    segments: tuple[str, ...]  # decoded segments of the replica path, e.g. ("v2", "models", …)
    path_qs: str  # canonical, percent-encoded replica path with the raw query, e.g. "/v2?x=1"
    admin: bool  # Triton's admin surface (:func:`is_admin_path`): refused


def split_query(raw_target: str) -> tuple[str, str]:
    """``"/a/b?x=1"`` → ``("/a/b", "x=1")``; the query is kept byte for byte."""
    path, sep, query = raw_target.partition("?")
    return path, query if sep else ""


def normalize_segments(raw_path: str, *, strict: bool = True) -> list[str]:
    """Decoded path segments with ``.``/``..`` resolved (clamped at the root, RFC 3986
    §5.2.4) and empty segments dropped. When ``strict``, raises :class:`BadTarget` on
    undecodable escapes or forbidden characters; otherwise lets them through (only to
    find out where a path points)."""
    out: list[str] = []
    for raw in raw_path.split("/"):
        if "%" in raw:
            try:
                seg = unquote(raw, errors="strict" if strict else "replace")
            except UnicodeDecodeError as e:
                raise BadTarget("path is not valid percent-encoded UTF-8") from e
        else:
            seg = raw
        if seg == "" or seg == ".":
            continue
        if seg == "..":
            if out:
                out.pop()
            continue
        if strict and not _FORBIDDEN_CHARS.isdisjoint(seg):
            raise BadTarget("path segment contains an encoded separator or control character")
        out.append(seg)
    return out


def encode_path(segments: list[str] | tuple[str, ...]) -> str:
    return "/" + "/".join(quote(s, safe=_SEGMENT_SAFE) for s in segments)


def _needs_normalizing(raw_path: str) -> bool:
    """False for what well-behaved clients send: no escapes, backslashes, controls,
    dot-segments, empty segments nor trailing slash (such paths take the fast path)."""
    return (
        "%" in raw_path
        or "/." in raw_path
        or "//" in raw_path
        or "\\" in raw_path
        or raw_path.endswith("/")
        or " " in raw_path
        or not (raw_path.isascii() and raw_path.isprintable())
    )


@functools.lru_cache(maxsize=4096)  # clients repeat a handful of targets: bounded memory
def parse_target(raw_target: str) -> Target | None:
    """Map a raw request-target to a :class:`Target`; ``None`` when it is not under
    ``/api/predict/<service>``. Raises :class:`BadTarget` for a malformed predict path."""
    raw_path, query = split_query(raw_target)
    rest: tuple[str, ...]
    if not _needs_normalizing(raw_path):
        if not raw_path.startswith(PREDICT_PREFIX):
            return None
        cut = raw_path.find("/", _PREFIX_LEN)
        if cut == -1:
            service, path, rest = raw_path[_PREFIX_LEN:], "/", ()
        else:
            service, path = raw_path[_PREFIX_LEN:cut], raw_path[cut:]
            rest = tuple(path[1:].split("/"))
    else:
        segs = normalize_segments(raw_path, strict=False)
        if len(segs) < 3 or segs[0] != "api" or segs[1] != "predict":
            return None  # not a predict call, however it is spelled
        segs = normalize_segments(raw_path)
        service, rest = segs[2], tuple(segs[3:])
        path = encode_path(rest)
    if not service:
        return None
    path_qs = f"{path}?{query}" if query else path
    return Target(service, rest, path_qs, is_admin_path(rest))


def is_admin_path(segments: tuple[str, ...] | list[str]) -> bool:
    """Triton's admin surface, which tenants must never reach: model repository control,
    shared-memory registration, trace and log settings (server-wide and per model).

    Compared case-insensitively so that no spelling reaches a server that might be lenient.
    """
    if len(segments) < 2 or segments[0].lower() != "v2":
        return False
    first = segments[1].lower()
    if first in _ADMIN_ROOTS:
        return True
    # v2/models/<m>[/versions/<v>]/trace/setting: "trace" anywhere below a model name.
    if first == "models":
        for segment in segments[3:]:  # a loop, not any(): this runs on every request
            if segment.lower() == "trace":
                return True
    return False
