"""Reusable test components for the runtime's semantic suite (test_runtime_*.py).

Components run in forked worker processes (or Spark executors), so they report to a real Redis:
each reads the URL from the user config key ``test.redis.url`` and namespaces its keys with
``test.key`` (default "t"). User keys (no ``topology.`` prefix) reach open/prepare unchanged.

Conventions (with key "t"):
  t:events          "emit:<id>", "ack:<id>", "fail:<id>", "agg:<ids>" in the order they happened
  t:time:<kind>     hash id -> time.time() of the first emit/ack/fail of that id
  t:seen:<comp>     "<value>@<task>" for every input a recording bolt executed
  t:pid             hash task -> pid of the process running it (set in open/prepare)
  t:ctx             JSON of every task's context and config, one entry per open/prepare
"""

from __future__ import annotations

import json
import os
import time

import redis

from topology_runtime import BasicBolt, Bolt, FailedException, Spout, Stream

USER_KEYS = ("test.key", "my.setting", "my.string", "my.number", "my.flag", "my.none", "my.component.only")


def _redis(conf) -> redis.Redis:
    return redis.Redis.from_url(conf["test.redis.url"], decode_responses=True)


def conf_for(redis_url: str, key: str = "t", **extra) -> dict:
    """The config every test topology needs: where Redis is and the key prefix."""
    return {"test.redis.url": redis_url, "test.key": key, **extra}


class _Reporting:
    """Mixin: Redis handle, key prefix, task identity and pid registration."""

    def _setup(self, conf, context) -> None:
        self.r = _redis(conf)
        self.key = conf.get("test.key", "t")
        self.name = context.component_id
        self.task = context.task_id
        self.r.hset(f"{self.key}:pid", str(self.task), os.getpid())
        self.r.rpush(f"{self.key}:ctx", json.dumps({
            "component": context.component_id, "task": context.task_id, "index": context.task_index,
            "tasks": context.component_tasks(context.component_id), "pid": os.getpid(),
            "conf": {k: conf[k] for k in USER_KEYS if k in conf},
        }))

    def _event(self, kind: str, msg_id) -> None:
        self.r.hsetnx(f"{self.key}:time:{kind}", str(msg_id), time.time())
        self.r.rpush(f"{self.key}:events", f"{kind}:{msg_id}")


# --- spouts -------------------------------------------------------------------------------------

class FeedSpout(_Reporting, Spout):
    """Emits the ids pushed to the Redis list ``<key>:feed:<feed or component id>`` (values [id]),
    with the id as msg id when ``tracked``. Records emit/ack/fail events; re-emits failed ids when
    ``replay``; finishes (once nothing is pending) after reading the id -1."""

    outputs = ["n"]

    def __init__(self, replay: bool = False, tracked: bool = True, feed: str | None = None) -> None:
        self.replay, self.tracked, self.feed = replay, tracked, feed

    def open(self, conf, context):
        self._setup(conf, context)
        self.feed_key = f"{self.key}:feed:{self.feed or context.component_id}"
        self.retry: list[int] = []
        self.pending: set[int] = set()
        self.done = False

    def next_tuple(self):
        if self.retry:
            n = self.retry.pop(0)
            self.emit([n], msg_id=n)
            self._event("emit", n)
            return
        if self.done:
            if not self.pending:
                self.finish()
            return
        raw = self.r.lpop(self.feed_key)
        if raw is None:
            time.sleep(0.002)
            return
        n = int(raw)
        if n == -1:
            self.done = True
            return
        if self.tracked:
            self.pending.add(n)
            self.emit([n], msg_id=n)
        else:
            self.emit([n])
        self._event("emit", n)

    def ack(self, msg_id):
        self.pending.discard(msg_id)
        self._event("ack", msg_id)

    def fail(self, msg_id):
        self._event("fail", msg_id)
        if self.replay:
            self.retry.append(msg_id)
        else:
            self.pending.discard(msg_id)


def feed(r: redis.Redis, spout: str, *ids, key: str = "t") -> None:
    r.rpush(f"{key}:feed:{spout}", *ids)


class EndlessSpout(_Reporting, Spout):
    """Every next_tuple call emits one new tracked tuple; counts calls in ``<key>:calls:<task>``."""

    outputs = ["n"]

    def open(self, conf, context):
        self._setup(conf, context)
        self.i = 0

    def next_tuple(self):
        self.r.incr(f"{self.key}:calls:{self.task}")
        self.i += 1
        self.emit([self.i], msg_id=(self.task, self.i))


class NumberSpout(_Reporting, Spout):
    """Bounded: emits 0..n-1 split over its tasks as [n, "k<n % 7>"] (msg id n when tracked), and
    [n] on stream "side" when ``side``; records what ``emit`` returned (``<key>:targets``), replays
    failures, records ack/fail events when ``events``, and finishes once every id is acked."""

    outputs = {"default": ["n", "key"], "side": ["n"]}

    def __init__(self, n: int, side: bool = False, tracked: bool = True, events: bool = False) -> None:
        self.n, self.side, self.tracked, self.events = n, side, tracked, events

    def open(self, conf, context):
        self._setup(conf, context)
        tasks = context.component_tasks(context.component_id)
        self.todo = list(range(context.task_index, self.n, len(tasks)))[::-1]
        self.pending: set[int] = set()
        self.retry: list[int] = []
        self.targets: list[str] = []

    def next_tuple(self):
        if self.retry:
            i = self.retry.pop(0)
            self.emit([i, f"k{i % 7}"], msg_id=i)
            return
        if self.todo:
            i = self.todo.pop()
            targets = self.emit([i, f"k{i % 7}"], msg_id=i if self.tracked else None)
            self.targets.append(f"{i}:{','.join(map(str, targets))}")
            if self.tracked:
                self.pending.add(i)
            if self.side:
                self.emit([i], stream="side")
            if len(self.targets) >= 100:
                self._flush()
        elif not self.pending:
            self._flush()
            self.finish()

    def _flush(self):
        if self.targets:
            self.r.rpush(f"{self.key}:targets", *self.targets)
            self.targets = []

    def ack(self, msg_id):
        self.pending.discard(msg_id)
        if self.events:
            self._event("ack", msg_id)

    def fail(self, msg_id):
        if self.events:
            self._event("fail", msg_id)
        self.retry.append(msg_id)


class Forever(_Reporting, Spout):
    """Unbounded: emits 1, 2, 3 ... as tracked tuples; records acked/failed ids in the sets
    ``<key>:acked`` / ``<key>:failed`` and, at close, the last id emitted in ``<key>:emitted``."""

    outputs = ["n", "key"]

    def open(self, conf, context):
        self._setup(conf, context)
        self.i = 0

    def next_tuple(self):
        self.i += 1
        self.emit([self.i, "x"], msg_id=self.i)
        time.sleep(0.0005)

    def ack(self, msg_id):
        self.r.sadd(f"{self.key}:acked", msg_id)

    def fail(self, msg_id):
        self.r.sadd(f"{self.key}:failed", msg_id)

    def close(self):
        self.r.set(f"{self.key}:emitted", self.i)


class BrokenOpen(_Reporting, Spout):
    outputs = ["n"]

    def open(self, conf, context):
        self._setup(conf, context)
        raise RuntimeError("planted open failure")


# --- bolts ---------------------------------------------------------------------------------------

class Record(_Reporting, Bolt):
    """Records each input's first value to ``<key>:seen:<component>`` as "<value>@<task>";
    emits it on (anchored or not) when ``emit``; acks it when ``ack``; ``delay`` sleeps first."""

    outputs = ["n"]

    def __init__(self, ack: bool = True, emit: bool = False, anchored: bool = True, delay: float = 0.0) -> None:
        self.do_ack, self.do_emit, self.anchored, self.delay = ack, emit, anchored, delay

    def prepare(self, conf, context):
        self._setup(conf, context)

    def execute(self, tup):
        if tup.is_tick():
            return
        if self.delay:
            time.sleep(self.delay)
        self.r.rpush(f"{self.key}:seen:{self.name}", f"{tup[0]}@{self.task}")
        if self.do_emit:
            self.emit([tup[0]], anchors=tup if self.anchored else [])
        if self.do_ack:
            self.ack(tup)


class Agg(_Reporting, Bolt):
    """Holds ``size`` inputs, then emits one tuple anchored to all of them and acks them;
    records "agg:<sorted ids>" to the events list just before."""

    outputs = ["n"]

    def __init__(self, size: int) -> None:
        self.size = size

    def prepare(self, conf, context):
        self._setup(conf, context)
        self.held: list = []

    def execute(self, tup):
        self.held.append(tup)
        if len(self.held) == self.size:
            ids = sorted(t[0] for t in self.held)
            self.r.rpush(f"{self.key}:events", f"agg:{self.name}:" + ",".join(map(str, ids)))
            self.emit([ids[0]], anchors=self.held)
            for t in self.held:
                self.ack(t)
            self.held = []


class SelfAnchor(Bolt):
    """Emits each input anchored twice to itself, then acks it."""

    outputs = ["n"]

    def execute(self, tup):
        self.emit([tup[0]], anchors=[tup, tup])
        self.ack(tup)


class AckEvenFailOdd(Bolt):
    outputs = []

    def execute(self, tup):
        if tup[0] % 2:
            self.fail(tup)
        else:
            self.ack(tup)


class AckEveryOther(Bolt):
    """Acks odd ids, leaves even ids unacked (they time out)."""

    outputs = []

    def execute(self, tup):
        if tup[0] % 2:
            self.ack(tup)


class ResetHolder(_Reporting, Bolt):
    """Holds every input. On each tick, resets the timeout of id 1 (unless ``reset`` is False) until
    ``hold_secs`` have passed since it arrived, then acks it and records "bolt_ack:1" in the events.
    Other ids are held without reset (they time out)."""

    outputs = []

    def __init__(self, hold_secs: float, reset: bool = True) -> None:
        self.hold_secs, self.reset = hold_secs, reset

    def prepare(self, conf, context):
        self._setup(conf, context)
        self.held: dict = {}
        self.since = 0.0

    def execute(self, tup):
        if tup.is_tick():
            t = self.held.get(1)
            if t is not None:
                if time.monotonic() - self.since >= self.hold_secs:
                    self.ack(self.held.pop(1))
                    self.r.rpush(f"{self.key}:events", "bolt_ack:1")
                elif self.reset:
                    self.reset_timeout(t)
            return
        self.held[tup[0]] = tup
        if tup[0] == 1:
            self.since = time.monotonic()


class Failer(Bolt):
    outputs = []

    def execute(self, tup):
        self.fail(tup)


class BasicPass(BasicBolt):
    """Emits its input on (auto-anchored); acked by the runtime after execute."""

    outputs = ["n"]

    def execute(self, tup):
        self.emit([tup[0]])


class BasicSelfAck(BasicBolt):
    """A BasicBolt that also acks explicitly (as ported Storm code may): must not double-ack."""

    outputs = ["n"]

    def execute(self, tup):
        self.emit([tup[0]])
        self.ack(tup)


class BasicDouble(_Reporting, BasicBolt):
    """Emits two tuples per input."""

    outputs = ["n"]

    def prepare(self, conf, context):
        self._setup(conf, context)

    def execute(self, tup):
        self.emit([tup[0]])
        self.emit([tup[0] + 1000])


class BasicFailer(BasicBolt):
    """Emits its input on, then raises FailedException."""

    outputs = ["n"]

    def execute(self, tup):
        self.emit([tup[0]])
        raise FailedException("no")


class RaiseOnce(_Reporting, Bolt):
    """A plain bolt with a planted bug: raises on the first attempt of every id; on the replay it
    records the id (``<key>:seen:<component>``) and acks."""

    outputs: list = []

    def prepare(self, conf, context):
        self._setup(conf, context)

    def execute(self, tup):
        if self.r.sadd(f"{self.key}:raised", tup[0]):
            raise ZeroDivisionError(f"planted bug on {tup[0]}")
        self.r.rpush(f"{self.key}:seen:{self.name}", f"{tup[0]}@{self.task}")
        self.ack(tup)


class BasicRaiseOnce(RaiseOnce, BasicBolt):
    """The same planted bug in a BasicBolt (acked by the runtime on the replay; its ack is a no-op)."""

    def execute(self, tup):
        if self.r.sadd(f"{self.key}:raised", tup[0]):
            raise ZeroDivisionError(f"planted bug on {tup[0]}")
        self.r.rpush(f"{self.key}:seen:{self.name}", f"{tup[0]}@{self.task}")


class IterAnchor(Bolt):
    """Emits each input on, anchored through an iterator (``anchors=iter([tup])``), then acks it."""

    outputs = ["n"]

    def execute(self, tup):
        self.emit([tup[0]], anchors=iter([tup]))
        self.ack(tup)


class TaskRecorder(_Reporting, BasicBolt):
    """Records "<value>|<task>|<source component>|<source task>|<stream>" for every input under
    ``<key>:got:<component>`` (buffered, flushed every 50 and at cleanup), and the time of every
    tick under ``<key>:ticks:<component>:<task>``."""

    outputs = ["n"]

    def prepare(self, conf, context):
        self._setup(conf, context)
        self.buf: list[str] = []

    def execute(self, tup):
        if tup.is_tick():
            self.r.rpush(f"{self.key}:ticks:{self.name}:{self.task}", time.monotonic())
            return
        self.buf.append(f"{tup[0]}|{self.task}|{tup.source_component}|{tup.source_task}|{tup.stream}")
        if len(self.buf) >= 50:
            self.flush()

    def flush(self):
        if self.buf:
            self.r.rpush(f"{self.key}:got:{self.name}", *self.buf)
            self.buf = []

    def cleanup(self):
        self.flush()


def got(r: redis.Redis, component: str, key: str = "t") -> list[tuple[int, int, str, int, str]]:
    rows = [x.split("|") for x in r.lrange(f"{key}:got:{component}", 0, -1)]
    return [(int(v), int(task), src, int(src_task), stream) for v, task, src, src_task, stream in rows]


class DirectSender(_Reporting, Bolt):
    """Sends each input with emit_direct to task ``tasks[value % len(tasks)]`` of component
    ``direct``; records "<value>:<chosen task>:<returned ids>" under ``<key>:direct``."""

    outputs = {"targeted": Stream(["n"], direct=True)}

    def prepare(self, conf, context):
        self._setup(conf, context)
        self.targets = context.component_tasks("direct")
        self.buf: list[str] = []

    def execute(self, tup):
        target = self.targets[tup[0] % len(self.targets)]
        returned = self.emit_direct(target, [tup[0]], anchors=tup, stream="targeted")
        self.buf.append(f"{tup[0]}:{target}:{','.join(map(str, returned))}")
        self.r.rpush(f"{self.key}:got:{self.name}",
                     f"{tup[0]}|{self.task}|{tup.source_component}|{tup.source_task}|{tup.stream}")
        if len(self.buf) >= 50:
            self.r.rpush(f"{self.key}:direct", *self.buf)
            self.buf = []
        self.ack(tup)

    def cleanup(self):
        if self.buf:
            self.r.rpush(f"{self.key}:direct", *self.buf)


class BadEmitter(_Reporting, Bolt):
    """Tries bad emits and records the message of each exception (or "NO ERROR")."""

    outputs = {"default": ["a", "b"], "targeted": Stream(["a"], direct=True),
               "chunks": Stream(["head", "rows"], direct=True, chunk=True)}

    def prepare(self, conf, context):
        self._setup(conf, context)

    def execute(self, tup):
        for attempt in (
            lambda: self.emit([1]),                                    # 0 wrong number of values
            lambda: self.emit([1, object()]),                          # 1 not carried by the wire
            lambda: self.emit([1, 2**70]),                             # 2 int too large for the wire
            lambda: self.emit([1, 2], stream="nope"),                  # 3 undeclared stream
            lambda: self.emit([1], stream="targeted"),                 # 4 emit on a direct stream
            lambda: self.emit_direct(99999, [1], stream="targeted"),   # 5 task not subscribed
            lambda: self.emit_direct(self.task, [1, 2]),               # 6 emit_direct, normal stream
            lambda: self.emit_direct(self.task, [1], stream="targeted"),  # 7 own task: not subscribed
            lambda: self.emitter()([1]),                               # 8 emitter(): wrong number
            lambda: self.emitter()([1, object()]),                     # 9 emitter(): not on the wire
            lambda: self.emitter("nope"),                              # 10 emitter(): undeclared
            lambda: self.emitter("targeted"),                          # 11 emitter(): direct stream
            lambda: self.router()([1]),                                # 12 router(): wrong number
            lambda: self.router("targeted"),                           # 13 router(): direct stream
            lambda: self.chunk_emitter("default"),                     # 14 chunk_emitter(): not direct
            lambda: self.chunk_emitter("targeted"),                    # 15 chunk_emitter(): not a chunk stream
            lambda: self.chunk_emitter("chunks")(99999, [1], [[1]]),   # 16 chunk_emitter(): not subscribed
        ):
            try:
                attempt()
                self.r.rpush(f"{self.key}:errors", "NO ERROR")
            except Exception as e:  # noqa: BLE001 - recorded for the test
                self.r.rpush(f"{self.key}:errors", f"{type(e).__name__}: {e}")
        self.ack(tup)


class PingPong(_Reporting, Bolt):
    """Each input makes ``fanout`` outputs to the other side until the hop count runs out (a spout
    tuple starts with ``hops``). Counts executed/emitted in memory and writes them at cleanup to the
    hashes ``<key>:executed`` / ``<key>:emitted`` (task -> count)."""

    outputs = ["n", "hops"]

    def __init__(self, fanout: int, hops: int) -> None:
        self.fanout, self.hops = fanout, hops

    def prepare(self, conf, context):
        self._setup(conf, context)
        self.executed = self.emitted = 0

    def execute(self, tup):
        self.executed += 1
        hops = self.hops if tup.source_component == "nums" else tup[1]
        if hops > 0:
            for k in range(self.fanout):
                self.emit([tup[0] * 10 + k, hops - 1], anchors=tup)
                self.emitted += 1
        self.ack(tup)

    def cleanup(self):
        self.r.hset(f"{self.key}:executed", str(self.task), self.executed)
        self.r.hset(f"{self.key}:emitted", str(self.task), self.emitted)


# --- reading the records ------------------------------------------------------------------------

def events(r: redis.Redis, key: str = "t") -> list[str]:
    return r.lrange(f"{key}:events", 0, -1)


def outcomes(r: redis.Redis, key: str = "t") -> list[str]:
    """The ack/fail events, in order."""
    return [e for e in events(r, key) if e.startswith(("ack:", "fail:"))]


def ids_of(r: redis.Redis, kind: str, key: str = "t") -> list[int]:
    return [int(e.split(":", 1)[1]) for e in events(r, key) if e.startswith(kind + ":")]


def times(r: redis.Redis, kind: str, key: str = "t") -> dict[int, float]:
    return {int(k): float(v) for k, v in r.hgetall(f"{key}:time:{kind}").items()}


def pids(r: redis.Redis, key: str = "t") -> dict[int, int]:
    return {int(k): int(v) for k, v in r.hgetall(f"{key}:pid").items()}


def contexts(r: redis.Redis, key: str = "t") -> list[dict]:
    return [json.loads(x) for x in r.lrange(f"{key}:ctx", 0, -1)]
