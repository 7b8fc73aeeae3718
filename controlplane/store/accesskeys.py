"""AccessKey pairs on the database, and the signature nonces seen with them.

Called by the AccessKey API (create, list, delete) and by authentication (``lookup`` on
each signed call, ``use_nonce`` once per signed call). The secret is returned once, by
``create``; at rest it is sealed like service tokens.

Revocation reaches every control-plane replica within :data:`CACHE_S`: a replica keeps
what it read of a key for that long and then reads the row again (one primary-key
select per key per replica per period, whatever the call rate), so a deleted row is
refused by all of them less than a second later. Nonces are rows with a primary key: a
second use fails on whichever replica it reaches.
"""

from __future__ import annotations

import secrets
import threading
import time
from dataclasses import dataclass
from datetime import datetime
from typing import cast

from sqlalchemy import delete, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, sessionmaker

from controlplane.model.errors import ControlPlaneError, FieldProblem, InvalidSpec
from controlplane.model.roles import GLOB_RE, ROLES, Principal, Role
from controlplane.store.sealing import TokenSealer
from controlplane.store.tables import AccessKeyRow, NonceRow, utcnow

CACHE_S = 0.5  # how stale a replica's view of a key may be: revocation lands within 1 s
PRUNE_S = 60.0  # expired nonces are deleted at most this often per replica
ID_PREFIX = "OEAK"
MAX_GLOBS = 64


class AccessKeyNotFound(ControlPlaneError):
    status = 404
    title = "AccessKey not found"
    code = "InvalidAccessKeyId.NotFound"


@dataclass(frozen=True)
class Key:
    """A key as authentication needs it: who it is and the secret to check against."""

    principal: Principal
    secret: str


class AccessKeys:
    def __init__(self, sessions: sessionmaker[Session], sealer: TokenSealer) -> None:
        self._sessions = sessions
        self._sealer = sealer
        self._cache: dict[str, tuple[float, Key | None]] = {}
        self._lock = threading.Lock()
        self._pruned = float("-inf")  # the first write prunes

    def create(
        self, role: str, services: list[str] | None, description: str
    ) -> tuple[AccessKeyRow, str]:
        _check(role, services, description)
        secret = secrets.token_urlsafe(30)
        row = AccessKeyRow(
            id=ID_PREFIX + secrets.token_hex(10).upper(),
            secret=self._sealer.seal(secret),
            role=role,
            services=services,
            description=description,
            created_at=utcnow(),
        )
        with self._sessions() as s, s.begin():
            s.add(row)
        return row, secret

    def list(self) -> list[AccessKeyRow]:
        with self._sessions() as s:
            return list(s.scalars(select(AccessKeyRow).order_by(AccessKeyRow.created_at)))

    def delete(self, key_id: str) -> None:
        with self._sessions() as s, s.begin():
            row = s.get(AccessKeyRow, key_id) if len(key_id) <= 32 else None
            if row is not None:
                s.delete(row)
        with self._lock:
            self._cache.pop(key_id, None)
        if row is None:
            raise AccessKeyNotFound(f"no AccessKey {key_id!r}: 'eascmd accesskey list' shows them")

    def lookup(self, key_id: str) -> Key | None:
        now = time.monotonic()
        with self._lock:
            hit = self._cache.get(key_id)
        if hit is not None and now - hit[0] < CACHE_S:
            return hit[1]
        with self._sessions() as s:
            row = s.get(AccessKeyRow, key_id) if len(key_id) <= 32 else None
        key = None
        if row is not None:
            globs = None if row.services is None else tuple(row.services)
            role = cast(Role, row.role)  # checked on create
            key = Key(Principal(row.id, role, globs), self._sealer.open(row.secret))
        with self._lock:
            if len(self._cache) > 10_000:  # unknown ids are cached too: bound them
                self._cache.clear()
            self._cache[key_id] = (now, key)
        return key

    def use_nonce(self, key_id: str, nonce: str, expires_at: datetime) -> bool:
        """False when this key already used this nonce inside the validity window."""
        self._prune()
        try:
            with self._sessions() as s, s.begin():
                s.add(NonceRow(key=f"{key_id}:{nonce}"[:200], expires_at=expires_at))
        except IntegrityError:
            return False
        return True

    def _prune(self) -> None:
        now = time.monotonic()
        if now - self._pruned < PRUNE_S:
            return
        self._pruned = now
        with self._sessions() as s, s.begin():
            s.execute(delete(NonceRow).where(NonceRow.expires_at < utcnow()))


def _check(role: str, services: list[str] | None, description: str) -> None:
    problems = []
    if role not in ROLES:
        problems.append(FieldProblem("Role", f"{role!r} is not a role", "use " + " | ".join(ROLES)))
    if services is not None:
        if len(services) > MAX_GLOBS:
            problems.append(FieldProblem("Services", f"at most {MAX_GLOBS} globs", ""))
        for i, glob in enumerate(services):
            if not GLOB_RE.match(glob):
                problems.append(
                    FieldProblem(
                        f"Services[{i}]",
                        f"{glob[:130]!r} is not a glob of service names: 1 to 128 of a-z, "
                        "0-9, _ and the wildcards * and ?",
                        'e.g. "team_a_*"',
                    )
                )
    if len(description) > 1024:
        problems.append(FieldProblem("Description", "at most 1024 characters", ""))
    if problems:
        raise InvalidSpec(problems)
