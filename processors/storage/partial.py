"""A resumable download of one object: ``<id>.data`` plus ``<id>.parts`` in the work directory.

:func:`processors.storage.pull.pull` makes one :class:`Partial` per file it must fetch in parts
(a small file is fetched whole, with nothing to resume); worker threads fill its parts and
:meth:`Partial.record` each verified part, so an interrupted pull resumes with the missing
parts only. The id hashes key, ETag and size: a changed object never
resumes from stale bytes. Resumed parts are re-read and checked against their recorded CRC
before being trusted, then the whole file is checked against OSS's CRC64 (or the ETag's MD5).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import threading
from pathlib import Path

from processors.storage.check import check
from processors.storage.crc64 import Crc64, combine
from processors.storage.errors import TemporaryStorageError
from processors.storage.plan import RemoteFile, part_ranges

_READ = 1 << 20

log = logging.getLogger(__name__)


class Partial:
    def __init__(self, directory: Path, file: RemoteFile, part_size: int) -> None:
        ident = hashlib.sha256(f"{file.key}\0{file.etag}\0{file.size}".encode()).hexdigest()[:32]
        self.file = file
        self.data = directory / f"{ident}.data"
        # JSON lines: the layout, then one line per finished part, appended (a rename over
        # the last state per part made ext4 flush, stalling the stream at every part).
        self._state = directory / f"{ident}.parts"
        self.part_size = part_size
        self.ranges = part_ranges(file.size, part_size)
        self._lock = threading.Lock()
        self._prepared = False
        self._done: dict[int, int] = {}  # part index -> CRC64 of the part
        self.object_crc: int | None = None
        self._resume()

    @property
    def pending(self) -> list[int]:
        return [i for i in range(len(self.ranges)) if i not in self._done]

    @property
    def resumed_bytes(self) -> int:
        return sum(self.ranges[i][1] - self.ranges[i][0] + 1 for i in self._done)

    def record(self, index: int, crc: int, object_crc: int | None) -> None:
        """Mark part ``index`` written and its CRC; persisted at once so a crash keeps it."""
        with self._lock:
            self._note_object_crc(object_crc)
            self._done[index] = crc
            if len(self.ranges) > 1:  # a file of one part is fetched again: no state to write
                self._append(index, crc)

    def note_object_crc(self, object_crc: int | None) -> None:
        with self._lock:
            self._note_object_crc(object_crc)

    def verify(self) -> int:
        """Check the finished file against OSS's CRC64 (else the ETag's MD5) and return its
        CRC64. A mismatch discards the download so the next pull fetches it afresh."""
        size = self.data.stat().st_size
        if self.pending or size != self.file.size:
            self.discard()
            raise TemporaryStorageError(
                f"{self.file.key} ({self.file.size} bytes): incomplete download "
                f"({size} bytes on disk)"
            )
        crc = 0
        for i, (start, end) in enumerate(self.ranges):
            crc = combine(crc, self._done[i], end - start + 1)
        try:
            check(self.file, crc, self.object_crc, self._md5)
        except TemporaryStorageError:
            self.discard()
            raise
        return crc

    def prepare(self) -> None:
        """Make the data file its full size (once; each worker fetching a part calls this)."""
        with self._lock:
            if not self._prepared:
                # Kept if resumed, created otherwise; without a Python file object (a small
                # file's fetch is a handful of system calls, this was the costliest).
                fd = os.open(self.data, os.O_WRONLY | os.O_CREAT, 0o644)
                try:
                    os.ftruncate(fd, self.file.size)
                finally:
                    os.close(fd)
                self._prepared = True

    def discard(self) -> None:
        self.data.unlink(missing_ok=True)
        self._state.unlink(missing_ok=True)
        self._done.clear()
        self._prepared = False

    def _note_object_crc(self, object_crc: int | None) -> None:
        if object_crc is None:
            return
        if self.object_crc is not None and self.object_crc != object_crc:
            raise TemporaryStorageError(f"{self.file.key}: object changed during the pull")
        self.object_crc = object_crc

    def _append(self, index: int, crc: int) -> None:
        """Add a finished part to the state (the layout first, in a new one); one write, so
        a crash leaves at worst a torn last line, which :meth:`_resume` ignores."""
        line = json.dumps({"part": index, "crc": crc, "object_crc": self.object_crc}) + "\n"
        fd = os.open(self._state, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            if not os.fstat(fd).st_size:
                layout = {"key": self.file.key, "etag": self.file.etag, "size": self.file.size}
                line = json.dumps(layout | {"part_size": self.part_size}) + "\n" + line
            os.write(fd, line.encode())
        finally:
            os.close(fd)

    def _resume(self) -> None:
        if not self._state.exists():
            return
        try:
            raw = self._state.read_bytes()
            layout, *lines = raw.split(b"\n")
            state = json.loads(layout)
            expected = {"key": self.file.key, "etag": self.file.etag, "size": self.file.size}
            if state != expected | {"part_size": self.part_size}:
                raise ValueError("different layout")
            if self.data.stat().st_size != self.file.size:
                raise ValueError("different size")
            done: dict[int, int] = {}
            object_crc = None
            for line in filter(None, lines):
                try:
                    part = json.loads(line)
                except ValueError:
                    continue  # torn by a crash
                done[int(part["part"])] = int(part["crc"])
                object_crc = part["object_crc"]
            if not raw.endswith(b"\n"):  # a torn last line: the next part's goes after it
                os.truncate(self._state, raw.rfind(b"\n") + 1)
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            self.discard()
            return
        # Parts are trusted only if the bytes on disk still have the CRC recorded for them.
        self._done = {
            i: crc for i, crc in done.items() if i < len(self.ranges) and self._crc(i) == crc
        }
        self.object_crc = None if object_crc is None else int(object_crc)
        if self._done:
            log.info(
                "%s: resuming, %d of %d parts already here",
                self.file.key,
                len(self._done),
                len(self.ranges),
            )

    def _crc(self, index: int) -> int:
        start, end = self.ranges[index]
        crc = Crc64()
        with self.data.open("rb") as f:
            f.seek(start)
            remaining = end - start + 1
            while remaining and (chunk := f.read(min(_READ, remaining))):
                crc.update(chunk)
                remaining -= len(chunk)
        return crc.value

    def _md5(self) -> str:
        digest = hashlib.md5(usedforsecurity=False)
        with self.data.open("rb") as f:
            while chunk := f.read(_READ):
                digest.update(chunk)
        return digest.hexdigest()
