"""The node cache's objects on disk, content-addressed (:func:`address` of an object's ETag and
size), each with the CRC-64 its bytes had when it was offered.

:mod:`.server` calls :meth:`Store.get` and :meth:`Store.put`. Layout under the root:
``objects/<address>`` (the bytes), ``objects/<address>.json`` (CRC-64, size, ETag; its mtime
is the last use) and ``incoming/`` (uploads in progress, dropped at start). An object is
visible only once both files are in place. :meth:`Store.put` checks the bytes against the
CRC the uploader claims and makes room first (:func:`.lru.to_evict`); :meth:`Store.sweep`
drops what was unused too long. Both run when requests come, so an idle cache costs nothing.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from processors.model_cache.lru import Cached, to_evict
from processors.storage.crc64 import Crc64

ADDRESS = re.compile(r"[0-9a-f]{64}")
_CHUNK = 1 << 20


def address(etag: str, size: int) -> str:
    """Where an object lives in every node's cache: the same ETag and size, the same bytes
    (an OSS ETag is the MD5 of the content, or of its parts' MD5s)."""
    tag = etag.strip('"').lower()
    return hashlib.sha256(f"{tag}\0{size}".encode()).hexdigest()


class Refused(Exception):
    """An upload the cache does not keep; ``status`` is the HTTP answer."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status


class Readable(Protocol):
    def read(self, n: int, /) -> bytes: ...


@dataclass(frozen=True)
class Hit:
    path: Path
    size: int
    crc: int


class Store:
    def __init__(
        self,
        root: Path,
        *,
        max_bytes: int,
        max_age_s: float,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.objects = root / "objects"
        self.incoming = root / "incoming"
        self.max_bytes = max_bytes
        self.max_age_s = max_age_s
        self.clock = clock
        self._lock = threading.Lock()
        shutil.rmtree(self.incoming, ignore_errors=True)  # uploads a restart cut short
        self.objects.mkdir(parents=True, exist_ok=True)
        self.incoming.mkdir(parents=True, exist_ok=True)

    def get(self, key: str) -> Hit | None:
        """The object at ``key`` (an address), marked used now; ``None`` on a miss."""
        meta = self.objects / f"{key}.json"
        try:
            info = json.loads(meta.read_text())
            now = self.clock()
            os.utime(meta, (now, now))
            return Hit(self.objects / key, int(info["size"]), int(info["crc"]))
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def put(self, key: str, body: Readable, length: int, crc: int, etag: str) -> None:
        """Keep ``length`` bytes read from ``body`` at ``key`` if their CRC-64 is ``crc``."""
        if length > self.max_bytes:
            raise Refused(413, f"{length} bytes exceed the cache's {self.max_bytes}")
        fd, name = tempfile.mkstemp(dir=self.incoming)
        tmp = Path(name)
        try:
            got = Crc64()
            with os.fdopen(fd, "wb") as out:
                left = length
                while left and (chunk := body.read(min(_CHUNK, left))):
                    got.update(chunk)
                    out.write(chunk)
                    left -= len(chunk)
            if left:
                raise Refused(400, f"the upload ended {left} bytes short")
            if got.value != crc:
                raise Refused(400, f"CRC-64 {got.value} of the upload is not the claimed {crc}")
            meta = tmp.with_suffix(".json")
            meta.write_text(json.dumps({"size": length, "crc": crc, "etag": etag}))
            now = self.clock()
            os.utime(meta, (now, now))  # its first use
            with self._lock:
                self._evict(incoming=length)
                os.replace(tmp, self.objects / key)
                os.replace(meta, self.objects / f"{key}.json")
        finally:
            tmp.unlink(missing_ok=True)
            tmp.with_suffix(".json").unlink(missing_ok=True)

    def drop(self, key: str) -> None:
        (self.objects / f"{key}.json").unlink(missing_ok=True)  # invisible first
        (self.objects / key).unlink(missing_ok=True)

    def sweep(self) -> list[str]:
        """Drop what was unused longer than the age limit (or no longer fits), and bytes a
        crash left without their metadata."""
        with self._lock:
            for data in self.objects.iterdir():
                if ADDRESS.fullmatch(data.name) and not data.with_suffix(".json").exists():
                    data.unlink(missing_ok=True)
            return self._evict(incoming=0)

    def cached(self) -> list[Cached]:
        found: list[Cached] = []
        for meta in self.objects.glob("*.json"):
            try:
                info = json.loads(meta.read_text())
                found.append(Cached(meta.stem, int(info["size"]), meta.stat().st_mtime))
            except (OSError, ValueError, KeyError, TypeError):
                found.append(Cached(meta.stem, 0, 0.0))  # unreadable: first to go
        return found

    def _evict(self, *, incoming: int) -> list[str]:
        gone = to_evict(
            self.cached(),
            max_bytes=self.max_bytes,
            max_age_s=self.max_age_s,
            now=self.clock(),
            incoming=incoming,
        )
        for key in gone:
            self.drop(key)
        return gone
