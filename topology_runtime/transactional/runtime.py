"""The transactional components on the plain runtime: coordinator spout, emitter, and the
CoordinatedBolt wrapper around batch bolts."""

from __future__ import annotations

import copy
import json
import time
from typing import Any

import redis

from ..components import Bolt, Spout, Stream, Tuple
from ..reliability.coordinated import CoordinatedTracker
from ..reliability.transactional import BATCH, TransactionalCoordinator, TransactionAttempt
from .batch import Committer

COORD_STREAM = "$coord"
BATCH_STREAM, COMMIT_STREAM = "batch", "commit"


def attempt_of(value: Any) -> TransactionAttempt:
    if isinstance(value, TransactionAttempt):
        return value
    return TransactionAttempt(int(value[0]), int(value[1]))


def wire(value: Any) -> Any:
    return [value.txid, value.attempt_id] if isinstance(value, TransactionAttempt) else value


def _key(tx_id: str, name: str) -> str:
    return f"topology:{{{tx_id}:ctl}}:tx:{name}"


def _redis(conf: dict) -> redis.Redis:
    url = (conf.get("topology.state.provider.config") or {}).get("url") or conf.get("redis.url")
    if not url:
        raise ValueError("a transactional topology keeps its txid and batch metadata in Redis: set redis.url")
    return redis.Redis.from_url(url, decode_responses=True)


class CoordinatorSpout(Spout):
    """One task. Batches and commits are tuples tracked by the acker (msg id = the attempt)."""

    outputs = {BATCH_STREAM: ["tx", "committed"], COMMIT_STREAM: ["tx"]}

    def __init__(self, spout: Any, tx_id: str | None) -> None:
        self.spout = spout
        self.tx_id = tx_id

    def open(self, conf, context):
        self.tx_id = self.tx_id or conf.get("topology.transactional.id") or context.topology_id
        self.redis = _redis(conf)
        cur = self.redis.get(_key(self.tx_id, "current"))
        self.spout.open(conf)
        self.machine = TransactionalCoordinator(
            max_active=int(conf.get("topology.max.spout.pending") or 1),
            current_txid=int(cur) if cur else 1,
            is_ready=self._ready,
        )
        self.done = False
        self._checked = 0.0
        self._is_exhausted = False

    def _exhausted(self) -> bool:
        now = time.monotonic()
        if now - self._checked >= 0.1:  # at most 10 reads a second, not one per sync
            self._checked = now
            metas = {int(k): json.loads(v) for k, v in self.redis.hgetall(_key(self.tx_id, "last-meta")).items()}
            self._is_exhausted = self.spout.exhausted(metas)
        return self._is_exhausted

    def _ready(self) -> bool:
        return not self.done and self.spout.is_ready() and not self._exhausted()

    def _emit(self, out: list) -> None:
        for e in out:
            if e[0] == BATCH:
                self.emit([wire(e[1]), self.machine.current_txid - 1], msg_id=wire(e[1]), stream=BATCH_STREAM)
            else:
                self.emit([wire(e[1])], msg_id=wire(e[1]), stream=COMMIT_STREAM)

    def next_tuple(self):
        if not self.done and not self.machine.active and self._exhausted():
            self.done = True
            self.finish()  # bounded: every batch committed and nothing left
            return
        self._emit(self.machine.sync())

    def ack(self, msg_id):
        a = attempt_of(msg_id)
        before = self.machine.current_txid
        out = self.machine.ack(a)
        if self.machine.current_txid != before:  # a commit completed: persist the position
            self.redis.set(_key(self.tx_id, "current"), self.machine.current_txid)
        self._emit(out)

    def fail(self, msg_id):
        self._emit(self.machine.fail(attempt_of(msg_id)))


class CoordinatedBolt(Bolt):
    """Runs a BatchBolt per batch attempt and tracks, per attempt, what it received and sent,
    so it knows when an upstream's batch is complete (Storm's CoordinatedBolt)."""

    def __init__(self, delegate: Any, sources: list[str], downstream: list[str], id_stream: bool,
                 emitter_of: Any = None) -> None:
        self.delegate = delegate  # a BatchBolt template (or None for the emitter)
        self.sources = sources
        self.downstream = downstream
        self.id_stream = id_stream
        self.emitter_of = emitter_of  # the transactional spout, when this is the emitter
        out = getattr(delegate, "outputs", None) if delegate is not None else None
        fields = list(out) if out else (["tx", *emitter_of.fields] if emitter_of is not None else [])
        self.outputs = {COORD_STREAM: Stream(["id", "count"], direct=True)}
        if fields:
            self.outputs["default"] = fields

    def prepare(self, conf, context):
        self.conf, self.context = conf, context
        n_reports = sum(len(context.component_tasks(s)) for s in self.sources)
        out_tasks = [t for c in self.downstream for t in context.component_tasks(c)]
        self.tracker = CoordinatedTracker(n_reports, out_tasks, has_id_stream=self.id_stream)
        self.batches: dict[TransactionAttempt, Any] = {}
        self._user_emit = self.emit
        if self.emitter_of is not None:
            self.redis = _redis(conf)
            self.tx_id = conf.get("topology.transactional.id") or context.topology_id
            self.emitter_of.open(conf)
            n = self.emitter_of.num_partitions()
            self.partitions = [p for p in range(n) if p % context.parallelism == context.task_index]

    # --- emits from the delegate (counted per target task for the coordination stream) --------
    def _counted_emit(self, attempt: TransactionAttempt):
        def emit(values, anchors=None, stream="default"):
            values = list(values)
            values[0] = wire(values[0])
            targets = self._user_emit(values, stream=stream)  # unanchored: coord tuples track batches
            self.tracker.emitted(attempt, targets)
            return targets
        return emit

    def _batch(self, attempt: TransactionAttempt):
        b = self.batches.get(attempt)
        if b is None:
            b = copy.deepcopy(self.delegate)
            b.emit = self._counted_emit(attempt)
            b.prepare(self.conf, self.context, attempt)
            self.batches[attempt] = b
        return b

    def execute(self, tup: Tuple):
        if tup.is_tick():
            for f in self.tracker.tick():
                self.batches.pop(f.id, None)
                for t in f.fail:
                    self.fail(t)
            return
        attempt = attempt_of(tup.values[0])  # values are shared with other local tasks: never mutate
        if tup.stream == COORD_STREAM:
            self._apply(self.tracker.coord(attempt, int(tup.values[1]), tup))
        elif self.id_stream and tup.stream == COMMIT_STREAM:
            self._apply(self.tracker.id_tuple(attempt, tup))
        elif self.emitter_of is not None:
            self._emit_batch(attempt, tup)
            # Counts go out anchored to the batch tuple *before* it is acked (Storm's order), so
            # its tree completes only when every downstream task finished the batch.
            self._apply(self.tracker.regular_acked(attempt), anchor=tup)
            self.ack(tup)
        else:
            try:
                self._batch(attempt).execute(Tuple([attempt, *tup.values[1:]], tup.info, tup.source_task, tup.anchors))
            except Exception:
                self._apply(self.tracker.regular_failed(attempt))
                raise
            self._apply(self.tracker.regular_acked(attempt), anchor=tup)
            self.ack(tup)

    def _emit_batch(self, attempt: TransactionAttempt, tup: Tuple) -> None:
        emit = self._counted_emit(attempt)
        key_meta = _key(self.tx_id, f"meta:{attempt.txid}")
        committed = tup.values[1]
        for p in self.partitions:
            raw = self.redis.hget(key_meta, str(p))
            if raw is not None:  # a replay: exactly the same batch
                self.emitter_of.emit_partition_batch(attempt, lambda row: emit([attempt, *row]), p, json.loads(raw))
                continue
            prev = self.redis.hget(_key(self.tx_id, "last-meta"), str(p))
            meta = self.emitter_of.emit_partition_batch_new(
                attempt, lambda row: emit([attempt, *row]), p, json.loads(prev) if prev else None)
            pipe = self.redis.pipeline()
            pipe.hset(key_meta, str(p), json.dumps(meta))
            pipe.hset(_key(self.tx_id, "last-meta"), str(p), json.dumps(meta))
            pipe.execute()
        if committed and committed > 1:
            self.redis.delete(_key(self.tx_id, f"meta:{committed - 1}"))  # cleanupBefore(committed)

    def _apply(self, f, anchor: Tuple | None = None) -> None:
        if f.finished:
            b = self.batches.pop(f.id, None)
            if b is not None:
                try:
                    b.finish_batch()
                except Exception:
                    f2 = self.tracker.finish_failed(f.id)
                    for t in f.ack + f2.fail:
                        self.fail(t)
                    raise
            held = [t for t in f.ack if t is not anchor]
            anchors = [t for t in ([anchor] if anchor is not None else []) + held]
            for task, n in f.counts.items():  # read after finish_batch: its emits count
                self.emit_direct(task, [wire(f.id), n], anchors=anchors or [], stream=COORD_STREAM)
            self.tracker.done(f.id)
            for t in held:
                self.ack(t)
        else:
            for t in f.ack:
                self.ack(t)
        for t in f.fail:
            self.batches.pop(f.id, None)
            self.fail(t)


def is_committer(bolt: Any) -> bool:
    return isinstance(bolt, Committer)
