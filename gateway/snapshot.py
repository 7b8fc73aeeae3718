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
"""

from __future__ import annotations

import gzip
import logging
import os
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from pydantic import ValidationError

from contract.wire import GroupRoute, Route, RouteTable, whole_table_json
from gateway.routing.route_table import ServiceRoute

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Snapshot:
    table: RouteTable
    saved_at: float  # seconds since the epoch (the file's mtime)
    path: Path | None = None  # where it was read


def save(path: Path, table: RouteTable) -> None:
    """Replace the snapshot with ``table`` (whole), atomically; failures are logged, not
    raised: a snapshot is a fallback and never stops the gateway."""
    save_routes(path, table.version, table.routes, table.groups)


def save_routes(
    path: Path, version: int, routes: Iterable[ServiceRoute | Route], groups: list[GroupRoute]
) -> None:
    """:func:`save` of the table at ``version``, written a route at a time (a gateway's
    table at 100,000 services is never a second time in memory as wire routes); read back
    by :func:`load` as one :class:`RouteTable`."""
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
    """The snapshot at ``path``, None when there is none or it cannot be read."""
    try:
        data = path.read_bytes()
        saved_at = path.stat().st_mtime
    except FileNotFoundError:
        return None
    except OSError as e:
        log.warning("could not read the route snapshot %s: %s", path, e.strerror or e)
        return None
    try:
        if data[:2] == b"\x1f\x8b":  # gzip's magic: the shared snapshot
            data = gzip.decompress(data)
        table = RouteTable.model_validate_json(data)
    except (ValidationError, OSError, EOFError) as e:
        errors = e.error_count() if isinstance(e, ValidationError) else e
        log.warning("ignoring the route snapshot %s: %s errors", path, errors)
        return None
    return Snapshot(table.model_copy(update={"full": True}), saved_at, path)


def newest(*found: Snapshot | None) -> Snapshot | None:
    """The snapshot of the highest route-table version (the first of equals)."""
    best: Snapshot | None = None
    for snap in found:
        if snap is not None and (best is None or snap.table.version > best.table.version):
            best = snap
    return best
