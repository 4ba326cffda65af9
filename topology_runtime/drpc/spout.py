"""DRPCSpout: a DRPC function's requests, read from its Redis stream through a consumer group.

Emits ``(args, return-info)`` with the stream entry id as message id. On ack the entry is
XACKed and deleted; on fail (a failed or timed-out tuple tree) the spout writes an error reply,
so the client raises DRPCExecutionException at once, and drops the entry: as Storm's DRPCSpout,
a failed request is not retried. A request whose deadline passed (its client gave up) is dropped
unread. Entries a dead worker held are reread when its spout task restarts (the consumer-group
machinery of RedisStreamSpout) and re-run if their client still waits.
"""

from __future__ import annotations

import logging
import math
import time
from typing import Any

from ..api.components import TopologyContext
from ..connectors.redis_stream import RedisStreamSpout
from .protocol import (
    REPLY_TTL_SECS,
    REQUEST_ID,
    check_function,
    error_reply,
    reply_key,
    requests_key,
    return_info,
)

log = logging.getLogger(__name__)


class DRPCSpout(RedisStreamSpout):
    """Requests of DRPC function ``function``; ``url`` defaults to the run's ``redis.url``."""

    def __init__(self, function: str, url: str | None = None, batch_size: int = 100,
                 claim_idle_ms: int = 10000, idle_poll_ms: float = 1.0) -> None:
        self.function = check_function(function)
        # After a read that found nothing, the next XREADGROUP waits this long (a request arriving
        # then waits up to this long): fewer Redis calls from an idle function; at 1 ms the
        # latency stays ~2 ms (bench/drpc.py), at 5 ms it was ~6 ms.
        self.idle_poll_ms = idle_poll_ms
        super().__init__(requests_key(function), url=url, group="drpc", fields=["id", "args", "deadline"],
                         batch_size=batch_size, max_fails=None, start_id="0", claim_idle_ms=claim_idle_ms)
        self.outputs = ["args", "return-info"]

    def open(self, conf: dict, context: TopologyContext) -> None:
        self._replies: list[tuple[str, str]] = []  # (reply key, payload) to push with the next flush
        self._quiet_until = 0.0
        self._read = 0
        super().open(conf, context)

    def next_tuple(self) -> None:
        if self._queue or time.monotonic() >= self._quiet_until:
            self._read = 0
            super().next_tuple()
            if not self._read and not self._queue:
                self._quiet_until = time.monotonic() + self.idle_poll_ms / 1000.0
        else:
            self._flush()  # acks and error replies go out even while quiet

    def _accept(self, entries: list) -> list[str]:
        self._read += len(entries)
        return super()._accept(entries)

    def _emit_queued(self, limit: int) -> int:
        n, q, values, now = 0, self._queue, self._values, time.time()
        while q and n < limit:
            mid = q.popleft()
            v = values.get(mid)
            if v is None:
                continue
            rid, args, deadline = v
            try:
                dl = float(deadline)
                ok = REQUEST_ID.fullmatch(rid) is not None and math.isfinite(dl)
            except ValueError:
                ok = False
            if not ok:
                log.error("DRPC %s: dropped malformed request %s (id %r, deadline %r)",
                          self.function, mid, rid, deadline)
                self.ack(mid)
                continue
            if dl <= now:  # its client stopped waiting: do not spend the topology on it
                self.ack(mid)
                continue
            self.emit([args, return_info(self.function, rid, dl)], msg_id=mid)
            n += 1
        return n

    def fail(self, msg_id: Any) -> None:
        """Storm's DRPCSpout.fail: tell the client (an error reply) and drop the request."""
        values = self._values.get(msg_id)
        if values is None:
            return
        rid = values[0]
        if REQUEST_ID.fullmatch(rid):
            self._replies.append((reply_key(self.function, rid), error_reply(
                f"DRPC request {self.function!r} failed in the topology (a tuple failed or timed out)")))
        self.ack(msg_id)

    def _flush(self) -> None:
        """One round trip: error replies (with their TTL), XACK and XDEL of what is done."""
        if not self._to_ack and not self._replies and not self._dead:
            return
        pipe = self._redis.pipeline(transaction=False)
        if self._dead:  # malformed entries (a field missing or not UTF-8)
            pipe.rpush(self.dead_letter, *self._dead)
        for key, payload in self._replies:
            pipe.rpush(key, payload)
            pipe.expire(key, REPLY_TTL_SECS)
        if self._to_ack:  # a request is never read twice: what is acked is deleted
            pipe.xack(self.stream, self.group, *self._to_ack)
            pipe.xdel(self.stream, *self._to_ack)
        pipe.execute()
        self._to_ack, self._replies, self._dead = [], [], []
