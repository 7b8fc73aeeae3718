"""The reconciler's lease on each database: one holder at a time, and a follower that tries
again as soon as a holder's lease runs out (a dead leader is replaced within the lease)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from sqlalchemy.orm import Session, sessionmaker

from controlplane.store.db import make_engine, make_sessions
from controlplane.store.lease import Lease


@pytest.fixture
def sessions(database_url: str) -> Iterator[sessionmaker[Session]]:
    engine = make_engine(database_url)
    yield make_sessions(engine)
    engine.dispose()


def test_one_holder_and_a_follower_that_waits_for_the_end_of_its_lease(
    sessions: sessionmaker[Session],
) -> None:
    leader, follower = Lease(sessions, "r", "a", ttl=30), Lease(sessions, "r", "b", ttl=30)
    assert follower.retry_in() == 10  # nobody seen yet: a third of the lease
    assert leader.acquire() and leader.acquire()  # taken, renewed
    assert not follower.acquire()
    assert follower.others_left is not None and 29 < follower.others_left <= 30
    assert follower.retry_in() == 10  # a live leader renews sooner than that

    leader.ttl = 0.5  # the leader's last renewal: its lease ends in half a second
    assert leader.acquire()
    assert not follower.acquire()
    assert 0.05 < follower.retry_in() <= 0.55  # just after that end, not a period later

    leader.release()
    assert follower.acquire()  # released: taken at once
    assert follower.others_left is None and follower.retry_in() == 10
    assert not leader.acquire()
