"""EAS's queue protocol, read: which operation a request to an async service's queue is.

Pure functions, called by :mod:`gateway.queue.door` per request. The operations are those
``eas_prediction.QueueClient`` makes, told apart by method and reserved query parameters
(names between underscores); every other query parameter is a tag:

==========  ======================================  ===========================
method      query                                   operation
==========  ======================================  ===========================
POST        tags, ``_priority_``                    :class:`Put`
GET         ``_attrs_=true``                        :class:`Attributes`
GET         ``_search_=true&_index_``               :class:`Search`
GET         ``_watch_=true&_index_&_window_…``      :class:`Watch` (WebSocket)
GET         ``_index_&_length_&_timeout_…``         :class:`Get`
DELETE      ``_trunc_=true&_index_``                :class:`Truncate`
DELETE      ``_indexes_=1,2``                       :class:`Delete`
PUT         ``_indexes_=1,2``                       :class:`Commit`
==========  ======================================  ===========================

Which queue: ``/api/predict/<svc>/sink`` is the sink; anything else is the input queue —
the rest of a put's path (``QueueClient``'s ``path_suffix``) is where the replica receives
it, and the other operations ignore it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Literal
from urllib.parse import parse_qsl

INPUT: Literal["input"] = "input"
SINK: Literal["sink"] = "sink"
Which = Literal["input", "sink"]

MAX_TIMEOUT_S = 60.0  # a long-poll waits at most this long (EAS's clients ask for seconds)
MAX_LENGTH = 1000  # items one get answers at most
MAX_WINDOW = 1000
MAX_TAGS = 32


class BadQuery(ValueError):
    """The request cannot be a queue operation (answered with 400)."""


@dataclass(frozen=True)
class Put:
    tags: dict[str, str]
    priority: bool = False  # ``_priority_=1``: served before the others


@dataclass(frozen=True)
class Get:
    index: int = 0  # from this index on (0: the oldest)
    length: int = 1
    timeout_s: float = 0.0  # wait this long for a first item
    auto_delete: bool = True
    request_id: str | None = None
    tags: dict[str, str] = field(default_factory=dict)  # only items carrying these


@dataclass(frozen=True)
class Attributes:
    pass


@dataclass(frozen=True)
class Search:
    index: int


@dataclass(frozen=True)
class Watch:
    index: int
    window: int
    index_only: bool = False
    auto_commit: bool = False
    tags: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Truncate:
    index: int  # entries below it go


@dataclass(frozen=True)
class Delete:
    indexes: tuple[int, ...]


@dataclass(frozen=True)
class Commit:
    indexes: tuple[int, ...]


Operation = Put | Get | Attributes | Search | Watch | Truncate | Delete | Commit


@dataclass(frozen=True)
class Address:
    """Which queue a request names, and (for a put to the input queue) the replica path."""

    which: Which
    path: str | None  # "/v2/models/m/infer", or None for the spec's default path


def address(segments: tuple[str, ...], path_qs: str) -> Address | None:
    """The queue of ``/api/predict/<svc>/<segments>``; None when it names none
    (``sink/…`` below the sink)."""
    if segments and segments[0] == "sink":
        return Address(SINK, None) if len(segments) == 1 else None
    if not segments:
        return Address(INPUT, None)
    return Address(INPUT, path_qs.partition("?")[0])


_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*$")
_UNIT_S = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, None: 1.0}


def duration_s(value: str, name: str) -> float:
    """Go's durations as EAS's clients send them (``5s``, ``500ms``, ``1m``), or seconds."""
    m = _DURATION.match(value)
    if m is None:
        raise BadQuery(f"{name}={value!r} is not a duration: use e.g. 5s, 500ms or 1m")
    return min(float(m.group(1)) * _UNIT_S[m.group(2)], MAX_TIMEOUT_S)


def _int(query: dict[str, str], name: str, default: int, low: int, high: int) -> int:
    raw = query.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise BadQuery(f"{name}={raw!r} is not a whole number") from None
    if not low <= value <= high:
        raise BadQuery(f"{name}={value} is out of range: use {low} to {high}")
    return value


def _bool(query: dict[str, str], name: str, default: bool) -> bool:
    raw = query.get(name)
    if raw is None or raw == "":
        return default
    low = raw.lower()
    if low in ("true", "1", "yes"):
        return True
    if low in ("false", "0", "no"):
        return False
    raise BadQuery(f"{name}={raw!r} is not a boolean: use true or false")


def _indexes(query: dict[str, str]) -> tuple[int, ...]:
    raw = query.get("_indexes_", "")
    try:
        indexes = tuple(int(part) for part in raw.split(",") if part.strip())
    except ValueError:
        raise BadQuery(
            f"_indexes_={raw!r} is not a comma-separated list of indexes, e.g. 3,4"
        ) from None
    if not indexes or any(i < 1 for i in indexes):
        raise BadQuery("_indexes_ needs at least one index, each 1 or more")
    if len(indexes) > MAX_LENGTH:
        raise BadQuery(f"_indexes_ lists {len(indexes)} indexes: at most {MAX_LENGTH}")
    return indexes


def _tags(query: dict[str, str], *also_reserved: str) -> dict[str, str]:
    tags = {
        k: v
        for k, v in query.items()
        if not (k.startswith("_") and k.endswith("_")) and k not in also_reserved
    }
    if len(tags) > MAX_TAGS:
        raise BadQuery(f"{len(tags)} tags: at most {MAX_TAGS}")
    return tags


def operation(method: str, query_string: str) -> Operation:
    """The operation a request is; :class:`BadQuery` says what is wrong and how to fix it."""
    query = dict(parse_qsl(query_string, keep_blank_values=True))
    if method == "POST":
        return Put(_tags(query), priority=_bool(query, "_priority_", False))
    if method == "GET":
        if _bool(query, "_attrs_", False):
            return Attributes()
        if _bool(query, "_search_", False):
            return Search(_int(query, "_index_", 0, 1, 2**63 - 1))
        if _bool(query, "_watch_", False):
            return Watch(
                index=_int(query, "_index_", 0, 0, 2**63 - 1),
                window=_int(query, "_window_", 1, 1, MAX_WINDOW),
                index_only=_bool(query, "_index_only_", False),
                auto_commit=_bool(query, "_auto_commit_", False),
                tags=_tags(query),
            )
        request_id = query.get("requestId") or None
        return Get(
            index=_int(query, "_index_", 0, 0, 2**63 - 1),
            length=_int(query, "_length_", 1, 1, MAX_LENGTH),
            timeout_s=duration_s(query.get("_timeout_", "0"), "_timeout_"),
            auto_delete=_bool(query, "_auto_delete_", True),
            request_id=request_id,
            tags=_tags(query, "requestId"),
        )
    if method == "DELETE":
        if _bool(query, "_trunc_", False):
            return Truncate(_int(query, "_index_", 0, 1, 2**63 - 1))
        return Delete(_indexes(query))
    if method == "PUT":
        return Commit(_indexes(query))
    raise BadQuery(f"{method} is not a queue operation: use POST, GET, PUT or DELETE")
