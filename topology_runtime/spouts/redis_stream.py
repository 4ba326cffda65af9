"""RedisStreamSpout: a reliable spout over a Redis Streams consumer group.

An entry is XACKed only when its tuple tree is acked, so the source redelivers what a dead
worker held: a restarted task (same consumer name) rereads its own pending entries, and idle
entries of consumers that no longer exist are claimed with XAUTOCLAIM. Poison entries go to a
dead-letter list after ``max_fails`` failures. Redis calls are batched: one XREADGROUP per
``next_tuple`` and one XACK (pipelined with dead-letter writes) per flush, never one per tuple.
"""

from __future__ import annotations

import json
import logging
from typing import Any

import redis

from ..components import Spout, TopologyContext

log = logging.getLogger(__name__)


class RedisStreamSpout(Spout):
    def __init__(self, stream: str, url: str | None = None, group: str = "topology",
                 fields: list[str] | None = None, batch_size: int = 500, max_fails: int | None = 5,
                 dead_letter: str | None = None, bounded: bool = False, start_id: str = "0",
                 claim_idle_ms: int = 30000) -> None:
        self.stream = stream
        self.url = url
        self.group = group
        self.fields = list(fields or ["value"])
        self.outputs = list(self.fields)
        self.batch_size = batch_size
        self.max_fails = max_fails
        self.dead_letter = dead_letter or f"{stream}:dead"
        self.bounded = bounded
        self.start_id = start_id
        self.claim_idle_ms = claim_idle_ms
        self.dead_lettered = 0

    # --- lifecycle -------------------------------------------------------------------------------
    def open(self, conf: dict, context: TopologyContext) -> None:
        url = self.url or conf.get("redis.url")
        if not url:
            raise ValueError(
                f"RedisStreamSpout({self.stream!r}) in {context.component_id!r}: no Redis URL; pass url=... "
                "or set the config key 'redis.url'"
            )
        self.redis = redis.Redis.from_url(url)
        self.consumer = f"{context.component_id}-{context.task_index}"
        try:
            self.redis.xgroup_create(self.stream, self.group, id=self.start_id, mkstream=True)
        except redis.ResponseError as e:
            if "BUSYGROUP" not in str(e):
                raise
        self.values: dict[str, list] = {}  # pending msg id -> values, for replay without a read
        self.fails: dict[str, int] = {}
        self.retry: list[str] = []
        self.to_ack: list[str] = []
        self.dead: list[bytes] = []
        self.exhausted = False
        # Our own pending entries (this task before a crash), then those of vanished consumers.
        own = self.redis.xreadgroup(self.group, self.consumer, {self.stream: "0"}, count=1_000_000)
        self._queue_entries(own[0][1] if own else [], replay=True)
        claimed = self._autoclaim()
        if own and own[0][1] or claimed:
            log.info("%s: redelivering %d own pending and %d claimed entries of %s",
                     self.consumer, len(own[0][1]) if own else 0, claimed, self.stream)

    def _autoclaim(self) -> int:
        n, cursor = 0, "0-0"
        while True:
            res = self.redis.xautoclaim(self.stream, self.group, self.consumer, self.claim_idle_ms,
                                        start_id=cursor, count=1000)
            cursor, entries = res[0], res[1]
            self._queue_entries(entries, replay=True)
            n += len(entries)
            if cursor in (b"0-0", "0-0") or not entries:
                return n

    def _decode(self, entry_id: str, data: dict) -> list:
        out = []
        for f in self.fields:
            v = data.get(f.encode())
            if v is None:
                raise KeyError(f"stream {self.stream!r} entry {entry_id}: no field {f!r} "
                               f"(has {sorted(k.decode() for k in data)})")
            out.append(v.decode())
        return out

    def _queue_entries(self, entries: list, replay: bool) -> list[str]:
        ids = []
        for raw_id, data in entries:
            if data is None:  # deleted from the stream while pending: nothing to replay
                self.to_ack.append(raw_id.decode())
                continue
            mid = raw_id.decode()
            try:
                self.values[mid] = self._decode(mid, data)
            except KeyError as e:  # malformed entry: dead-letter it now rather than stall on it
                log.error("%s; moved to dead-letter list %s", e.args[0], self.dead_letter)
                self.dead.append(json.dumps({"stream": self.stream, "id": mid, "error": e.args[0],
                                             "raw": {k.decode(errors="replace"): v.decode(errors="replace")
                                                     for k, v in data.items()}}).encode())
                self.to_ack.append(mid)
                self.dead_lettered += 1
                continue
            if replay:
                self.retry.append(mid)
            ids.append(mid)
        return ids

    def _flush(self) -> None:
        if not self.to_ack and not self.dead:
            return
        pipe = self.redis.pipeline(transaction=False)
        if self.dead:
            pipe.rpush(self.dead_letter, *self.dead)
        if self.to_ack:
            pipe.xack(self.stream, self.group, *self.to_ack)
        pipe.execute()
        self.to_ack, self.dead = [], []

    def next_tuple(self) -> None:
        self._flush()
        emitted = 0
        while self.retry and emitted < self.batch_size:
            mid = self.retry.pop()
            if mid in self.values:
                self.emit(self.values[mid], msg_id=mid)
                emitted += 1
        if emitted < self.batch_size:
            got = self.redis.xreadgroup(self.group, self.consumer, {self.stream: ">"},
                                        count=self.batch_size - emitted)
            ids = self._queue_entries(got[0][1] if got else [], replay=False)
            for mid in ids:
                self.emit(self.values[mid], msg_id=mid)
            emitted += len(ids)
        if self.bounded and not emitted and not self.values and not self.retry:
            self._flush()
            self.finish()

    def ack(self, msg_id: Any) -> None:
        self.values.pop(msg_id, None)
        self.fails.pop(msg_id, None)
        self.to_ack.append(msg_id)

    def fail(self, msg_id: Any) -> None:
        n = self.fails.get(msg_id, 0) + 1
        self.fails[msg_id] = n
        if self.max_fails is not None and n > self.max_fails:
            values = self.values.pop(msg_id, None)
            self.fails.pop(msg_id, None)
            self.dead.append(json.dumps({"stream": self.stream, "id": msg_id, "fields": dict(zip(self.fields, values or [])),
                                         "fails": n}).encode())
            self.to_ack.append(msg_id)
            self.dead_lettered += 1
            log.warning("stream %s entry %s failed %d times: moved to dead-letter list %s",
                        self.stream, msg_id, n, self.dead_letter)
            return
        if msg_id in self.values:
            self.retry.append(msg_id)

    def close(self) -> None:
        try:
            self._flush()
        except redis.RedisError as e:
            log.warning("could not XACK on close (%s); the entries will be redelivered", e)
