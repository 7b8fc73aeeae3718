"""Async services' backlog, read by the control plane's autoscaler from the Redis the
gateway keeps their queues in (``OPENEAS_REDIS_URL``): the length of a service's input
stream, i.e. its messages not yet answered (queued or held by a replica).

The one control-plane module that imports redis. The key layout is the gateway's
(:mod:`gateway.queue.streams`, which the control plane does not import): it is stated here
again, as part of the contract between the two. A Redis that cannot be read gives no value
(the autoscaler then leaves the metric out, as for any metric without a value).
"""

from __future__ import annotations

import logging
from typing import Any

import redis.asyncio as aioredis
from redis.exceptions import RedisError, ResponseError

log = logging.getLogger(__name__)

DEFAULT_PREFIX = "openeas:"
REPLICAS_GROUP = "openeas-replicas"  # the gateway's consumer group of the replicas


def input_key(prefix: str, service: str) -> str:
    return f"{prefix}q:{service}:input"


class Backlog:
    def __init__(self, url: str, prefix: str = DEFAULT_PREFIX) -> None:
        self.prefix = prefix
        self.redis: aioredis.Redis = aioredis.Redis.from_url(url)

    async def of(self, service: str) -> int | None:
        try:
            return int(await self.redis.xlen(input_key(self.prefix, service)))
        except (RedisError, OSError) as e:
            log.warning("autoscaler: no backlog for %s: %s", service, type(e).__name__)
            return None

    async def status(self, service: str) -> dict[str, Any] | None:
        """What ``eascmd desc`` shows: queue lengths, dead letters, and each replica's
        consumer with the messages it holds; None when Redis cannot be read."""
        key = input_key(self.prefix, service)
        base = f"{self.prefix}q:{service}"
        try:
            pipe = self.redis.pipeline(transaction=False)
            pipe.xlen(key)
            pipe.xlen(f"{base}:sink")
            pipe.xlen(f"{base}:dead")
            backlog, sink, dead = await pipe.execute()
            try:
                consumers = await self.redis.xinfo_consumers(key, REPLICAS_GROUP)
            except ResponseError:
                consumers = []  # no replica consumed yet
        except (RedisError, OSError) as e:
            log.warning("no queue status for %s: %s", service, type(e).__name__)
            return None
        return {
            "InputLength": int(backlog),
            "SinkLength": int(sink),
            "DeadLetters": int(dead),
            "Pending": sum(int(c["pending"]) for c in consumers),
            "Consumers": [
                {"Name": c["name"].decode(), "Pending": int(c["pending"]), "IdleMs": int(c["idle"])}
                for c in consumers
            ],
        }

    async def close(self) -> None:
        await self.redis.aclose()
