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

import redis.asyncio as aioredis
from redis.exceptions import RedisError

log = logging.getLogger(__name__)

DEFAULT_PREFIX = "openeas:"


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

    async def close(self) -> None:
        await self.redis.aclose()
