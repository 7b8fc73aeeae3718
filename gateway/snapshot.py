"""The route table kept on disk, so a gateway restarted while the control plane is down
still serves (``OPENEAS_GATEWAY_ROUTE_SNAPSHOT``).

Written when the control plane stops answering and when the gateway stops — not per change,
so steady state costs nothing — and read only when a starting gateway gets no table from
the control plane in time. The file holds token digests and replica addresses, never a
token (routes carry theirs for signed calls: left out here, so a gateway serving from its
snapshot refuses signed calls until the control plane answers; the token itself still
opens); it is replaced atomically and readable by its owner only.

A second, shared snapshot (``OPENEAS_GATEWAY_ROUTE_SNAPSHOT_SHARED``) is only read: on
Kubernetes the leading control plane keeps the table in a ConfigMap mounted into every
gateway pod, gzip-compressed and without tokens alike, so a pod new on its node has one
too. The newer of the two by route-table version is served.

Both are read a route at a time (:mod:`gateway.table_lines`), never whole: :func:`load`
validates a file in one pass that keeps only counts, :meth:`Snapshot.pages` reads it again
as the pages a paged whole table comes in. A file that does not parse whole is ignored, with
a warning naming it, and nothing of it is applied. A file in the single-line layout of older
gateways and control planes is parsed whole instead (it was held whole when written too).
"""

from __future__ import annotations

import gzip
import io
import itertools
import logging
import os
import tempfile
import zlib
from collections.abc import Iterable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from pydantic import ValidationError

from contract.wire import GroupRoute, Route, RouteTable, whole_table_json
from gateway import table_lines
from gateway.routing.route_table import ServiceRoute

log = logging.getLogger(__name__)

_GZIP_MAGIC = b"\x1f\x8b"  # the shared snapshot is gzip-compressed
# What a file that cannot be read, or does not parse, raises while read.
_READ_ERRORS = (OSError, EOFError, zlib.error, ValueError)  # ValidationError, LayoutError


class Unreadable(Exception):
    """:meth:`Snapshot.pages` could not read the file again as :func:`load` found it."""


@dataclass(frozen=True)
class Snapshot:
    """A snapshot file found whole and valid by :func:`load`, not held in memory."""

    path: Path  # where it was read
    version: int  # the route table's
    saved_at: float  # seconds since the epoch (the file's mtime)
    routes: int  # how many routes it holds
    # The file read (device, inode, size, mtime): writers replace it whole, never alter it,
    # so the same file read again gives the same valid table.
    identity: tuple[int, int, int, int] = field(repr=False)

    def pages(self, size: int) -> Iterator[RouteTable]:
        """The table as the pages of ``size`` routes a paged whole table comes in
        (:meth:`RouteState.apply <gateway.routing.route_table.RouteState.apply>`): each
        ``full``, ``continued`` after the first, ``next_page`` set on all but the last,
        which carries the groups. Reads the file again, a page in memory at a time; raises
        :class:`Unreadable` before the first page when the file is no longer the one
        :func:`load` read, and (an I/O error) when it cannot be read to its end."""
        try:
            with _read(self.path) as (stat, version, items):
                if _identity(stat) != self.identity:
                    raise Unreadable(f"the route snapshot {self.path} changed since it was read")
                yield from _paged(version, self.routes, items, size)
        except _READ_ERRORS as e:
            raise Unreadable(f"could not read the route snapshot {self.path}: {_why(e)}") from e


def save(path: Path, table: RouteTable) -> None:
    """Replace the snapshot with ``table`` (whole), atomically; failures are logged, not
    raised: a snapshot is a fallback and never stops the gateway."""
    save_routes(path, table.version, table.routes, table.groups)


def save_routes(
    path: Path, version: int, routes: Iterable[ServiceRoute | Route], groups: list[GroupRoute]
) -> None:
    """:func:`save` of the table at ``version``, written a route at a time (a gateway's
    table at 100,000 services is never a second time in memory as wire routes); read back
    by :func:`load` a route at a time too."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".routes-", dir=path.parent)  # mode 0600
        try:
            with os.fdopen(fd, "wb") as f:
                _write(f, version, routes, groups)
            os.replace(tmp, path)
        except BaseException:
            os.unlink(tmp)
            raise
    except OSError as e:
        log.warning("could not save the route snapshot to %s: %s", path, e.strerror or e)
        return
    log.info("route table version %d saved to %s", version, path)


def _write(
    f: BinaryIO, version: int, routes: Iterable[ServiceRoute | Route], groups: list[GroupRoute]
) -> None:
    wire = (route if isinstance(route, Route) else route.wire() for route in routes)
    for piece in whole_table_json(version, wire, groups):
        f.write(piece)


def load(path: Path) -> Snapshot | None:
    """The snapshot at ``path`` once it read whole and valid (a pass holding one route at
    a time), None when there is none or it cannot be read or does not parse (logged)."""
    try:
        with _read(path) as (stat, version, items):
            routes = sum(isinstance(item, Route) for item in items)
    except FileNotFoundError:
        return None
    except _READ_ERRORS as e:
        log.warning("ignoring the route snapshot %s: %s", path, _why(e))
        return None
    return Snapshot(path, version, stat.st_mtime, routes, _identity(stat))


def newest(*found: Snapshot | None) -> Snapshot | None:
    """The snapshot of the highest route-table version (the first of equals)."""
    best: Snapshot | None = None
    for snap in found:
        if snap is not None and (best is None or snap.version > best.version):
            best = snap
    return best


@contextmanager
def _read(
    path: Path,
) -> Iterator[tuple[os.stat_result, int, Iterator[Route | GroupRoute]]]:
    """The file at ``path`` open: its status, its table's version, and its routes then its
    groups, read as they are taken (the line layout; any other is parsed whole)."""
    with ExitStack() as files:
        raw = files.enter_context(path.open("rb"))
        stat = os.fstat(raw.fileno())
        f: io.BufferedIOBase = raw
        if raw.peek(len(_GZIP_MAGIC))[: len(_GZIP_MAGIC)] == _GZIP_MAGIC:
            f = files.enter_context(gzip.GzipFile(fileobj=raw, mode="rb"))
        head = f.readline()
        version = table_lines.head_version(head)
        if version is not None:
            yield stat, version, table_lines.items(f)
        else:  # the single-line layout (the first line was the whole file)
            table = RouteTable.model_validate_json(head + f.read())
            yield stat, table.version, itertools.chain(table.routes, table.groups)


def _paged(
    version: int, count: int, items: Iterable[Route | GroupRoute], size: int
) -> Iterator[RouteTable]:
    """The ``count`` routes of ``items`` in pages of ``size``, its groups on the last."""
    page: list[Route] = []
    groups: list[GroupRoute] = []
    done = 0  # routes in the pages given
    for item in items:
        if isinstance(item, GroupRoute):
            groups.append(item)
            continue
        page.append(item)
        if len(page) == size and done + size < count:
            done += size
            yield RouteTable(
                version=version, routes=page, continued=done > size, next_page=str(done)
            )
            page = []
    yield RouteTable(version=version, routes=page, groups=groups, continued=done > 0)


def _identity(stat: os.stat_result) -> tuple[int, int, int, int]:
    return stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns


def _why(e: BaseException) -> str:
    """What went wrong, without the file's content (a validation error quotes it)."""
    if isinstance(e, ValidationError):
        return f"{e.error_count()} errors"
    if isinstance(e, OSError) and e.strerror:
        return e.strerror
    return str(e) or type(e).__name__
