"""RedisStreamSpout: a reliable spout over a Redis Streams consumer group.

An entry is XACKed only when its tuple tree is acked, so the source redelivers what a dead
worker held: a restarted task (same consumer name) rereads its own pending entries, and entries
of consumers that no longer exist are claimed (at ``open`` and then periodically). Poison entries
go to a dead-letter list after ``max_fails`` failures, registered under the topology id for
``topology dead-letters`` (connectors/dead_letters.py). Redis calls are batched, never one per
tuple: one XREADGROUP per ``next_tuple`` and one XACK (pipelined with dead-letter writes) per
flush. Only Redis 6.2 commands are used.
"""

from __future__ import annotations

import json
import logging
import time
import zlib
from collections import deque
from typing import Any

import redis

from state.connection import connect
from state.layout import dead_letter_list, replay_fails

from ..api.components import ReplayableSpout, Spout, TopologyContext
from ..api.config import redis_url
from ..api.names import name_list
from .dead_letters import failure_reason, register

log = logging.getLogger(__name__)

_PAGE = 1000  # entries per Redis call when paging through a pending entries list (PEL)
_MAX_BUFFERED_ACKS = 10_000  # ack() flushes itself past this many


class _Malformed(ValueError):
    """A stream entry that cannot become a tuple (missing field, not UTF-8)."""


def _s(x: bytes | str) -> str:
    return x.decode() if isinstance(x, bytes) else x


class RedisStreamSpout(Spout):
    """Emit the entries of ``stream`` read through consumer group ``group``; XACK on ack.

    ``fields`` are the entry fields emitted, in order (UTF-8 decoded), and the output fields.
    ``start_id`` is where a newly created group starts ("0": the whole stream, "$": new entries
    only); an existing group keeps its position. ``claim_idle_ms``: entries of other consumers
    pending longer than this are taken over (at ``open`` and every ``claim_interval_ms``, default
    ``claim_idle_ms // 4``); this task refreshes the delivery time of its own long-pending entries
    on the same schedule so that live consumers are not robbed. With ``bounded=True``,
    ``finish()`` is called once a read returns nothing and every emitted entry is acked or
    dead-lettered (``finish_input()`` as soon as a read returns nothing).
    """

    def __init__(self, stream: str, url: str | None = None, group: str = "topology",
                 fields: list[str] | None = None, batch_size: int = 500, max_fails: int | None = 5,
                 dead_letter: str | None = None, bounded: bool = False, start_id: str = "0",
                 claim_idle_ms: int = 30000, claim_interval_ms: int | None = None) -> None:
        fields = ["value"] if fields is None else name_list(fields, "fields", f"RedisStreamSpout({stream!r})")
        if batch_size < 1:
            raise ValueError(f"RedisStreamSpout({stream!r}): batch_size must be >= 1, got {batch_size}")
        if max_fails is not None and max_fails < 0:
            raise ValueError(f"RedisStreamSpout({stream!r}): max_fails must be None or >= 0, got {max_fails}")
        if claim_idle_ms < 0 or (claim_interval_ms is not None and claim_interval_ms < 0):
            raise ValueError(f"RedisStreamSpout({stream!r}): claim_idle_ms and claim_interval_ms must be >= 0")
        self.stream = stream
        self.url = url
        self.group = group
        self.fields = fields
        self.outputs = list(fields)
        self.batch_size = batch_size
        self.max_fails = max_fails
        self.dead_letter = dead_letter or dead_letter_list(stream)
        self.bounded = bounded
        self.start_id = start_id
        self.claim_idle_ms = claim_idle_ms
        self.claim_interval_ms = claim_idle_ms // 4 if claim_interval_ms is None else claim_interval_ms
        # Counters (tests, metrics).
        self.dead_lettered = 0  # entries moved to the dead-letter list (poison or malformed)
        self.redelivered = 0  # own pending entries reread at open (this task crashed before)
        self.claimed = 0  # pending entries taken over from other consumers
        self._redis: redis.Redis | None = None  # no connection until open(): this is a template

    # --- lifecycle -------------------------------------------------------------------------------
    def open(self, conf: dict, context: TopologyContext) -> None:
        url = redis_url(conf, self.url, needed_for=f"RedisStreamSpout({self.stream!r}) in component "
                                                     f"{context.component_id!r}")
        self._redis = connect(url, socket_connect_timeout=10, socket_timeout=60)
        self.consumer = f"{context.component_id}-{context.task_index}"
        self._component = context.component_id
        if context.topology_id:  # contexts built by hand (tests, tools) have no id to register under
            register(self._redis, context.topology_id, context.component_id, self.stream, self.dead_letter,
                     type(self).__name__)
        self._values: dict[str, list] = {}  # pending (emitted or queued) msg id -> values
        self._delivered: dict[str, float] = {}  # msg id -> monotonic time Redis last delivered it to us
        self._fails: dict[str, int] = {}
        self._queue: deque[str] = deque()  # to (re-)emit before reading new entries
        self._to_ack: list[str] = []
        self._dead: list[bytes] = []
        self._claim_cursor = "0-0"
        try:
            self._redis.xgroup_create(self.stream, self.group, id=self.start_id, mkstream=True)
        except redis.ResponseError as e:
            if "BUSYGROUP" not in str(e):
                raise
        # Our own PEL first (this task before a crash), then consumers that no longer exist.
        self.redelivered = self._read_own_pel()
        self.claimed += self._claim_orphans(context)
        while True:
            n, done = self._autoclaim_page(_PAGE)
            self.claimed += n
            if done:
                break
        self._next_claim = time.monotonic() + self.claim_interval_ms / 1000.0
        if self.redelivered or self.claimed:
            log.info("%s: redelivering %d own pending and %d claimed entries of stream %s",
                     self.consumer, self.redelivered, self.claimed, self.stream)

    def close(self) -> None:
        if self._redis is None:
            return
        try:
            self._flush()
        except redis.RedisError as e:
            log.warning("stream %s: could not XACK on close (%s); those entries will be redelivered",
                        self.stream, e)
        self._redis.close()
        self._redis = None

    # --- reading ---------------------------------------------------------------------------------
    def _read_own_pel(self) -> int:
        """Queue the entries our consumer name still has pending (XREADGROUP from id 0, paged)."""
        n, start = 0, "0"
        while True:
            res = self._redis.xreadgroup(self.group, self.consumer, {self.stream: start}, count=_PAGE)
            entries = res[0][1] if res else []
            n += self._take(entries)
            if len(entries) < _PAGE:
                return n
            start = _s(entries[-1][0])

    def _claim_orphans(self, context: TopologyContext) -> int:
        """Claim, whatever their idle time, the entries of our component's consumers whose task
        index no longer exists (the parallelism went down), so a bounded run does not leave them."""
        prefix = f"{context.component_id}-"
        orphans = []
        for c in self._redis.xpending(self.stream, self.group).get("consumers") or []:
            name = _s(c["name"])
            idx = name[len(prefix):]
            if name.startswith(prefix) and idx.isdigit() and int(idx) >= context.parallelism:
                orphans.append(name)
        n = 0
        for name in orphans:
            start = "-"
            while True:
                ids = [p["message_id"] for p in
                       self._redis.xpending_range(self.stream, self.group, start, "+", _PAGE, consumername=name)]
                if not ids:
                    break
                n += self._take(self._redis.xclaim(self.stream, self.group, self.consumer, 0, ids))
                start = "(" + _s(ids[-1])  # exclusive range (6.2): always progresses
        return n

    def _autoclaim_page(self, count: int) -> tuple[int, bool]:
        """One XAUTOCLAIM page of entries idle longer than claim_idle_ms; (queued, scan done)."""
        res = self._redis.xautoclaim(self.stream, self.group, self.consumer, self.claim_idle_ms,
                                     start_id=self._claim_cursor, count=count)
        self._claim_cursor = _s(res[0])
        return self._take(res[1]), self._claim_cursor == "0-0"

    def _take(self, entries: list) -> int:
        """Queue redelivered or claimed entries for emission; return how many were queued."""
        ids = self._accept(entries)
        self._queue.extend(ids)
        return len(ids)

    def _accept(self, entries: list) -> list[str]:
        """Decode entries into ``_values``; dead-letter malformed ones, XACK deleted ones."""
        ids, now = [], time.monotonic()
        for raw_id, data in entries:
            if raw_id is None:  # Redis 6.2 XAUTOCLAIM: deleted from the stream, id not given
                continue
            mid = _s(raw_id)
            if not data:  # deleted from the stream while pending: nothing to replay
                self._to_ack.append(mid)
                continue
            try:
                values = self._decode(mid, data)
            except _Malformed as e:  # dead-letter it now rather than stall on it
                log.error("%s; moved to dead-letter list %s", e, self.dead_letter)
                raw = {k.decode(errors="replace"): v.decode(errors="replace") for k, v in data.items()}
                self._dead.append(json.dumps({"stream": self.stream, "id": mid, "error": str(e), "raw": raw,
                                              "reason": str(e), "component": self._component}).encode())
                self._to_ack.append(mid)
                self.dead_lettered += 1
                continue
            if mid in self._values:  # already ours (e.g. our own pending entry read again)
                continue
            self._values[mid] = values
            self._delivered[mid] = now
            ids.append(mid)
        return ids

    def _decode(self, mid: str, data: dict) -> list:
        out = []
        for f in self.fields:
            v = data.get(f.encode())
            if v is None:
                raise _Malformed(f"stream {self.stream!r} entry {mid}: no field {f!r} "
                                 f"(has {sorted(k.decode(errors='replace') for k in data)})")
            try:
                out.append(v.decode())
            except UnicodeDecodeError as e:
                raise _Malformed(f"stream {self.stream!r} entry {mid}: field {f!r} is not UTF-8 ({e})") from None
        return out

    # --- the hot path ----------------------------------------------------------------------------
    def next_tuple(self) -> None:
        """Flush acks, re-emit queued entries, then read new ones with one non-blocking XREADGROUP."""
        self._flush()
        if time.monotonic() >= self._next_claim:
            self._maintain()
        emitted = self._emit_queued(self.batch_size)
        read = 0
        if emitted < self.batch_size:
            res = self._redis.xreadgroup(self.group, self.consumer, {self.stream: ">"},
                                         count=self.batch_size - emitted)
            entries = res[0][1] if res else []
            read = len(entries)
            self._queue.extend(self._accept(entries))
            emitted += self._emit_queued(self.batch_size - emitted)
        if self.bounded and not emitted and not read and not self._queue:
            if self._values:
                self.finish_input()  # what is pending may sit in windows until end of input
            else:
                self._flush()
                self.finish()

    def _emit_queued(self, limit: int) -> int:
        n, q, values = 0, self._queue, self._values
        while q and n < limit:
            mid = q.popleft()
            v = values.get(mid)
            if v is None:  # acked or dead-lettered since it was queued
                continue
            try:
                self.emit(v, msg_id=mid)
            except BaseException:
                q.appendleft(mid)
                raise
            n += 1
        return n

    def _flush(self) -> None:
        """One round trip: RPUSH the dead letters and XACK every buffered id."""
        if not self._to_ack and not self._dead:
            return
        pipe = self._redis.pipeline(transaction=False)
        if self._dead:
            pipe.rpush(self.dead_letter, *self._dead)
        if self._to_ack:
            pipe.xack(self.stream, self.group, *self._to_ack)
        pipe.execute()
        self._to_ack, self._dead = [], []

    def _maintain(self) -> None:
        """Periodic: keep our long-pending entries fresh, claim one page of abandoned ones."""
        now = time.monotonic()
        self._next_claim = now + self.claim_interval_ms / 1000.0
        stale_after = self.claim_interval_ms / 1000.0
        stale = [mid for mid, t in self._delivered.items() if now - t >= stale_after]
        if stale:
            # XCLAIM to ourselves resets the idle time; min-idle keeps an entry another consumer
            # just took (we were presumed dead) with it rather than taking it back.
            pipe = self._redis.pipeline(transaction=False)
            for i in range(0, len(stale), _PAGE):
                pipe.xclaim(self.stream, self.group, self.consumer, self.claim_interval_ms // 2,
                            stale[i:i + _PAGE], justid=True)
            kept = {_s(m) for chunk in pipe.execute() for m in chunk}
            for mid in stale:
                if mid in kept:
                    self._delivered[mid] = now
                else:  # acked elsewhere, deleted or taken over: stop refreshing it
                    self._delivered.pop(mid, None)
        n, _ = self._autoclaim_page(self.batch_size)
        if n:
            self.claimed += n
            log.info("%s: claimed %d abandoned entries of stream %s", self.consumer, n, self.stream)

    # --- callbacks -------------------------------------------------------------------------------
    def ack(self, msg_id: Any) -> None:
        """Buffer the XACK; it is flushed by the next ``next_tuple`` (or ``close``)."""
        self._values.pop(msg_id, None)
        self._delivered.pop(msg_id, None)
        self._fails.pop(msg_id, None)
        self._to_ack.append(msg_id)
        if len(self._to_ack) >= _MAX_BUFFERED_ACKS:  # next_tuple not called for long (back-pressure)
            self._flush()

    def fail(self, msg_id: Any) -> None:
        """Re-queue the entry, or dead-letter (and XACK) it after ``max_fails`` failures."""
        values = self._values.get(msg_id)
        if values is None:
            return  # not ours (any more)
        n = self._fails.get(msg_id, 0) + 1
        if self.max_fails is None or n <= self.max_fails:
            self._fails[msg_id] = n
            self._queue.append(msg_id)
            return
        del self._values[msg_id]
        self._delivered.pop(msg_id, None)
        self._fails.pop(msg_id, None)
        self._dead.append(json.dumps({"stream": self.stream, "id": msg_id, "fields": dict(zip(self.fields, values)),
                                      "fails": n, "reason": failure_reason(n, self.max_fails),
                                      "component": self._component}).encode())
        self._to_ack.append(msg_id)
        self.dead_lettered += 1
        log.warning("stream %s entry %s failed %d times: moved to dead-letter list %s",
                    self.stream, msg_id, n, self.dead_letter)


class RedisStreamReplaySpout(ReplayableSpout):
    """The replayable form for exactly-once mode: reads a stream by position (XREAD, no consumer
    group) and its snapshot is the id of the last entry it emitted; ``restore`` rewinds there.
    Nothing is acked to Redis: the position is committed with each checkpoint.

    Poison entries: in exactly-once mode every failure rolls the whole topology back, so an entry
    a bolt cannot process would fail on every replay. Each failure of an entry is counted in
    Redis (``layout.replay_fails``: it outlives the rollback); past ``max_fails`` the entry goes
    to the dead-letter list (``topology dead-letters``) and every later read skips it, so the
    replay after that rollback goes on without it. ``max_fails=None``: never give up."""

    def __init__(self, stream: str, url: str | None = None, fields: list[str] | None = None,
                 batch_size: int = 500, bounded: bool = False, start_id: str = "0-0",
                 max_fails: int | None = 3, dead_letter: str | None = None) -> None:
        if isinstance(stream, (list, tuple)) or not isinstance(stream, str) or not stream:
            raise ValueError(f"RedisStreamReplaySpout: stream must be one stream key (a non-empty string), "
                             f"got {stream!r}")
        if max_fails is not None and (isinstance(max_fails, bool) or not isinstance(max_fails, int) or max_fails < 0):
            raise ValueError(f"RedisStreamReplaySpout({stream!r}): max_fails must be None or an integer >= 0, "
                             f"got {max_fails!r}")
        self.max_fails = max_fails
        self.dead_letter = dead_letter or dead_letter_list(stream)
        self.dead_lettered = 0
        self.stream = stream
        self.url = url
        self.fields = ["value"] if fields is None else name_list(fields, "fields", f"RedisStreamReplaySpout({stream!r})")
        self.outputs = list(self.fields)
        self.batch_size = batch_size
        self.bounded = bounded
        self.position = start_id

    def open(self, conf: dict, context: TopologyContext) -> None:
        url = redis_url(conf, self.url, needed_for=f"RedisStreamReplaySpout({self.stream!r}) in "
                                                     f"{context.component_id!r}")
        self.redis = connect(url)
        # Partitioned over the component's tasks by a hash of the entry id: replays are identical.
        self.index, self.parallelism = context.task_index, context.parallelism
        self._component = context.component_id
        self._fails_key = replay_fails(self.stream, context.topology_id or "local", context.component_id)
        if context.topology_id:
            register(self.redis, context.topology_id, context.component_id, self.stream, self.dead_letter,
                     type(self).__name__)
        self._skip = self._given_up()

    def _given_up(self) -> set[str]:
        """The entries past ``max_fails`` (read at open and on every restore)."""
        if self.max_fails is None:
            return set()
        return {(k.decode() if isinstance(k, bytes) else k) for k, n in self.redis.hgetall(self._fails_key).items()
                if int(n) > self.max_fails}

    def snapshot(self) -> str:
        return self.position

    def restore(self, snapshot) -> None:
        self.position = snapshot
        self._skip = self._given_up()

    def next_tuple(self) -> None:
        got = self.redis.xread({self.stream: self.position}, count=self.batch_size)
        entries = got[0][1] if got else []
        skip = self._skip
        for raw_id, data in entries:
            mid = raw_id.decode()
            self.position = mid
            if self.parallelism > 1 and zlib.crc32(raw_id) % self.parallelism != self.index:
                continue
            if skip and mid in skip:
                continue
            values = []
            for f in self.fields:
                v = data.get(f.encode())
                values.append(v.decode() if v is not None else None)
            self.emit(values, msg_id=mid)
        if self.bounded and not entries:
            self.finish()

    def fail(self, msg_id: Any) -> None:
        """Count the entry's failure in Redis; past ``max_fails``, dead-letter it (its fields read
        back by id: nothing is kept per tuple) and skip it from now on."""
        if self.max_fails is None or not isinstance(msg_id, str):
            return
        n = int(self.redis.hincrby(self._fails_key, msg_id, 1))
        if n <= self.max_fails:
            log.warning("stream %s entry %s failed (%d of %d before it is given up on)", self.stream, msg_id, n,
                        self.max_fails + 1)
            return
        got = self.redis.xrange(self.stream, msg_id, msg_id)
        data = got[0][1] if got else {}
        fields = {f: (v.decode() if isinstance(v, bytes) else v)
                  for f, v in ((f, data.get(f.encode())) for f in self.fields)}
        self.redis.rpush(self.dead_letter, json.dumps({
            "stream": self.stream, "id": msg_id, "fields": fields, "fails": n,
            "reason": failure_reason(n, self.max_fails), "component": self._component}))
        self._skip.add(msg_id)
        self.dead_lettered += 1
        log.warning("stream %s entry %s failed %d times: moved to dead-letter list %s and skipped from now on",
                    self.stream, msg_id, n, self.dead_letter)
