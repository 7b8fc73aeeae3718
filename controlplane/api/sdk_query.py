"""Query parameters as the EAS SDK sends them, read into what ``Services`` takes. Pure;
tested as tables."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Literal

from controlplane.model.errors import FieldProblem, InvalidSpec
from controlplane.store.services import SortKey

_SORTS: dict[str, SortKey] = {
    "name": "name",
    "servicename": "name",
    "createtime": "createTime",
    "updatetime": "updateTime",
    "status": "status",
    "servicestatus": "status",
}


def sort_key(value: str) -> SortKey:
    """``Sort`` in either spelling (``CreateTime`` as the SDK's docs, ``createTime``)."""
    key = _SORTS.get(value.replace("_", "").lower())
    if key is None:
        raise InvalidSpec(
            [
                FieldProblem(
                    "Sort",
                    f"cannot sort by {value!r}",
                    "use one of: CreateTime, UpdateTime, ServiceName, Status",
                )
            ]
        )
    return key


def order(value: str) -> Literal["asc", "desc"]:
    low = value.lower()
    if low not in ("asc", "desc"):
        raise InvalidSpec([FieldProblem("Order", f"unknown order {value!r}", "use asc or desc")])
    return "asc" if low == "asc" else "desc"


def label_filter(value: str | None) -> dict[str, str] | None:
    """``Label``: a JSON object of label keys and values, as the SDK sends a map."""
    if not value:
        return None
    try:
        labels = json.loads(value)
    except ValueError:
        labels = None
    if not isinstance(labels, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in labels.items()
    ):
        raise InvalidSpec(
            [
                FieldProblem(
                    "Label", "expected a JSON object of strings", 'send Label={"team":"search"}'
                )
            ]
        )
    return labels


def label_map(value: object, field: str = "Labels") -> dict[str, str]:
    """``Labels`` of UpdateServiceLabel / CreateService: a map of strings, keys 1..63
    characters, values up to 255."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            value = None
    if not isinstance(value, dict) or not value:
        raise InvalidSpec(
            [
                FieldProblem(
                    field,
                    "expected a non-empty object of strings",
                    'send {"Labels": {"team": "search"}}',
                )
            ]
        )
    problems = []
    for k, v in value.items():
        if not isinstance(k, str) or not 1 <= len(k) <= 63:
            problems.append(FieldProblem(f"{field}.{k}", "a label key is 1..63 characters", ""))
        if not isinstance(v, str) or len(v) > 255:
            problems.append(
                FieldProblem(
                    f"{field}.{k}",
                    "a label value is a string of at most 255 characters",
                    "quote the value",
                )
            )
    if problems:
        raise InvalidSpec(problems)
    return dict(value)


def names(value: str | None, field: str) -> list[str]:
    """A list parameter: the SDK sends a JSON array or a comma-separated string."""
    if not value:
        return []
    if value.startswith("["):
        try:
            items = json.loads(value)
        except ValueError:
            items = None
        if not isinstance(items, list) or not all(isinstance(i, str) for i in items):
            raise InvalidSpec([FieldProblem(field, "expected a JSON array of strings", "")])
        return items
    return [v.strip() for v in value.split(",") if v.strip()]


def time(value: str | None, field: str) -> datetime | None:
    """A time as the SDK's callers write it: ``2026-01-02 15:04:05`` (UTC) or ISO 8601."""
    if not value:
        return None
    try:
        parsed = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
    except ValueError:
        raise InvalidSpec(
            [FieldProblem(field, f"{value!r} is not a time", "write 2026-01-02 15:04:05 (UTC)")]
        ) from None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)
