"""Whether downloaded bytes are the object's: OSS's CRC-64 when it sent one, else the MD5
that a simple upload's ETag is.

:mod:`processors.storage.partial` checks a file assembled from parts with it, and
:mod:`processors.storage.pull` a file fetched whole.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable

from processors.storage.errors import TemporaryStorageError
from processors.storage.plan import RemoteFile

_MD5_ETAG = re.compile(r"[0-9A-Fa-f]{32}")  # simple uploads; multipart ETags end in "-<n>"

log = logging.getLogger(__name__)


def check(file: RemoteFile, crc: int, object_crc: int | None, md5: Callable[[], str]) -> None:
    """Raise :class:`TemporaryStorageError` unless content whose CRC-64 is ``crc`` is
    ``file``'s: equal to OSS's ``object_crc``, or without one, ``md5()`` equal to the ETag."""
    where = f"{file.key} ({file.size} bytes)"
    if object_crc is not None:
        if crc != object_crc:
            raise TemporaryStorageError(
                f"{where}: CRC64 {crc} differs from OSS's {object_crc}: corrupted in transit"
            )
    elif _MD5_ETAG.fullmatch(file.etag):
        digest = md5()
        if digest.lower() != file.etag.lower():
            raise TemporaryStorageError(
                f"{where}: MD5 {digest} differs from the ETag {file.etag}: corrupted in transit"
            )
    else:
        log.debug("%s: no CRC64 and a multipart ETag: checked by size only", file.key)
