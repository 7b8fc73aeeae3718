"""The pull's side of the node-local model cache (:mod:`processors.model_cache.server`).

:func:`processors.storage.pull.pull` asks :meth:`NodeCache.fetch` for each file it would
download, before OSS; what the cache has (same ETag and size) is checked against the CRC-64
the cache recorded and used, so a scale-up on a node that pulled the model before downloads
nothing. Each file fetched from OSS instead is offered back (:meth:`NodeCache.offer`) once
verified. The cache only ever saves time: a miss, an unreachable cache or a corrupted copy
(dropped, with a warning) sends the file to OSS as if there were no cache.

Configured by ``OPENEAS_MODEL_CACHE_URL`` and ``OPENEAS_MODEL_CACHE_TOKEN`` (the Kubernetes
runtime sets both on pull init containers when the chart's ``modelCache`` is on).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import IO

from processors.model_cache.store import address
from processors.model_cache.wire import CRC_HEADER, ETAG_HEADER, TOKEN_ENV
from processors.storage.crc64 import Crc64
from processors.storage.plan import RemoteFile

ENV_URL = "OPENEAS_MODEL_CACHE_URL"
TIMEOUT_SECONDS = 30.0
_CHUNK = 1 << 20

log = logging.getLogger(__name__)


class NodeCache:
    def __init__(self, url: str, token: str, *, timeout: float = TIMEOUT_SECONDS) -> None:
        self.url = url.rstrip("/")
        self.timeout = timeout
        self._auth = {"Authorization": f"Bearer {token}"}

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> NodeCache | None:
        url = environ.get(ENV_URL, "").strip()
        return cls(url, environ.get(TOKEN_ENV, "")) if url else None

    def fetch(self, file: RemoteFile, into: Path) -> int | None:
        """Write the cached copy of ``file`` to ``into`` and return its CRC-64, or ``None``
        (a miss, no cache, a copy that does not check out: fetch from OSS)."""
        key = address(file.etag, file.size)
        # Imported on use: see rrsa (a replica without a node cache never needs it).
        import urllib.error
        import urllib.request

        try:
            request = urllib.request.Request(self._at(key), headers=self._auth)
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                claimed = int(response.headers[CRC_HEADER])
                crc, size = _copy(response, into)
        except urllib.error.HTTPError as e:
            if e.code != 404:
                log.warning("model cache answered %d for %s: fetching from OSS", e.code, file.key)
            return None
        except (urllib.error.URLError, OSError, TypeError, ValueError) as e:
            log.warning("model cache %s unusable (%s): fetching %s from OSS", self.url, e, file.key)
            into.unlink(missing_ok=True)
            return None
        if size != file.size or crc != claimed:
            log.warning(
                "model cache's copy of %s is corrupted (%d bytes, CRC-64 %d, expected %d bytes, "
                "%d): fetching it from OSS",
                file.key,
                size,
                crc,
                file.size,
                claimed,
            )
            into.unlink(missing_ok=True)
            return None
        return crc

    def offer(self, file: RemoteFile, path: Path, crc: int) -> None:
        """Give the cache a verified copy of ``file`` (replacing a corrupted one)."""
        headers = {
            **self._auth,
            "Content-Length": str(file.size),
            "Content-Type": "application/octet-stream",
            CRC_HEADER: str(crc),
            ETAG_HEADER: file.etag,
        }
        import urllib.error
        import urllib.request

        try:
            with path.open("rb") as body:
                request = urllib.request.Request(
                    self._at(address(file.etag, file.size)),
                    data=body,
                    headers=headers,
                    method="PUT",
                )
                with urllib.request.urlopen(request, timeout=self.timeout) as response:
                    response.read()
        except (urllib.error.URLError, OSError) as e:
            log.warning("model cache %s did not take %s (%s)", self.url, file.key, e)

    def _at(self, key: str) -> str:
        return f"{self.url}/objects/{key}"


def _copy(response: IO[bytes], into: Path) -> tuple[int, int]:
    crc = Crc64()
    size = 0
    with into.open("wb") as out:
        while chunk := response.read(_CHUNK):
            crc.update(chunk)
            out.write(chunk)
            size += len(chunk)
    return crc.value, size
