"""Leader lease in the database, so exactly one reconciler acts even when several control
planes share it. Works on SQLite and PostgreSQL: a conditional UPDATE (take it if it is
ours or expired) is atomic on both, and the first INSERT is guarded by the primary key."""

from __future__ import annotations

import time
from datetime import timedelta

from sqlalchemy import or_, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, sessionmaker

from controlplane.store.tables import LeaseRow, utcnow


class Lease:
    def __init__(
        self, sessions: sessionmaker[Session], name: str, holder: str, ttl: float = 15.0
    ) -> None:
        self._sessions = sessions
        self.name = name
        self.holder = holder
        self.ttl = ttl
        # Seconds until another holder's lease runs out, as last seen by acquire(), so a
        # follower tries again when a dead leader's lease ends, not up to a period later.
        self.others_left: float | None = None
        # Until when (monotonic) we surely hold it: counted from before the UPDATE was sent,
        # so it ends no later than the expiry another process sees in the row.
        self.held_until = 0.0

    def held(self) -> bool:
        return time.monotonic() < self.held_until

    def retry_in(self) -> float:
        """When a follower should try again: a third of the lease (a live leader renews that
        often), or just after the holder's lease runs out if that comes sooner."""
        period = self.ttl / 3
        if self.others_left is None:
            return period
        return min(period, max(self.others_left, 0.0) + 0.05)

    def acquire(self) -> bool:
        """Take or renew the lease; True while we hold it."""
        self.others_left = None
        started = time.monotonic()
        self.held_until = 0.0
        now = utcnow()
        expires = now + timedelta(seconds=self.ttl)
        with self._sessions() as s:
            taken = s.execute(
                update(LeaseRow)
                .where(LeaseRow.name == self.name)
                .where(or_(LeaseRow.holder == self.holder, LeaseRow.expires_at < now))
                .values(holder=self.holder, expires_at=expires)
            )
            if taken.rowcount:  # type: ignore[attr-defined]
                s.commit()
                self.held_until = started + self.ttl
                return True
            held = s.get(LeaseRow, self.name)
            if held is not None:
                self.others_left = (held.expires_at - now).total_seconds()
                return False
            s.add(LeaseRow(name=self.name, holder=self.holder, expires_at=expires))
            try:
                s.commit()
            except IntegrityError:
                return False  # another process inserted it first
            self.held_until = started + self.ttl
            return True

    def release(self) -> None:
        self.held_until = 0.0
        with self._sessions() as s:
            s.execute(
                update(LeaseRow)
                .where(LeaseRow.name == self.name, LeaseRow.holder == self.holder)
                .values(expires_at=utcnow() - timedelta(seconds=1))
            )
            s.commit()
