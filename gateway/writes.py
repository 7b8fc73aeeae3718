"""Several pieces of one message in one system call, shared by both doors' connections."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

JOIN_BELOW = 65_536  # bytes in all: joined below (cheaper than a vectored write), else vectored


def write_parts(transport: asyncio.WriteTransport, parts: Sequence[bytes | memoryview]) -> None:
    """Write ``parts`` as one: small ones joined, large ones by a vectored write (a large
    body is not copied to be joined to its head)."""
    n = len(parts)
    if n == 1:
        transport.write(parts[0])
    elif (len(parts[0]) + len(parts[1]) if n == 2 else sum(map(len, parts))) < JOIN_BELOW:
        transport.write(b"".join(parts))
    else:
        transport.writelines(parts)
