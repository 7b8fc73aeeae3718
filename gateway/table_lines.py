"""A whole route table read a line at a time, as the route snapshots lay it out
(:data:`contract.wire.TABLE_HEAD` and after): one route in memory at a time, never the file.

Only that layout is taken, exactly as :func:`contract.wire.whole_table_json` writes it. A
first line that is not its head means another layout (the single line of older writers),
left to the caller. After the head, a line out of place (or a table cut short) raises
:class:`LayoutError` and a route or group that does not validate raises pydantic's
``ValidationError``; lines read to the end without either are a valid
:class:`~contract.wire.RouteTable`, the one its bytes parse to whole.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator

from contract.wire import (
    ITEM_SEPARATOR,
    ROUTES_END,
    TABLE_END,
    TABLE_HEAD,
    GroupRoute,
    Route,
)

_before, _after = TABLE_HEAD.split(b"%d")
# The version as JSON writes an integer (no leading zero), so the head parses as it reads.
_HEAD = re.compile(re.escape(_before) + rb"(-?(?:0|[1-9][0-9]*))" + re.escape(_after))


class LayoutError(ValueError):
    """A line where the layout has none of its kind."""


def head_version(line: bytes) -> int | None:
    """The table's version from a first line that is the layout's head, else None."""
    found = _HEAD.fullmatch(line)
    return int(found[1]) if found else None


def items(lines: Iterable[bytes]) -> Iterator[Route | GroupRoute]:
    """The routes, then the groups, of the lines after the head, each validated as it is
    read; raises at the first line out of the layout, or when the lines end before
    :data:`~contract.wire.TABLE_END` (a truncated file) or go on after it."""
    rest = iter(lines)
    kind: type[Route] | type[GroupRoute] = Route
    first = True
    for line in rest:
        if kind is Route and line == ROUTES_END:
            kind, first = GroupRoute, True
            continue
        if kind is GroupRoute and line == TABLE_END:
            if next(rest, None) is not None:
                raise LayoutError("text after the end of the table")
            return
        # The first item has no separator, each next one begins with it.
        if not line.endswith(b"\n") or line.startswith(ITEM_SEPARATOR) == first:
            raise LayoutError(f"a line out of the layout among the {kind.__name__}s")
        yield kind.model_validate_json(line if first else line[len(ITEM_SEPARATOR) :])
        first = False
    raise LayoutError("the table ends before its last line")
