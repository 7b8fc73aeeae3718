"""Keyset paging of the service list: a page token names the last row a page ended on
(its sort value and id), so the next page starts after it through the sort column's index,
whatever its depth, and rows inserted meanwhile neither shift nor repeat a page."""

from __future__ import annotations

import base64
import binascii
import json
from datetime import datetime
from typing import Any

from controlplane.model.errors import FieldProblem, InvalidSpec

FIELD = "pageToken"
# The largest page number a list takes: its offset stays within a 64-bit integer (SQLite's
# and PostgreSQL's bound) at any page size.
MAX_PAGE_NUMBER = 1_000_000


def encode(sort: str, order: str, value: Any, row_id: int) -> str:
    raw = value.isoformat() if isinstance(value, datetime) else value
    text = json.dumps([sort, order, raw, row_id], separators=(",", ":"))
    return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


def decode(token: str, sort: str, order: str) -> tuple[Any, int]:
    """(sort value, id) of the row the previous page ended on; InvalidSpec (a 422 naming the
    parameter) for a token that is damaged or was made for another sort or order."""
    try:
        text = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
        token_sort, token_order, value, row_id = json.loads(text)
    except (ValueError, binascii.Error) as e:
        raise _bad("is not a page token this server made") from e
    if (token_sort, token_order) != (sort, order):
        raise _bad(f"was made for sort={token_sort}&order={token_order}")
    if sort in ("createTime", "updateTime"):
        value = datetime.fromisoformat(value)
    if not isinstance(row_id, int):
        raise _bad("is not a page token this server made")
    return value, row_id


def _bad(why: str) -> InvalidSpec:
    fix = "pass the NextPageToken of the previous page with the same sort and order"
    return InvalidSpec([FieldProblem(FIELD, f"the token {why}", fix)])
