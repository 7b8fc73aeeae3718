"""Several pieces of one message in one system call, shared by both doors' connections."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Final

# Bytes in all: joined below (cheaper than a vectored write), else vectored. Final: compiled,
# a plain module constant is a dict lookup per call.
JOIN_BELOW: Final = 65_536

Chunk = bytes | memoryview


def write_parts(transport: asyncio.WriteTransport, parts: Sequence[Chunk]) -> None:
    """Write ``parts`` as one: small ones joined, large ones by a vectored write (a large
    body is not copied to be joined to its head)."""
    n = len(parts)
    if n == 1:
        transport.write(parts[0])
    elif (len(parts[0]) + len(parts[1]) if n == 2 else sum(map(len, parts))) < JOIN_BELOW:
        transport.write(b"".join(parts))
    else:
        transport.writelines(parts)


def unconnected(data: bytes) -> None:
    """A connection's bound write before it has a transport (never called: writes check)."""
    raise RuntimeError("not connected")


def write_pair(
    transport: asyncio.WriteTransport, write: Callable[[bytes], None], head: bytes, body: Chunk
) -> None:
    """A head and its body in one write, as :func:`write_parts` (``write`` is the
    transport's, bound once per connection: a method looked up per call costs more)."""
    if len(head) + len(body) < JOIN_BELOW:
        write(head + body)
    else:
        transport.writelines((head, body))
