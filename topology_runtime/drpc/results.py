"""The scaffolding around a linear DRPC computation (Storm's drpc package): PrepareRequest gives
each request a fresh id, JoinResult pairs the last stage's result with the request's return
info, ReturnResults pushes the reply to the client's Redis list.

Every tuple is anchored in the request's tree, so the tree completes only once the reply was
written; if anything fails or times out first, the spout's ``fail`` answers the client with an
error instead.
"""

from __future__ import annotations

import secrets
import time
from typing import Any

from state.connection import connect

from ..api.components import Bolt, Tuple
from ..api.config import redis_url
from ..reliability.rotating_map import RotatingMap
from .protocol import REPLY_TTL_SECS, ok_reply, parse_return_info, reply_key

ARGS_STREAM, RETURN_STREAM, ID_STREAM = "args", "return", "id"


class PrepareRequest(Bolt):
    """``(args, return-info)`` -> ``args: (request, args)``, ``return: (request, return-info)``,
    ``id: (request)``. The id is new per emission, so a request re-run after a worker died never
    meets the counts its first run left in live tasks."""

    outputs = {ARGS_STREAM: ["request", "args"], RETURN_STREAM: ["request", "return"], ID_STREAM: ["request"]}

    def execute(self, tup: Tuple) -> None:
        request = secrets.token_hex(8)
        self.emit([request, tup.values[0]], anchors=tup, stream=ARGS_STREAM)
        self.emit([request, tup.values[1]], anchors=tup, stream=RETURN_STREAM)
        self.emit([request], anchors=tup, stream=ID_STREAM)
        self.ack(tup)


class JoinResult(Bolt):
    """Waits for a request's result (field 1 of the last stage's tuple) and its return info, then
    emits ``(result, return-info)`` anchored to both. Halves that wait longer than the message
    timeout fail (Storm kept them forever)."""

    outputs = ["result", "return-info"]

    def __init__(self, return_component: str) -> None:
        self.return_component = return_component

    def prepare(self, conf: dict, context: Any) -> None:
        self.returns, self.results, self.joined = RotatingMap(3), RotatingMap(3), RotatingMap(3)
        self.rotate_secs = float(conf.get("topology.message.timeout.secs") or 30) / 2
        self._next_rotate = time.monotonic() + self.rotate_secs

    def execute(self, tup: Tuple) -> None:
        if tup.is_tick():
            now = time.monotonic()
            if now >= self._next_rotate:
                self._next_rotate = now + self.rotate_secs
                self.joined.rotate()
                for expired in (self.returns.rotate(), self.results.rotate()):
                    for t in expired.values():
                        self.fail(t)
            return
        request = tup.values[0]
        if tup.info.component == self.return_component and tup.info.stream == RETURN_STREAM:
            self.returns.put(request, tup)
        elif request in self.results or request in self.joined:
            self.ack(tup)  # a second result for the request: the first one wins (as Storm)
            return
        else:
            self.results.put(request, tup)
        ret, res = self.returns.get(request), self.results.get(request)
        if ret is not None and res is not None:
            self.returns.remove(request)
            self.results.remove(request)
            self.joined.put(request, True)  # for a while: later duplicates are acked, not joined
            self.emit([str(res.values[1]), ret.values[1]], anchors=[ret, res])
            self.ack(ret)
            self.ack(res)


class ReturnResults(Bolt):
    """Pushes ``{"ok": true, "result": ...}`` to the request's reply list (with a TTL), then acks;
    a Redis error fails the tuple (the spout then tries to tell the client)."""

    outputs: list[str] = []

    def __init__(self, url: str | None = None) -> None:
        self.url = url

    def prepare(self, conf: dict, context: Any) -> None:
        self.redis = connect(redis_url(conf, self.url, needed_for=f"ReturnResults in {context.component_id!r}"),
                             socket_connect_timeout=10, socket_timeout=30)

    def execute(self, tup: Tuple) -> None:
        info = parse_return_info(tup.values[1])
        key = reply_key(info["function"], info["id"])
        ttl = max(1, int(info.get("deadline", 0) - time.time())) + REPLY_TTL_SECS
        pipe = self.redis.pipeline(transaction=False)
        pipe.rpush(key, ok_reply(str(tup.values[0])))
        pipe.expire(key, ttl)
        pipe.execute()
        self.ack(tup)

    def cleanup(self) -> None:
        self.redis.close()
