"""Pull planning as pure data: which remote files map to which paths, which can be reused
from the previous copy, and which byte ranges to fetch.

:func:`processors.storage.pull.pull` lists the bucket and stats the previous copy, then asks
:func:`remote_files`, :func:`plan` and :func:`part_ranges` what to do; nothing here does I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from processors.storage.errors import PermanentStorageError
from processors.storage.manifest import NAME as MANIFEST_NAME
from processors.storage.manifest import Entry
from processors.storage.oss import RemoteObject
from processors.storage.uri import OssLocation


@dataclass(frozen=True)
class RemoteFile:
    path: str  # relative POSIX path inside the repository
    key: str
    size: int
    etag: str


@dataclass(frozen=True)
class LocalStat:
    size: int
    mtime_ns: int


@dataclass(frozen=True)
class Plan:
    reuse: list[RemoteFile]
    fetch: list[RemoteFile]


def remote_files(location: OssLocation, objects: Iterable[RemoteObject]) -> list[RemoteFile]:
    """Map listed objects to repository paths, refusing keys that cannot be laid out on disk."""
    files: list[RemoteFile] = []
    for obj in objects:
        if obj.key.endswith("/") or not obj.key.startswith(location.prefix):
            continue  # directory markers (console "folders"), and anything OSS should not list
        path = obj.key[len(location.prefix) :]
        parts = path.split("/")
        if any(part in ("", ".", "..") for part in parts) or path == MANIFEST_NAME:
            raise PermanentStorageError(
                f"object key {obj.key!r} in {location} cannot be a file of the repository "
                "(empty, '.' or '..' path segment, or a reserved name): rename or delete it"
            )
        files.append(RemoteFile(path, obj.key, obj.size, obj.etag))
    if not files:
        raise PermanentStorageError(
            f"{location} is empty: upload the model repository there "
            f"(ossutil cp -r ./models {location})"
        )
    _refuse_file_directory_clash(files, location)
    return sorted(files, key=lambda f: f.path)


def plan(
    files: Iterable[RemoteFile],
    previous: Mapping[str, Entry],
    local: Mapping[str, LocalStat],
) -> Plan:
    """Reuse a file when its object is unchanged since the last pull and its copy is untouched."""
    reuse: list[RemoteFile] = []
    fetch: list[RemoteFile] = []
    for f in files:
        entry = previous.get(f.path)
        unchanged = entry is not None and (entry.key, entry.etag, entry.size) == (
            f.key,
            f.etag,
            f.size,
        )
        untouched = entry is not None and local.get(f.path) == LocalStat(entry.size, entry.mtime_ns)
        (reuse if unchanged and untouched else fetch).append(f)
    return Plan(reuse, fetch)


WHOLE_FILE = 2**20
SMALLEST_PART = 8 * 2**20
LARGEST_PART = 64 * 2**20


def file_part_size(size: int, workers: int) -> int:
    """The part size for a file of ``size`` bytes: its share of the ``workers`` (streams
    start at parts, so each worker's stream may have one; a stream alone reads them all in
    one request), no less than :data:`SMALLEST_PART` and no more than :data:`LARGEST_PART`
    (what an interrupted pull may have to fetch again per stream)."""
    share = -(-size // max(workers, 1))
    return max(SMALLEST_PART, min(share, LARGEST_PART))


def fetched_whole(size: int, part_size: int) -> bool:
    """Whether a file is fetched by one GET and read whole into memory (one read, one CRC,
    one write straight into the tree: a file in one part that small has nothing to resume,
    so none of a part's bookkeeping): up to :data:`WHOLE_FILE` bytes, in one part."""
    return size <= min(WHOLE_FILE, part_size)


def part_ranges(size: int, part_size: int) -> list[tuple[int, int]]:
    """Inclusive byte ranges covering ``size`` bytes in ``part_size`` pieces (none for 0)."""
    if part_size <= 0:
        raise ValueError(f"part_size must be positive, not {part_size}")
    return [(start, min(start + part_size, size) - 1) for start in range(0, size, part_size)]


def _refuse_file_directory_clash(files: list[RemoteFile], location: OssLocation) -> None:
    paths = {f.path for f in files}
    for f in files:
        # Each parent directory's path (split by hand: a PurePosixPath per file cost more
        # than the rest of the plan).
        cut = f.path.rfind("/")
        while cut > 0:
            parent = f.path[:cut]
            cut = f.path.rfind("/", 0, cut)
            if parent in paths:
                raise PermanentStorageError(
                    f"{location}: {parent} is both a file and a directory "
                    f"(objects {location.prefix}{parent} and {f.key}): delete one of them"
                )
