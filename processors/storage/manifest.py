"""The pulled repository's manifest, ``<dest>/.openeas-manifest.json``.

:func:`processors.storage.pull.pull` writes it into every tree it builds and reads it back on the
next pull, so files whose object is unchanged (same key, ETag and size) and whose local copy is
untouched (same size and mtime) are linked instead of downloaded. Its presence also marks a
directory as one a pull may replace.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path

NAME = ".openeas-manifest.json"
_VERSION = 1

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Entry:
    key: str
    etag: str
    size: int
    crc: int  # CRC64-ECMA of the content
    mtime_ns: int  # of the local copy, to notice local edits


@dataclass(frozen=True)
class Manifest:
    source: str
    files: dict[str, Entry] = field(default_factory=dict)  # relative path -> entry

    @classmethod
    def load(cls, directory: Path) -> Manifest | None:
        """The manifest in ``directory``; empty if unreadable; ``None`` if there is none."""
        path = directory / NAME
        try:
            raw = json.loads(path.read_text())
            if raw.get("version") != _VERSION:
                raise ValueError(f"version {raw.get('version')!r}")
            files = {name: Entry(**entry) for name, entry in raw["files"].items()}
            return cls(source=str(raw["source"]), files=files)
        except FileNotFoundError:
            return None
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
            # A damaged manifest only costs a full download; the directory is still ours.
            log.warning("ignoring unreadable %s (%s): downloading everything", path, e)
            return cls(source="")

    def save(self, directory: Path) -> None:
        # One line per file, each dumped by json's C encoder (json.dumps with indent= is
        # its pure-Python one: several ms for a repository of a few hundred files).
        files = ",\n".join(
            f"  {json.dumps(name)}: {json.dumps(vars(entry))}"
            for name, entry in sorted(self.files.items())
        )
        head = f'{{"version": {_VERSION}, "source": {json.dumps(self.source)}, "files": {{'
        (directory / NAME).write_text(f"{head}\n{files}\n}}}}\n")
