"""Async services' queues on Redis Streams: the one module that speaks to Redis (redis-py's
asyncio client). :mod:`gateway.queue.door` (the client protocol) and
:mod:`gateway.queue.consumer` (the replicas' side) call it; its errors leave as
:class:`QueueUnavailable`.

Keys, under the gateway's ``queue_prefix`` ``P`` and per service ``S`` and queue ``Q``
(``input`` or ``sink``):

- ``P q:S:Q`` — the stream. Entry ids are ``<index>-0``: EAS's index *is* the entry id,
  so a get, search, delete or truncate by index is one range read or trim. Fields: ``d``
  data, ``t`` tags (JSON), ``r`` request id, ``p`` replica path (input), ``c`` put time (ms).
- ``P q:S:Q:seq`` — the last index given (indexes only grow, also across truncates).
- ``P q:S:Q:rid`` — request id → index, for a get by request id.
- ``P q:S:dead`` — input messages delivered ``max_delivery`` times and never answered.
- ``P q:S:lease:<replica>`` — which gateway process consumes for a replica.
- ``P q:S:down`` — replica → until when (ms) it is presumed down after a failed call.
- ``P q:S:Q:pri`` — indexes put with ``_priority_=1``, oldest first: consumers take these
  before reading the group's next entries (the entry itself stays in the stream, so one
  whose consumer dies is still delivered, in order; answered once either way).

Invariants: a put is one script (length check, index, entry, request id) so concurrent
puts get distinct increasing indexes and a full queue never grows. An answer is one
script that writes the sink entry, acknowledges and deletes the input entry only if that
input entry still exists — a message answered by one replica (or deleted by its client)
is never answered again by another that also held it. The replicas' consumer group is
:data:`REPLICAS_GROUP`; a watch's group is the client's ``X-EAS-QueueService-Redis-Gid``.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

import redis.asyncio as aioredis
from redis.exceptions import NoScriptError, RedisError, ResponseError

from gateway.queue.frames import Item

REPLICAS_GROUP = "openeas-replicas"
ScriptArg = bytes | str | int | float


class QueueUnavailable(Exception):
    """Redis could not be reached or refused a command (answered with 503)."""


class QueueFull(Exception):
    """The queue holds its maximum length (answered with 429)."""


@dataclass(frozen=True)
class Limits:
    max_length: int
    auto_evict: bool = False


@dataclass(frozen=True)
class Entry:
    """One stream entry with everything it carries."""

    index: int
    data: bytes
    tags: dict[str, str]
    request_id: str
    path: str  # where the replica receives it ("" for the sink)

    def item(self, *, index_only: bool = False) -> Item:
        return Item(self.index, b"" if index_only else self.data, self.tags)


@dataclass(frozen=True)
class Pending:
    index: int
    consumer: str
    idle_ms: int
    deliveries: int


# KEYS: stream, seq, rid, priority list · ARGV: max length, evict (0/1), request id, data,
# tags, path, now, priority (0/1)
_PUT = """
local n = redis.call('XLEN', KEYS[1])
if n >= tonumber(ARGV[1]) then
  if ARGV[2] ~= '1' then return -1 end
  local old = redis.call('XRANGE', KEYS[1], '-', '+', 'COUNT', n - tonumber(ARGV[1]) + 1)
  for _, e in ipairs(old) do
    redis.call('XDEL', KEYS[1], e[1])
    for k = 1, #e[2], 2 do
      if e[2][k] == 'r' then redis.call('HDEL', KEYS[3], e[2][k + 1]) end
    end
  end
end
local i = redis.call('INCR', KEYS[2])
redis.call('XADD', KEYS[1], i .. '-0', 'd', ARGV[4], 't', ARGV[5], 'r', ARGV[3],
           'p', ARGV[6], 'c', ARGV[7])
redis.call('HSET', KEYS[3], ARGV[3], i)
if ARGV[8] == '1' then redis.call('RPUSH', KEYS[4], i) end
return i
"""

# KEYS: input, input rid, sink, sink seq, sink rid · ARGV: group, entry id, sink max length,
# evict, request id, data, tags, now, write (0: acknowledge only: an empty answer)
_ANSWER = """
if #redis.call('XRANGE', KEYS[1], ARGV[2], ARGV[2]) == 0 then return 0 end
local i = 0
if ARGV[9] == '1' then
  local n = redis.call('XLEN', KEYS[3])
  if n >= tonumber(ARGV[3]) then
    if ARGV[4] ~= '1' then return -1 end
    local old = redis.call('XRANGE', KEYS[3], '-', '+', 'COUNT', n - tonumber(ARGV[3]) + 1)
    for _, e in ipairs(old) do redis.call('XDEL', KEYS[3], e[1]) end
  end
  i = redis.call('INCR', KEYS[4])
  redis.call('XADD', KEYS[3], i .. '-0', 'd', ARGV[6], 't', ARGV[7], 'r', ARGV[5],
             'p', '', 'c', ARGV[8])
  redis.call('HSET', KEYS[5], ARGV[5], i)
end
redis.call('XACK', KEYS[1], ARGV[1], ARGV[2])
redis.call('XDEL', KEYS[1], ARGV[2])
redis.call('HDEL', KEYS[2], ARGV[5])
return i
"""

# KEYS: input, input rid, dead · ARGV: group, entry id, deliveries, reason
_BURY = """
local e = redis.call('XRANGE', KEYS[1], ARGV[2], ARGV[2])
if #e == 0 then return 0 end
local f = e[1][2]
table.insert(f, 'deliveries'); table.insert(f, ARGV[3])
table.insert(f, 'reason'); table.insert(f, ARGV[4])
redis.call('XADD', KEYS[3], '*', unpack(f))
redis.call('XACK', KEYS[1], ARGV[1], ARGV[2])
redis.call('XDEL', KEYS[1], ARGV[2])
for k = 1, #f, 2 do
  if f[k] == 'r' then redis.call('HDEL', KEYS[2], f[k + 1]) end
end
return 1
"""

# KEYS: stream, rid · ARGV: first id ('-' or '<index>-0'), count — read and delete at once,
# so two clients getting at the same time never both get one entry.
_TAKE = """
local rows = redis.call('XRANGE', KEYS[1], ARGV[1], '+', 'COUNT', tonumber(ARGV[2]))
for _, e in ipairs(rows) do
  redis.call('XDEL', KEYS[1], e[1])
  for k = 1, #e[2], 2 do
    if e[2][k] == 'r' then redis.call('HDEL', KEYS[2], e[2][k + 1]) end
  end
end
return rows
"""

# KEYS: lease · ARGV: owner, ttl ms — take it when free, keep it when ours.
_LEASE = """
local v = redis.call('GET', KEYS[1])
if v == false or v == ARGV[1] then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return 1
end
return 0
"""

_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then redis.call('DEL', KEYS[1]) end
return 0
"""


def entry_id(index: int) -> str:
    return f"{index}-0"


def index_of(entry_id: bytes | str) -> int:
    text = entry_id.decode() if isinstance(entry_id, bytes) else entry_id
    return int(text.partition("-")[0])


def _entry(raw_id: bytes, fields: Mapping[bytes, bytes]) -> Entry:
    tags_raw = fields.get(b"t", b"{}")
    try:
        tags = json.loads(tags_raw)
    except ValueError:
        tags = {}
    return Entry(
        index=index_of(raw_id),
        data=fields.get(b"d", b""),
        tags=tags if isinstance(tags, dict) else {},
        request_id=fields.get(b"r", b"").decode(),
        path=fields.get(b"p", b"").decode(),
    )


class Streams:
    """The queues of every async service, in one Redis."""

    def __init__(self, url: str, prefix: str = "openeas:") -> None:
        self.prefix = prefix
        self.redis: aioredis.Redis = aioredis.Redis.from_url(url)
        self._put = self.redis.register_script(_PUT)
        self._answer = self.redis.register_script(_ANSWER)
        self._bury = self.redis.register_script(_BURY)
        self._lease = self.redis.register_script(_LEASE)
        self._release = self.redis.register_script(_RELEASE)
        self._take = self.redis.register_script(_TAKE)
        # Puts waiting for the next pipeline: those made in one turn of the event loop go
        # to Redis together, in one write and one round trip.
        self._puts: list[tuple[list[str], list[ScriptArg], asyncio.Future[int]]] = []
        self._sending: set[asyncio.Task[None]] = set()

    async def close(self) -> None:
        await self.redis.aclose()

    def key(self, service: str, which: str) -> str:
        return f"{self.prefix}q:{service}:{which}"

    async def _call(self, coro: Any) -> Any:
        try:
            return await coro
        except (RedisError, OSError, TimeoutError) as e:  # (its socket's errors too)
            raise QueueUnavailable(f"the queue store is unavailable ({type(e).__name__})") from e

    # -- the client protocol ------------------------------------------------------------

    async def put(
        self,
        service: str,
        which: str,
        data: bytes,
        tags: Mapping[str, str],
        limits: Limits,
        *,
        path: str = "",
        request_id: str | None = None,
        priority: bool = False,
    ) -> tuple[int, str]:
        """Append one entry: ``(index, request id)``; :class:`QueueFull` when full.
        ``priority``: consumers take it before the entries put without."""
        key = self.key(service, which)
        rid = request_id or str(uuid.uuid4())
        args: list[ScriptArg] = [
            limits.max_length,
            int(limits.auto_evict),
            rid,
            data,
            json.dumps(dict(tags)),
            path,
            int(time.time() * 1000),
            int(priority),
        ]
        loop = asyncio.get_running_loop()
        done: asyncio.Future[int] = loop.create_future()
        self._puts.append(([key, f"{key}:seq", f"{key}:rid", f"{key}:pri"], args, done))
        if len(self._puts) == 1:
            loop.call_soon(self._send_puts)
        index = await done
        if index < 0:
            raise QueueFull(f"the {which} queue holds its maximum of {limits.max_length} entries")
        return index, rid

    def _send_puts(self) -> None:
        batch, self._puts = self._puts, []
        task = asyncio.create_task(self._pipeline_puts(batch))
        self._sending.add(task)
        task.add_done_callback(self._sending.discard)

    async def _pipeline_puts(
        self, batch: list[tuple[list[str], list[ScriptArg], asyncio.Future[int]]]
    ) -> None:
        try:
            results = await self._run_puts(batch)
            if any(isinstance(r, NoScriptError) for r in results):  # a restarted Redis
                await self.redis.script_load(_PUT)
                results = await self._run_puts(batch)
        except RedisError as e:
            error = QueueUnavailable(f"the queue store is unavailable ({type(e).__name__})")
            results = [error] * len(batch)
        for (_, _, done), result in zip(batch, results, strict=True):
            if done.done():
                continue
            if isinstance(result, Exception):
                done.set_exception(
                    result
                    if isinstance(result, QueueUnavailable)
                    else QueueUnavailable(f"the queue store refused a put ({result})")
                )
            else:
                done.set_result(int(result))

    async def _run_puts(
        self, batch: list[tuple[list[str], list[ScriptArg], asyncio.Future[int]]]
    ) -> list[Any]:
        pipe = self.redis.pipeline(transaction=False)
        for keys, args, _ in batch:
            pipe.evalsha(self._put.sha, len(keys), *keys, *args)
        return list(await pipe.execute(raise_on_error=False))

    async def take_priority(self, service: str, count: int) -> list[Entry]:
        """Up to ``count`` input entries put with priority, still there, oldest first."""
        key = self.key(service, "input")
        raw = await self._call(self.redis.lpop(f"{key}:pri", count))
        if not raw:
            return []
        pipe = self.redis.pipeline(transaction=False)
        for index in raw:
            pipe.xrange(key, entry_id(int(index)), entry_id(int(index)))
        found = await self._call(pipe.execute())
        return [_entry(*rows[0]) for rows in found if rows]

    async def last_id(self, service: str, which: str) -> bytes:
        """The newest entry's id, "0-0" when empty: where a blocking read starts."""
        rows = await self._call(self.redis.xrevrange(self.key(service, which), count=1))
        return cast(bytes, rows[0][0]) if rows else b"0-0"

    async def range(self, service: str, which: str, first: int, count: int) -> list[Entry]:
        """Up to ``count`` entries from index ``first`` on (0: the oldest)."""
        start = entry_id(first) if first > 0 else "-"
        rows = await self._call(self.redis.xrange(self.key(service, which), start, "+", count))
        return [_entry(i, f) for i, f in rows]

    async def take(self, service: str, which: str, first: int, count: int) -> list[Entry]:
        """:meth:`range`, the entries also deleted in the same step (a get's auto-delete)."""
        key = self.key(service, which)
        start = entry_id(first) if first > 0 else "-"
        rows = await self._call(self._take(keys=[key, f"{key}:rid"], args=[start, count]))
        return [_entry(i, _pairs(f)) for i, f in rows]

    async def by_request_id(self, service: str, which: str, request_id: str) -> Entry | None:
        key = self.key(service, which)
        raw = await self._call(self.redis.hget(f"{key}:rid", request_id))
        if raw is None:
            return None
        rows = await self._call(self.redis.xrange(key, entry_id(int(raw)), entry_id(int(raw))))
        return _entry(*rows[0]) if rows else None

    async def wait_after(
        self, service: str, which: str, after: bytes, timeout_s: float
    ) -> tuple[bytes, list[Entry]]:
        """Entries added after id ``after``, waiting up to ``timeout_s`` for the first:
        ``(the newest id seen, entries)``."""
        key = self.key(service, which)
        block = max(1, int(timeout_s * 1000))
        found = await self._call(self.redis.xread({key: after}, count=100, block=block))
        rows = found[0][1] if found else []
        return (rows[-1][0] if rows else after), [_entry(i, f) for i, f in rows]

    async def delete(self, service: str, which: str, entries: Sequence[Entry]) -> int:
        if not entries:
            return 0
        key = self.key(service, which)
        pipe = self.redis.pipeline(transaction=True)
        pipe.xdel(key, *(entry_id(e.index) for e in entries))
        pipe.hdel(f"{key}:rid", *(e.request_id for e in entries))
        done = await self._call(pipe.execute())
        return int(done[0])

    async def delete_indexes(self, service: str, which: str, indexes: Sequence[int]) -> int:
        key = self.key(service, which)
        entries = []
        for index in indexes:
            rows = await self._call(self.redis.xrange(key, entry_id(index), entry_id(index)))
            entries += [_entry(i, f) for i, f in rows]
        return await self.delete(service, which, entries)

    async def truncate(self, service: str, which: str, below: int) -> int:
        """Remove every entry whose index is below ``below``."""
        key = self.key(service, which)
        return int(
            await self._call(self.redis.xtrim(key, minid=entry_id(below), approximate=False))
        )

    async def attributes(self, service: str, which: str) -> dict[str, Any]:
        """Length, first and last index, and the consumer groups with their consumers."""
        key = self.key(service, which)
        pipe = self.redis.pipeline(transaction=False)
        pipe.xlen(key)
        pipe.xrange(key, "-", "+", count=1)
        pipe.xrevrange(key, "+", "-", count=1)
        length, first, last = await self._call(pipe.execute())
        consumers: list[dict[str, Any]] = []
        try:
            groups = await self.redis.xinfo_groups(key)
            for group in groups:
                name = group["name"].decode()
                for c in await self.redis.xinfo_consumers(key, name):
                    consumers.append(
                        {
                            "group": name,
                            "name": c["name"].decode(),
                            "pending": int(c["pending"]),
                            "idle_ms": int(c["idle"]),
                        }
                    )
        except ResponseError:
            pass  # no stream yet: no groups
        except RedisError as e:
            raise QueueUnavailable(f"the queue store is unavailable ({type(e).__name__})") from e
        return {
            "length": int(length),
            "first": index_of(first[0][0]) if first else None,
            "last": index_of(last[0][0]) if last else None,
            "consumers": consumers,
        }

    async def pending_of(self, service: str, which: str, group: str, index: int) -> Pending | None:
        key = self.key(service, which)
        try:
            rows = await self.redis.xpending_range(key, group, entry_id(index), entry_id(index), 1)
        except ResponseError:
            return None  # no such group
        except RedisError as e:
            raise QueueUnavailable(f"the queue store is unavailable ({type(e).__name__})") from e
        return _pending(rows[0]) if rows else None

    # -- consumer groups (replicas, watches) --------------------------------------------

    async def ensure_group(self, service: str, which: str, group: str, start: str = "0") -> None:
        try:
            await self.redis.xgroup_create(self.key(service, which), group, id=start, mkstream=True)
        except ResponseError as e:
            if "BUSYGROUP" not in str(e):
                raise QueueUnavailable(f"cannot create consumer group {group!r}: {e}") from e
        except RedisError as e:
            raise QueueUnavailable(f"the queue store is unavailable ({type(e).__name__})") from e

    async def read_group(
        self,
        service: str,
        which: str,
        group: str,
        consumer: str,
        count: int,
        block_s: float | None,
        *,
        own_pending: bool = False,
    ) -> list[Entry]:
        """Up to ``count`` new entries for ``consumer`` (``own_pending``: those it already
        holds instead), waiting up to ``block_s`` (None: not at all)."""
        key = self.key(service, which)
        block = None if block_s is None else max(1, int(block_s * 1000))
        found = await self._call(
            self.redis.xreadgroup(
                group, consumer, {key: "0" if own_pending else ">"}, count=count, block=block
            )
        )
        rows = found[0][1] if found else []
        return [_entry(i, f) for i, f in rows if f]  # (a deleted entry comes back empty)

    async def pending(self, service: str, which: str, group: str, count: int) -> list[Pending]:
        """The group's pending entries, oldest first."""
        key = self.key(service, which)
        try:
            rows = await self.redis.xpending_range(key, group, "-", "+", count)
        except ResponseError:
            return []
        except RedisError as e:
            raise QueueUnavailable(f"the queue store is unavailable ({type(e).__name__})") from e
        return [_pending(r) for r in rows]

    async def claim(
        self, service: str, which: str, group: str, consumer: str, indexes: Sequence[int]
    ) -> list[Entry]:
        """Take over these pending entries (their delivery count goes up by one)."""
        if not indexes:
            return []
        key = self.key(service, which)
        rows = await self._call(
            self.redis.xclaim(key, group, consumer, 0, [entry_id(i) for i in indexes])
        )
        return [_entry(i, f) for i, f in rows if f]

    async def ack(self, service: str, which: str, group: str, indexes: Sequence[int]) -> int:
        """A watch's commit: acknowledged in its group and deleted from the queue."""
        key = self.key(service, which)
        ids = [entry_id(i) for i in indexes]
        pipe = self.redis.pipeline(transaction=True)
        pipe.xack(key, group, *ids)
        pipe.xdel(key, *ids)
        done = await self._call(pipe.execute())
        return int(done[1])

    async def answer(
        self,
        service: str,
        entry: Entry,
        data: bytes,
        tags: Mapping[str, str],
        sink: Limits,
        *,
        write: bool = True,
    ) -> int | None:
        """Write ``entry``'s answer to the sink and retire it from the input queue, at
        once: the sink index; 0 when another already answered it (or, ``write`` False, it
        was only acknowledged: EAS skips the sink for an empty answer); None when the sink
        is full (nothing done)."""
        source, dest = self.key(service, "input"), self.key(service, "sink")
        keys = [source, f"{source}:rid", dest, f"{dest}:seq", f"{dest}:rid"]
        args: list[ScriptArg] = [
            REPLICAS_GROUP,
            entry_id(entry.index),
            sink.max_length,
            int(sink.auto_evict),
            entry.request_id,
            data,
            json.dumps(dict(tags)),
            int(time.time() * 1000),
            1 if write else 0,
        ]
        done = int(await self._call(self._answer(keys=keys, args=args)))
        return None if done < 0 else done

    async def bury(self, service: str, index: int, deliveries: int, reason: str) -> bool:
        """Move an input message that was never answered to the dead-letter stream."""
        source = self.key(service, "input")
        keys = [source, f"{source}:rid", self.key(service, "dead")]
        args: list[ScriptArg] = [REPLICAS_GROUP, entry_id(index), deliveries, reason]
        return bool(await self._call(self._bury(keys=keys, args=args)))

    async def sink_full(self, service: str, sink: Limits) -> bool:
        if sink.auto_evict:
            return False
        n = await self._call(self.redis.xlen(self.key(service, "sink")))
        return int(n) >= sink.max_length

    async def lease(self, service: str, consumer: str, owner: str, ttl_s: float) -> bool:
        key = f"{self.prefix}q:{service}:lease:{consumer}"
        got = await self._call(self._lease(keys=[key], args=[owner, int(ttl_s * 1000)]))
        return bool(got)

    async def release(self, service: str, consumer: str, owner: str) -> None:
        key = f"{self.prefix}q:{service}:lease:{consumer}"
        await self._call(self._release(keys=[key], args=[owner]))

    async def mark_down(self, service: str, consumer: str, for_s: float) -> None:
        """``consumer``'s replica failed a call: for ``for_s`` the others take what it holds."""
        until = int((time.time() + for_s) * 1000)
        await self._call(self.redis.hset(f"{self.prefix}q:{service}:down", consumer, until))

    async def down(self, service: str) -> set[str]:
        """The consumers whose replica failed a call within their mark."""
        marks = await self._call(self.redis.hgetall(f"{self.prefix}q:{service}:down"))
        now = int(time.time() * 1000)
        return {k.decode() for k, v in marks.items() if int(v) > now}

    async def depth(self, service: str) -> tuple[int, int]:
        """(input entries not yet answered, sink entries)."""
        pipe = self.redis.pipeline(transaction=False)
        pipe.xlen(self.key(service, "input"))
        pipe.xlen(self.key(service, "sink"))
        backlog, sink = await self._call(pipe.execute())
        return int(backlog), int(sink)


def _pairs(flat: list[bytes]) -> dict[bytes, bytes]:
    """A script's field list ``[k1, v1, k2, v2, …]`` as redis-py gives XRANGE's fields."""
    return dict(zip(flat[::2], flat[1::2], strict=True))


def _pending(row: dict[str, Any]) -> Pending:
    return Pending(
        index=index_of(row["message_id"]),
        consumer=row["consumer"].decode(),
        idle_ms=int(row["time_since_delivered"]),
        deliveries=int(row["times_delivered"]),
    )
