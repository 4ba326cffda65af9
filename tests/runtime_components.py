"""Test components that report to Redis (they run in forked worker processes). Each reads the
Redis URL from the user config key ``test.redis.url`` and writes under ``test.key``."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable

import redis

from topology_runtime import BasicBolt, Bolt, FailedException, Spout, StatefulBolt, Stream, TopologyBuilder


def _redis(conf) -> redis.Redis:
    return redis.Redis.from_url(conf["test.redis.url"], decode_responses=True)


class FeedSpout(Spout):
    """Emits msg ids pushed to the Redis list ``<key>:feed`` (values [id]); records ack/fail
    events to ``<key>:events``; replays failures when ``replay``; finishes on id ``-1``."""

    outputs = ["n"]

    def __init__(self, replay: bool = False, tracked: bool = True) -> None:
        self.replay = replay
        self.tracked = tracked

    def open(self, conf, context):
        self.r = _redis(conf)
        self.key = conf.get("test.key", "t")
        self.retry: list[int] = []
        self.pending: set[int] = set()
        self.done = False

    def next_tuple(self):
        if self.retry:
            n = self.retry.pop()
            self.emit([n], msg_id=n)
            return
        if self.done:
            if not self.pending:
                self.finish()
            return
        raw = self.r.lpop(f"{self.key}:feed")
        if raw is None:
            time.sleep(0.001)
            return
        n = int(raw)
        if n == -1:
            self.done = True
            return
        self.r.incr(f"{self.key}:emits")
        if self.tracked:
            self.pending.add(n)
            self.emit([n], msg_id=n)
        else:
            self.emit([n])

    def ack(self, msg_id):
        self.pending.discard(msg_id)
        self.r.rpush(f"{self.key}:events", f"ack:{msg_id}")

    def fail(self, msg_id):
        self.r.rpush(f"{self.key}:events", f"fail:{msg_id}")
        if self.replay:
            self.retry.append(msg_id)
        else:
            self.pending.discard(msg_id)


class Record(Bolt):
    """Records each input's first value to ``<key>:seen:<component>``; acks (or not)."""

    outputs = ["n"]

    def __init__(self, ack: bool = True, emit: bool = False, anchored: bool = True) -> None:
        self.do_ack, self.do_emit, self.anchored = ack, emit, anchored

    def prepare(self, conf, context):
        self.r = _redis(conf)
        self.key = conf.get("test.key", "t")
        self.name = context.component_id
        self.task = context.task_id

    def execute(self, tup):
        if tup.is_tick():
            return
        self.r.rpush(f"{self.key}:seen:{self.name}", f"{tup[0]}@{self.task}")
        if self.do_emit:
            self.emit([tup[0]], anchors=tup if self.anchored else [])
        if self.do_ack:
            self.ack(tup)


class Agg(Bolt):
    """Holds ``size`` inputs, then emits one tuple anchored to all of them and acks them."""

    outputs = ["n"]

    def __init__(self, size: int) -> None:
        self.size = size

    def prepare(self, conf, context):
        self.held = []
        self.r = _redis(conf)
        self.key = conf.get("test.key", "t")

    def execute(self, tup):
        self.held.append(tup)
        if len(self.held) == self.size:
            ids = sorted(t[0] for t in self.held)
            self.r.rpush(f"{self.key}:events", "agg:" + ",".join(map(str, ids)))
            self.emit([len(self.held)], anchors=self.held)
            for t in self.held:
                self.ack(t)
            self.held = []


class SelfAnchor(Bolt):
    outputs = ["n"]

    def execute(self, tup):
        self.emit([tup[0]], anchors=[tup, tup])
        self.ack(tup)


class AckEveryOther(Bolt):
    outputs = []

    def execute(self, tup):
        if tup[0] % 2:
            self.ack(tup)


class ResetHolder(Bolt):
    """Holds every input; on each tick resets the timeout of id 1 until ``hold_secs`` passed,
    then acks it. Other ids are held without reset (they time out)."""

    outputs = []

    def __init__(self, hold_secs: float) -> None:
        self.hold_secs = hold_secs

    def prepare(self, conf, context):
        self.held = {}
        self.since = None

    def execute(self, tup):
        if tup.is_tick():
            t = self.held.get(1)
            if t is not None:
                if time.monotonic() - self.since >= self.hold_secs:
                    self.ack(self.held.pop(1))
                else:
                    self.reset_timeout(t)
            return
        self.held[tup[0]] = tup
        if tup[0] == 1:
            self.since = time.monotonic()


class Failer(Bolt):
    outputs = []

    def execute(self, tup):
        self.fail(tup)


class BasicFailer(BasicBolt):
    outputs = ["n"]

    def execute(self, tup):
        self.emit([tup[0]])
        raise FailedException("no")


class FlakyOnce(BasicBolt):
    """Raises on the first attempt of every id (a user bug), succeeds on the replay."""

    outputs = ["n"]

    def prepare(self, conf, context):
        self.r = _redis(conf)
        self.key = conf.get("test.key", "t")

    def execute(self, tup):
        if self.r.sadd(f"{self.key}:flaky", tup[0]):
            raise ZeroDivisionError(f"planted bug on {tup[0]}")
        self.r.rpush(f"{self.key}:seen:flaky", str(tup[0]))


class NumberSpout(Spout):
    """Emits 0..n-1 split over its tasks on the default stream (and "side" if asked); bounded."""

    outputs = {"default": ["n", "key"], "side": ["n"]}

    def __init__(self, n: int, side: bool = False, tracked: bool = True) -> None:
        self.n, self.side, self.tracked = n, side, tracked

    def open(self, conf, context):
        self.todo = list(range(context.task_index, self.n, context.parallelism))[::-1]
        self.pending: set = set()
        self.retry: list = []
        self.r = _redis(conf)
        self.key = conf.get("test.key", "t")
        self.r.rpush(f"{self.key}:ctx", f"{context.component_id}|{context.task_id}|{context.task_index}|"
                     f"{context.component_tasks(context.component_id)}|{conf.get('my.setting')}")

    def next_tuple(self):
        if self.retry:
            i = self.retry.pop()
            self.emit([i, f"k{i % 7}"], msg_id=i)
            return
        if self.todo:
            i = self.todo.pop()
            targets = self.emit([i, f"k{i % 7}"], msg_id=i if self.tracked else None)
            self.r.rpush(f"{self.key}:targets", f"{i}:{','.join(map(str, targets))}")
            if self.tracked:
                self.pending.add(i)
            if self.side:
                self.emit([i], stream="side")
        elif not self.pending:
            self.finish()

    def ack(self, msg_id):
        self.pending.discard(msg_id)

    def fail(self, msg_id):
        self.retry.append(msg_id)


class TaskRecorder(BasicBolt):
    """Records (value, own task id) of every input under ``<key>:got:<component>``."""

    outputs = ["n"]

    def prepare(self, conf, context):
        self.r = _redis(conf)
        self.key = conf.get("test.key", "t")
        self.name, self.task = context.component_id, context.task_id
        self.buf: list[str] = []

    def execute(self, tup):
        if tup.is_tick():
            self.r.rpush(f"{self.key}:ticks:{self.name}", f"{self.task}:{time.monotonic()}")
            return
        self.buf.append(f"{tup[0]}|{self.task}|{tup.source_component}|{tup.stream}")
        if len(self.buf) >= 50:
            self.flush()

    def flush(self):
        if self.buf:
            self.r.rpush(f"{self.key}:got:{self.name}", *self.buf)
            self.buf = []

    def cleanup(self):
        self.flush()


class BadEmitter(Bolt):
    """Tries bad emits and records the error messages it gets back."""

    outputs = {"default": ["a", "b"], "targeted": Stream(["a"], direct=True)}

    def prepare(self, conf, context):
        self.r = _redis(conf)
        self.key = conf.get("test.key", "t")

    def execute(self, tup):
        for attempt in (
            lambda: self.emit([1]),                             # wrong number of values
            lambda: self.emit([1, object()]),                   # not carried by the wire
            lambda: self.emit([1, 2**70]),                      # int too large for the wire
            lambda: self.emit([1, 2], stream="nope"),           # undeclared stream
            lambda: self.emit([1], stream="targeted"),          # emit on a direct stream
            lambda: self.emit_direct(99999, [1], stream="targeted"),  # task not subscribed
            lambda: self.emit_direct(1, [1, 2]),                 # emit_direct on a normal stream
        ):
            try:
                attempt()
                self.r.rpush(f"{self.key}:errors", "NO ERROR")
            except Exception as e:  # noqa: BLE001 - recorded for the test
                self.r.rpush(f"{self.key}:errors", f"{type(e).__name__}: {e}")
        self.ack(tup)


class DirectSender(Bolt):
    """Sends each input straight to the lowest task of ``target`` with emit_direct."""

    outputs = {"targeted": Stream(["n"], direct=True)}

    def prepare(self, conf, context):
        self.target = min(context.component_tasks("direct"))

    def execute(self, tup):
        self.emit_direct(self.target, [tup[0]], anchors=tup, stream="targeted")
        self.ack(tup)


class BrokenOpen(Spout):
    outputs = ["n"]

    def open(self, conf, context):
        raise RuntimeError("planted open failure")


class Forever(Spout):
    outputs = ["n", "key"]

    def open(self, conf, context):
        self.i = 0
        self.acked: set = set()
        self.r = _redis(conf)

    def next_tuple(self):
        self.i += 1
        self.emit([self.i, "x"], msg_id=self.i)
        time.sleep(0.0005)

    def ack(self, msg_id):
        self.r.sadd("t:acked", msg_id)

    def fail(self, msg_id):
        self.r.sadd("t:failed", msg_id)

    def close(self):
        self.r.set("t:emitted", self.i)


class PingPong(Bolt):
    """Each input makes ``fanout`` outputs to the other side until the hop count runs out."""

    outputs = ["n", "hops"]

    def __init__(self, fanout: int) -> None:
        self.fanout = fanout

    def prepare(self, conf, context):
        self.executed = 0
        self.out = f"{conf['test.outdir']}/{context.component_id}-{context.task_id}"

    def execute(self, tup):
        self.executed += 1
        hops = 3 if tup.source_component == "nums" else tup[1]
        if hops > 0:
            for k in range(self.fanout):
                self.emit([tup[0] * 10 + k, hops - 1], anchors=tup)
        self.ack(tup)

    def cleanup(self):
        with open(self.out, "w") as f:
            f.write(str(self.executed))


class Ticker(Spout):
    """Emits ``[n]`` with msg id ``n`` every ``every`` seconds, for ever; records its
    activate/deactivate calls in the list ``t:activation``."""

    outputs = ["n"]

    def __init__(self, every: float = 0.002) -> None:
        self.every = every

    def open(self, conf, context):
        self.i = 0
        self.r = _redis(conf)
        self.next_at = 0.0

    def activate(self):
        self.r.rpush("t:activation", "activate")

    def deactivate(self):
        self.r.rpush("t:activation", "deactivate")

    def next_tuple(self):
        now = time.monotonic()
        if now < self.next_at:
            return
        self.next_at = now + self.every
        self.i += 1
        self.emit([self.i], msg_id=self.i)


class CountInState(StatefulBolt):
    """Counts its input in checkpointed state (key ``n``)."""

    outputs: list = []

    def init_state(self, state):
        self.state = state

    def execute(self, tup):
        self.state.put("n", self.state.get("n", 0) + 1)
        self.ack(tup)


def rss_mib(field: str, pid: int | str = "self") -> float:
    """VmRSS / VmHWM (the kernel's own peak) of a process, in MiB."""
    with open(f"/proc/{pid}/status") as f:
        return int(next(line for line in f if line.startswith(field + ":")).split()[1]) / 1024


def peak_rss_growth(run, timeout: float = 120, only: Callable[[int], bool] = lambda index: True):
    """Wait for ``run``; (its final status, the peak RSS of its workers ``only`` admits, above
    what each inherited). LocalCluster forks its workers from this process, whose resident pages
    they count as their own: late in a whole test session that is Airflow, Spark's client and more."""
    import threading

    inherited = rss_mib("VmRSS")
    peak = 0.0
    stop = threading.Event()

    def sample() -> None:
        nonlocal peak
        while not stop.wait(0.02):
            for index, pid in list(run.pids.items()):
                if only(index):
                    try:  # VmHWM: no spike falls between two samples
                        peak = max(peak, rss_mib("VmHWM", pid) - inherited)
                    except (OSError, StopIteration):
                        pass
    t = threading.Thread(target=sample)
    t.start()
    try:
        status = run.wait(timeout=timeout)
    finally:
        stop.set()
        t.join()
    return status, peak


class StreamFeeder:
    """Appends sentences to a Redis stream from a thread until stopped, so that a bounded run
    stays live for as long as a test needs it (however slow the machine); ``sentences`` is
    everything appended. With ``keep_ahead``, a round is appended only while fewer entries than
    that wait undelivered to the stream's consumer group: the run never runs dry, and what is
    left to read when the feeder stops is small whatever the machine's speed."""

    def __init__(self, url: str, stream: str, per_round: int = 50, every: float = 0.05,
                 keep_ahead: int | None = None) -> None:
        import threading

        from examples.wordcount import load_sentences

        self.sentences: list[str] = []
        self._stop = threading.Event()

        def undelivered(client: redis.Redis) -> int:
            """Entries past the group's last delivered one (all of them before the spout's open
            creates the group), counted up to ``keep_ahead``."""
            groups = client.xinfo_groups(stream) if client.exists(stream) else []
            after = f"({groups[0]['last-delivered-id']}" if groups else "-"
            return len(client.xrange(stream, min=after, max="+", count=keep_ahead))

        def feed() -> None:
            client = redis.Redis.from_url(url, decode_responses=True)
            seed = 1000
            while not self._stop.is_set():
                if keep_ahead is None or undelivered(client) < keep_ahead:
                    self.sentences += load_sentences(client, per_round, stream, seed=seed)
                    seed += 1
                self._stop.wait(every)

        self._thread = threading.Thread(target=feed, daemon=True)

    def __enter__(self) -> StreamFeeder:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()


class GatedSpout(Spout):
    """Emits ``values`` (on the one field ``field``) with themselves as message ids, a failed one
    again, then waits for the test's go (the file named by the config key ``test.done.file``)
    before finishing: a bounded run, live for as long as a test looks at it however slow the
    machine."""

    def __init__(self, values: Iterable, field: str = "n") -> None:
        self.values = list(values)
        self.outputs = [field]

    def open(self, conf, context):
        self.todo = self.values[::-1]
        self.pending: set = set()
        self.go = conf["test.done.file"]

    def next_tuple(self):
        if self.todo:
            v = self.todo.pop()
            self.pending.add(v)
            self.emit([v], msg_id=v)
        elif not self.pending and os.path.exists(self.go):
            self.finish()
        time.sleep(0.001)

    def ack(self, msg_id):
        self.pending.discard(msg_id)

    def fail(self, msg_id):
        self.todo.append(msg_id)


# Components that only give a plan its shape (unit tests of planning and metrics; never run).
class PlanWords(Spout):
    outputs = ["word"]


class PlanSplit(BasicBolt):
    outputs = ["word"]


class PlanCount(StatefulBolt):
    outputs = ["word", "n"]


def plan_wordcount(words: int = 2, split: int = 2, count: int = 2):
    """The stateful word count's shape (spout, shuffled split, keyed stateful count) with these
    parallelisms, as a topology."""
    b = TopologyBuilder()
    b.set_spout("words", PlanWords(), words)
    b.set_bolt("split", PlanSplit(), split).shuffle_grouping("words")
    b.set_bolt("count", PlanCount(), count).fields_grouping("split", ["word"])
    return b.create_topology()
