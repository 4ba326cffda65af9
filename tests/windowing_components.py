"""Components for tests/test_windowing.py (they run in worker processes, Spark's too, and report
to the Redis at user config ``test.redis.url`` under ``test.key``)."""

from __future__ import annotations

import json
import time

import redis

from topology_runtime import Bolt, Spout
from topology_runtime.windowing import StatefulWindowedBolt, WindowedBolt


def _redis(conf) -> redis.Redis:
    return redis.Redis.from_url(conf["test.redis.url"], decode_responses=True)


class ScriptSpout(Spout):
    """Emits ``items`` in order, each ``[n, ts]`` with msg id ``n``: ``ts`` is the item's own
    event time, or the wall clock in ms when None. A ``("pause", secs)`` item waits that long
    (without blocking the loop). Finishes once everything is acked; failed ids are replayed."""

    outputs = ["n", "ts"]

    def __init__(self, items: list, every: float = 0.0) -> None:
        self.items = items
        self.every = every

    def open(self, conf, context):
        self.todo = list(reversed(self.items))
        self.retry: list = []
        self.pending: dict[int, list] = {}
        self.not_before = 0.0

    def next_tuple(self):
        now = time.monotonic()
        if now < self.not_before:
            return
        if self.retry:
            n = self.retry.pop(0)
            self.emit(self.pending[n], msg_id=n)
            return
        if not self.todo:
            if not self.pending:
                self.finish()
            else:
                self.finish_input()
            return
        item = self.todo.pop()
        if item[0] == "pause":
            self.not_before = now + item[1]
            return
        n, ts = item
        values = [n, int(time.time() * 1000) if ts is None else ts]
        self.pending[n] = values
        self.emit(values, msg_id=n)
        self.not_before = now + self.every

    def ack(self, msg_id):
        self.pending.pop(msg_id, None)

    def fail(self, msg_id):
        self.retry.append(msg_id)


class WindowRecorder(WindowedBolt):
    """Records every window to ``<key>:windows`` (JSON: all/new/expired n's, start, end) and
    emits the window's size, anchored to it. ``fail_on``: the first window holding that n raises
    (once per task)."""

    outputs = ["size"]

    def __init__(self, fail_on: int | None = None) -> None:
        self.fail_on = fail_on

    def prepare(self, conf, context):
        self.r = _redis(conf)
        self.key = conf.get("test.key", "w")
        self.raised = False

    def execute(self, window):
        ns = [t["n"] for t in window.get()]
        rec = {"all": ns, "new": [t["n"] for t in window.get_new()],
               "expired": [t["n"] for t in window.get_expired()],
               "ts": [t["ts"] for t in window.get()], "start": window.start_ts, "end": window.end_ts}
        if self.fail_on in ns and not self.raised:
            self.raised = True
            self.r.rpush(f"{self.key}:failed", json.dumps(rec))
            raise RuntimeError(f"window holding {self.fail_on} fails once")
        self.r.rpush(f"{self.key}:windows", json.dumps(rec))
        self.emit([len(ns)])


class LateRecorder(Bolt):
    """Records what arrives on the late tuple stream to ``<key>:late``."""

    outputs: list = []

    def prepare(self, conf, context):
        self.r = _redis(conf)
        self.key = conf.get("test.key", "w")

    def execute(self, tup):
        self.r.rpush(f"{self.key}:late", json.dumps(tup["late_tuple"]))
        self.ack(tup)


class Sink(Bolt):
    outputs: list = []

    def execute(self, tup):
        self.ack(tup)


class KeyedWindowCount(StatefulWindowedBolt):
    """Counts each key's tuples per window and emits ``[end, key, n]``; keeps each key's running
    total (over evaluated windows) in its own state beside the window's."""

    outputs = ["end", "key", "n"]

    def init_state(self, state):
        self.totals = state

    def execute(self, window):
        counts: dict[str, int] = {}
        for t in window.get():
            counts[t["key"]] = counts.get(t["key"], 0) + 1
        for key, n in sorted(counts.items()):
            self.totals.put(key, self.totals.get(key, 0) + n)
            self.emit([window.end_ts, key, n])


class WindowResultSink(Bolt):
    """Writes each ``[end, key, n]`` once to the hash ``<key>:result`` (field ``end:key``); an
    emission of the same window with another value goes to ``<key>:conflicts``; every emission
    is counted in ``<key>:emits``."""

    outputs: list = []

    def prepare(self, conf, context):
        self.r = _redis(conf)
        self.key = conf.get("test.key", "w")

    def execute(self, tup):
        end, key, n = tup.values
        field = f"{end}:{key}"
        pipe = self.r.pipeline()
        pipe.hsetnx(f"{self.key}:result", field, n)
        pipe.hget(f"{self.key}:result", field)
        pipe.hincrby(f"{self.key}:emits", field, 1)
        _, stored, _ = pipe.execute()
        if int(stored) != int(n):
            self.r.rpush(f"{self.key}:conflicts", json.dumps([field, int(stored), int(n)]))
        self.ack(tup)


class EventSpout(Spout):
    """Emits ``n`` events ``[i, t0 + i * step]`` as fast as it may (a backlog read fast), msg id
    ``i``; ``finish_input()`` once all were emitted, ``finish()`` once all were acked; failed
    ids are replayed."""

    outputs = ["n", "ts"]

    def __init__(self, n: int, step: int, t0: int = 0) -> None:
        self.n, self.step, self.t0 = n, step, t0

    def open(self, conf, context):
        self.next = 0
        self.pending: set[int] = set()
        self.retry: list[int] = []

    def next_tuple(self):
        if self.retry:
            i = self.retry.pop()
        elif self.next < self.n:
            i = self.next
            self.next += 1
        else:
            if self.pending:
                self.finish_input()
            else:
                self.finish()
            return
        self.pending.add(i)
        self.emit([i, self.t0 + i * self.step], msg_id=i)

    def ack(self, msg_id):
        self.pending.discard(msg_id)

    def fail(self, msg_id):
        self.retry.append(msg_id)


class PassThrough(Bolt):
    """Re-emits its input anchored; the task of index ``slow_index`` sleeps ``delay`` seconds
    per tuple (a parallel upstream bolt whose tasks run at different speeds)."""

    outputs = ["n", "ts"]

    def __init__(self, delay: float = 0.0005, slow_index: int = 0) -> None:
        self.delay, self.slow_index = delay, slow_index

    def prepare(self, conf, context):
        self.slow = context.task_index == self.slow_index

    def execute(self, tup):
        if self.slow:
            time.sleep(self.delay)
        self.emit(list(tup.values), [tup])
        self.ack(tup)


class ClickParse(Bolt):
    """Parses a click entry (``user``, ``page``, ``ts`` strings) into ``[user, page, ts]``; task 0
    is a little slower."""

    outputs = ["user", "page", "ts"]

    def prepare(self, conf, context):
        self.slow = context.task_index == 0

    def execute(self, tup):
        if self.slow:
            time.sleep(0.0005)
        self.emit([tup["user"], tup["page"], int(tup["ts"])], [tup])
        self.ack(tup)


class ClickWindowCount(WindowedBolt):
    """Records each window's size (``<key>:counts``: JSON start, end, count)."""

    outputs = ["end", "count"]

    def prepare(self, conf, context):
        self.r = _redis(conf)
        self.key = conf.get("test.key", "w")

    def execute(self, window):
        self.r.rpush(f"{self.key}:counts", json.dumps({"start": window.start_ts, "end": window.end_ts,
                                                       "count": len(window.get())}))
        self.emit([window.end_ts, len(window.get())])


class CountSum(WindowedBolt):
    """Downstream of ClickWindowCount on event time (the upstream window's end is the
    timestamp): records the sum of the counts per window to ``<key>:sums``."""

    outputs: list = []

    def prepare(self, conf, context):
        self.r = _redis(conf)
        self.key = conf.get("test.key", "w")

    def execute(self, window):
        self.r.rpush(f"{self.key}:sums", json.dumps({"end": window.end_ts,
                                                     "sum": sum(t["count"] for t in window.get())}))


class StatefulWindowRecorder(StatefulWindowedBolt):
    """WindowRecorder with its window in checkpointed state (no faults where it is used: its
    Redis writes are not part of the exactly-once promise)."""

    outputs = ["size"]

    def init_state(self, state):
        pass

    def prepare(self, conf, context):
        self.r = _redis(conf)
        self.key = conf.get("test.key", "w")

    def execute(self, window):
        ns = [int(t["n"]) for t in window.get()]
        self.r.rpush(f"{self.key}:windows", json.dumps({"all": ns, "start": window.start_ts, "end": window.end_ts}))
        self.emit([len(ns)])
