"""The transactional components on the plain runtime: coordinator spout, emitter, and the
CoordinatedBolt wrapper around batch bolts."""

from __future__ import annotations

import copy
import json
import logging
import time
from typing import Any

import redis

from ..api.components import Bolt, Spout, Stream, StreamInfo, Tuple
from ..reliability.coordinated import NOTHING, CoordinatedTracker
from ..reliability.transactional import (
    BATCH,
    COMMITTING,
    PROCESSING,
    TransactionalCoordinator,
    TransactionAttempt,
    opaque_commit,
    opaque_last_meta,
)
from ..testing.faults import maybe_crash
from .batch import Committer
from .progress import TxProgress
from .spouts import is_opaque

log = logging.getLogger(__name__)

COORD_STREAM = "$coord"
BATCH_STREAM, COMMIT_STREAM = "batch", "commit"
# A batch's default-stream tuples travel between coordinated bolts in chunks: one tuple
# [attempt, rows] per target task per CHUNK_ROWS rows, each row a whole tuple's values. Routing
# (the user's grouping) is still per row; the queue, transport, coordination tracking and acking
# are per chunk, a fraction of a row's cost on a hop that carries thousands of rows per batch.
ROWS_STREAM = "$rows"
CHUNK_ROWS = 256


class RowChunks:
    """One attempt's rows on their way to each target task: a chunk leaves when it holds
    CHUNK_ROWS rows, the rest at ``flush``. ``sent`` counts the chunks per task (what the
    coordination stream reports). ``add(values)`` takes a tuple's values (the attempt first),
    ``add_row(row)`` a spout's row (the attempt is put in front); both route by the user's
    grouping, checked as an emit. Closures, not methods: they run once per row."""

    __slots__ = ("head", "chunks", "sent", "add", "add_row", "_send")

    def __init__(self, route: Any, send: Any, head: list) -> None:
        self.head = head
        chunks: dict[int, list] = {}
        sent: dict[int, int] = {}
        self.chunks, self.sent = chunks, sent

        def send_chunk(task: int, rows: list) -> None:
            send(task, head, rows)
            sent[task] = sent.get(task, 0) + 1

        def adder(prefixed: bool):
            def add(values: list) -> list[int]:
                if prefixed:
                    values = [head, *values]
                targets = route(values)
                for t in targets:
                    c = chunks.get(t)
                    if c is None:
                        chunks[t] = [values]
                    else:
                        c.append(values)
                        if len(c) >= CHUNK_ROWS:
                            send_chunk(t, c)
                            chunks[t] = []
                return targets
            return add

        self.add, self.add_row, self._send = adder(False), adder(True), send_chunk

    def flush(self) -> dict[int, int]:
        for t, c in self.chunks.items():
            if c:
                self._send(t, c)
        self.chunks.clear()
        return self.sent


def attempt_of(value: Any) -> TransactionAttempt:
    if isinstance(value, TransactionAttempt):
        return value
    return TransactionAttempt(int(value[0]), int(value[1]))


def wire(value: Any) -> Any:
    return [value.txid, value.attempt_id] if isinstance(value, TransactionAttempt) else value


def _key(tx_id: str, name: str) -> str:
    return f"topology:{{{tx_id}:ctl}}:tx:{name}"


def _txid_of_key(key: str) -> int | None:
    tail = key.rsplit(":", 1)[-1]
    return int(tail) if tail.isdigit() else None


def _redis(conf: dict) -> redis.Redis:
    url = (conf.get("topology.state.provider.config") or {}).get("url") or conf.get("redis.url")
    if not url:
        raise ValueError("a transactional topology keeps its txid and batch metadata in Redis: set redis.url")
    return redis.Redis.from_url(url, decode_responses=True)


class CoordinatorSpout(Spout):
    """One task. Batches and commits are tuples tracked by the acker (msg id = the attempt)."""

    outputs = {BATCH_STREAM: ["tx", "committed"], COMMIT_STREAM: ["tx"]}
    # Commits are strictly serial, so their latency is the pipeline's period: a commit tuple
    # goes ahead of queued batch data at the committer (one commit is in flight at a time).
    priority_streams = (COMMIT_STREAM,)

    def __init__(self, spout: Any, tx_id: str | None) -> None:
        self.spout = spout
        self.tx_id = tx_id

    def open(self, conf, context):
        self.tx_id = self.tx_id or conf.get("topology.transactional.id") or context.topology_id
        self.redis = _redis(conf)
        cur = self.redis.get(_key(self.tx_id, "current"))
        self.spout.open(conf)
        self.opaque = is_opaque(self.spout)
        self.n_partitions = self.spout.num_partitions() if self.opaque else 0  # for opaque commits
        recorded = self._cleanup_metas(int(cur) if cur else 1)
        self.machine = TransactionalCoordinator(
            max_active=int(conf.get("topology.max.spout.pending") or 1),
            current_txid=int(cur) if cur else 1,
            is_ready=self._ready,
        )
        if not self.opaque:  # opaque replays read anew from the committed metadata instead
            self.machine.restore_recorded(recorded)
        self.done = False
        self._checked = float("-inf")
        self._is_exhausted = False
        every = conf.get("topology.transactional.progress.secs", 10.0)
        self.progress = TxProgress(self.tx_id, float(every) if every else None, time.monotonic(),
                                   pending=self.machine.max_active)

    def _cleanup_metas(self, current: int) -> list[int]:
        """Deletes per-txid metadata a previous run left behind (a crash between writing and
        deleting); returns the uncommitted txids whose batches an emitter recorded (partitioned
        spouts): their data is already in ``last-meta``, so they must replay before a drained
        stream may end the run."""
        old, recorded = [], []
        for pattern in ("meta:*", "ometa:*"):
            for k in self.redis.scan_iter(match=_key(self.tx_id, pattern), count=1000):
                t = _txid_of_key(k)
                if t is not None and t < current - 1:
                    old.append(k)
                elif t is not None and t >= current and pattern == "meta:*":
                    recorded.append(t)
        if old:
            self.redis.delete(*old)
        return sorted(recorded)

    def _latest_metas(self) -> dict:
        """Per partition, where the newest batch ends: committed metadata (opaque) or the last
        batch recorded (partitioned), then, for opaque spouts, the batches in flight."""
        if not self.opaque:
            return {int(k): json.loads(v) for k, v in self.redis.hgetall(_key(self.tx_id, "last-meta")).items()}
        txids = sorted(self.machine.active)
        pipe = self.redis.pipeline(transaction=False)
        pipe.hgetall(_key(self.tx_id, "committed-meta"))
        for t in txids:
            pipe.hgetall(_key(self.tx_id, f"ometa:{t}"))
        committed, *inflight = pipe.execute()
        metas = {int(p): json.loads(v)[2] for p, v in committed.items()}
        for t, entries in zip(txids, inflight):
            a = self.machine.active[t].attempt
            for p, v in entries.items():
                e = json.loads(v)
                if int(e[0]) == a.attempt_id:  # only the current attempt: older ones are replayed
                    metas[int(p)] = e[1]
        return metas

    def _exhausted(self) -> bool:
        # Cached between acks (not one read per sync), but re-read after every ack or fail: that
        # is when batch metadata changed, so a bounded run does not start empty batches at its end.
        now = time.monotonic()
        if now - self._checked >= 0.1:
            self._checked = now
            self._is_exhausted = self.spout.exhausted(self._latest_metas())
        return self._is_exhausted

    def _commit_opaque(self, a: TransactionAttempt) -> bool:
        """Atomically: this attempt's metadata becomes each partition's committed metadata, and
        the current txid moves on. Done here, in one MULTI with the txid, so a SIGKILL anywhere
        leaves either both committed or neither (then the batch replays from the old metadata)."""
        key_o, key_c = _key(self.tx_id, f"ometa:{a.txid}"), _key(self.tx_id, "committed-meta")
        with self.redis.pipeline() as pipe:
            while True:
                try:
                    pipe.watch(key_o, key_c)
                    entries = {int(p): json.loads(v) for p, v in pipe.hgetall(key_o).items()}
                    committed = {int(p): json.loads(v) for p, v in pipe.hgetall(key_c).items()}
                    new = opaque_commit(a, entries, committed, range(self.n_partitions))
                    if new is None:
                        pipe.unwatch()
                        return False
                    pipe.multi()
                    if new:
                        pipe.hset(key_c, mapping={str(p): json.dumps(e) for p, e in new.items()})
                    pipe.set(_key(self.tx_id, "current"), a.txid + 1)
                    pipe.delete(key_o)
                    pipe.execute()
                    return True
                except redis.WatchError:
                    continue

    def _ready(self) -> bool:
        return not self.done and self.spout.is_ready() and not self._exhausted()

    def _emit(self, out: list) -> None:
        now = time.monotonic() if out else 0.0
        for e in out:
            if e[0] == BATCH:
                self.progress.batch_started(e[1].txid, now)
                self.emit([wire(e[1]), self.machine.current_txid - 1], msg_id=wire(e[1]), stream=BATCH_STREAM)
            else:
                self.progress.commit_started(e[1].txid, now)
                self.emit([wire(e[1])], msg_id=wire(e[1]), stream=COMMIT_STREAM)

    def next_tuple(self):
        if not self.done and not self.machine.has_replays() and self._exhausted():
            self.done = True
            self._report(force=True)
            self.finish()  # bounded: every batch committed and nothing left
            return
        self._emit(self.machine.sync())
        self._report()

    def _report(self, force: bool = False) -> None:
        line = self.progress.report(time.monotonic(), len(self.machine.active), force=force)
        if line:
            log.info("%s", line)

    def ack(self, msg_id):
        a = attempt_of(msg_id)
        self._checked = float("-inf")
        tx = self.machine.active.get(a.txid)
        if tx is not None and tx.attempt == a and tx.status == COMMITTING:
            maybe_crash("tx-commit", a.txid)  # committers wrote their state; nothing recorded yet
            if self.opaque and not self._commit_opaque(a):
                log.warning("batch %s continued after a stale attempt of the batch before: replaying it", a)
                self._emit(self.machine.fail(a))
                return
        before = self.machine.current_txid
        processed = tx is not None and tx.attempt == a and tx.status == PROCESSING
        out = self.machine.ack(a)
        if self.machine.current_txid != before and not self.opaque:  # a commit completed: persist
            pipe = self.redis.pipeline()
            pipe.set(_key(self.tx_id, "current"), self.machine.current_txid)
            pipe.delete(_key(self.tx_id, f"meta:{a.txid}"))  # a committed batch never replays
            pipe.execute()
        if processed:
            self.progress.batch_processed(a.txid, time.monotonic())
        elif self.machine.current_txid != before:
            self.progress.committed(a.txid, time.monotonic())
        self._emit(out)

    def fail(self, msg_id):
        self._checked = float("-inf")
        self._emit(self.machine.fail(attempt_of(msg_id)))


class CoordinatedBolt(Bolt):
    """Runs a BatchBolt per batch attempt and tracks, per attempt, what it received and sent,
    so it knows when an upstream's batch is complete (Storm's CoordinatedBolt)."""

    def __init__(self, delegate: Any, sources: list[str], downstream: list[str], id_stream: bool,
                 emitter_of: Any = None, tx_id: str | None = None) -> None:
        self.delegate = delegate  # a BatchBolt template (or None for the emitter)
        self.tx_id = tx_id  # the emitter's: where the coordinator keeps txids and metadata
        self.sources = sources
        self.downstream = downstream
        self.id_stream = id_stream
        self.emitter_of = emitter_of  # the transactional spout, when this is the emitter
        out = getattr(delegate, "outputs", None) if delegate is not None else None
        fields = list(out) if out else (["tx", *emitter_of.fields] if emitter_of is not None else [])
        self.outputs = {COORD_STREAM: Stream(["id", "count"], direct=True)}
        if fields:
            self.outputs["default"] = fields
            self.outputs[ROWS_STREAM] = Stream(["id", "rows"], direct=True, chunk=True)
        self.source_fields: dict[str, list[str]] = {}  # per source: its default stream's fields (set by the builder)

    def prepare(self, conf, context):
        self.conf, self.context = conf, context
        n_reports = sum(len(context.component_tasks(s)) for s in self.sources)
        out_tasks = [t for c in self.downstream for t in context.component_tasks(c)]
        self.tracker = CoordinatedTracker(n_reports, out_tasks, has_id_stream=self.id_stream)
        self.batches: dict[TransactionAttempt, Any] = {}
        self._last_wire: Any = None
        self._last_attempt: TransactionAttempt | None = None
        self._user_emit = self.emit
        self._row_infos: dict[str, StreamInfo] = {}
        self._chunks: dict[TransactionAttempt, RowChunks] = {}  # a batch bolt's rows not sent yet
        self._rows_route = self._send_chunk = None
        if "default" in self.outputs:
            self._rows_route = self.router("default")  # the user's grouping, applied per row
            self._send_chunk = self.chunk_emitter(ROWS_STREAM)
        if self.emitter_of is not None:
            self.redis = _redis(conf)
            self.tx_id = self.tx_id or conf.get("topology.transactional.id") or context.topology_id
            self.emitter_of.open(conf)
            self.opaque = is_opaque(self.emitter_of)
            n = self.emitter_of.num_partitions()
            self.partitions = [p for p in range(n) if p % context.parallelism == context.task_index]

    # --- emits from the delegate (counted per target task for the coordination stream) --------
    def _counted_emit(self, attempt: TransactionAttempt):
        wired = wire(attempt)  # one list per batch, shared by its tuples (receivers never mutate values)
        user_emit, emitted = self._user_emit, self.tracker.emitted
        add_row = None
        if self._rows_route is not None:
            rows = self._chunks.get(attempt)
            if rows is None:
                rows = self._chunks[attempt] = RowChunks(self._rows_route, self._send_chunk, wired)
            add_row = rows.add

        def emit(values, anchors=None, stream="default"):
            first = values[0]
            values = [wired if first is attempt else wire(first), *values[1:]]  # a copy: the caller's list stays theirs
            if stream == "default" and add_row is not None and values[0] == wired:
                return add_row(values)  # rows wait in per-target chunks, sent when full or at finish
            targets = user_emit(values, stream=stream)  # unanchored: coord tuples track batches
            emitted(attempt, targets)
            return targets
        return emit

    def _flush_chunks(self, attempt: TransactionAttempt) -> None:
        """Send a batch's partly filled chunks (before its counts go downstream)."""
        rows = self._chunks.pop(attempt, None)
        if rows is not None:
            self.tracker.emitted_counts(attempt, rows.flush())

    def _row_info(self, tup: Tuple) -> StreamInfo:
        """The stream a chunk's rows show their bolt: the source's default stream."""
        src = tup.info.component
        info = self._row_infos.get(src)
        if info is None:
            info = self._row_infos[src] = StreamInfo(tup.info.sid, src, "default", self.source_fields.get(src) or [])
        return info

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
                self._chunks.pop(f.id, None)
                for t in f.fail:
                    self.fail(t)
            return
        first = tup.values[0]  # values are shared with other local tasks: never mutate
        if first == self._last_wire:  # a batch's tuples come in runs: one attempt object for all
            attempt = self._last_attempt
        else:
            attempt = self._last_attempt = attempt_of(first)
            self._last_wire = wire(attempt)
        stream = tup.info.stream
        if stream == COORD_STREAM:
            self._apply(self.tracker.coord(attempt, int(tup.values[1]), tup))
        elif self.id_stream and stream == COMMIT_STREAM:
            self._apply(self.tracker.id_tuple(attempt, tup))
        elif self.emitter_of is not None:
            try:
                self._emit_batch(attempt, tup)
            except Exception:
                self._apply(self.tracker.regular_failed(attempt))  # forget this attempt; the batch fails
                raise
            # Counts go out anchored to the batch tuple *before* it is acked (Storm's order), so
            # its tree completes only when every downstream task finished the batch.
            self._apply(self.tracker.regular_acked(attempt), anchor=tup)
            self.ack(tup)
        else:
            batch = self._batch(attempt)
            try:
                if stream == ROWS_STREAM:  # a chunk: each row is one tuple of the source's default stream
                    info, src, execute = self._row_info(tup), tup.source_task, batch.execute
                    for row in tup.values[1]:
                        execute(Tuple([attempt, *row[1:]], info, src, None))
                else:
                    batch.execute(Tuple([attempt, *tup.values[1:]], tup.info, tup.source_task, tup.anchors))
            except Exception:
                self._apply(self.tracker.regular_failed(attempt))
                raise
            f = self.tracker.regular_acked(attempt)
            if f is NOTHING or not self._apply(f, anchor=tup):
                self.ack(tup)

    def _emit_batch(self, attempt: TransactionAttempt, tup: Tuple) -> None:
        """The emitter: one call emits this task's part of the batch (thousands of rows), so
        the per-row path is kept short: the wire form of the attempt is built once, and the
        per-task counts are summed here and handed to the tracker once, at the end."""
        if self._rows_route is None:
            raise ValueError(f"transactional spout of {self.context.component_id!r} declares no fields")
        rows = RowChunks(self._rows_route, self._send_chunk, wire(attempt))
        try:
            self._emit_batch_rows(attempt, tup, rows.add_row)  # each row waits in its targets' chunks
            rows.flush()
        finally:  # also on failure: what went out is counted (the batch fails either way)
            self.tracker.emitted_counts(attempt, rows.sent)

    def _emit_batch_rows(self, attempt: TransactionAttempt, tup: Tuple, emit_row) -> None:
        if self.opaque:
            self._emit_opaque_batch(attempt, emit_row)
            return
        key_meta, key_last = _key(self.tx_id, f"meta:{attempt.txid}"), _key(self.tx_id, "last-meta")
        committed = tup.values[1]
        ps = [str(p) for p in self.partitions]
        pipe = self.redis.pipeline(transaction=False)  # one round trip for every owned partition
        pipe.get(_key(self.tx_id, "current"))
        pipe.hmget(key_meta, ps)
        pipe.hmget(key_last, ps)
        cur, metas, prevs = pipe.execute() if ps else (self.redis.get(_key(self.tx_id, "current")), [], [])
        if cur is not None and attempt.txid < int(cur):
            return  # a late tuple of a committed batch: its metadata is gone, emitting anew would skip data
        new: dict[str, str] = {}
        for p, raw, prev in zip(self.partitions, metas, prevs):
            if raw is not None:  # a replay: exactly the same batch
                self.emitter_of.emit_partition_batch(attempt, emit_row, p, json.loads(raw))
                continue
            meta = self.emitter_of.emit_partition_batch_new(attempt, emit_row, p, json.loads(prev) if prev else None)
            new[str(p)] = json.dumps(meta)
        # Recorded before the batch tuple is acked, so a replay finds it (Storm's order). If a
        # partition raised above, nothing new is recorded: the failed attempt's tuples are
        # dropped, and its replay starts each partition from the same last metadata.
        pipe = self.redis.pipeline()
        if new:
            pipe.hset(key_meta, mapping=new)
            pipe.hset(key_last, mapping=new)
        if committed and committed > 1:
            pipe.delete(_key(self.tx_id, f"meta:{committed - 1}"))  # cleanupBefore(committed)
        pipe.execute()

    def _emit_opaque_batch(self, attempt: TransactionAttempt, emit_row) -> None:
        """Each owned partition continues after the previous batch (opaque_last_meta); what this
        attempt read is recorded per attempt, and the coordinator commits it with the txid."""
        if not self.partitions:
            return
        t, ps = attempt.txid, [str(p) for p in self.partitions]
        pipe = self.redis.pipeline(transaction=True)  # one consistent snapshot with the coordinator's commits
        pipe.get(_key(self.tx_id, "current"))
        pipe.hmget(_key(self.tx_id, "committed-meta"), ps)
        pipe.hmget(_key(self.tx_id, f"ometa:{t - 1}"), ps)
        cur, committed, prev = pipe.execute()
        current = int(cur) if cur else 1
        if t < current:
            return  # a late tuple of a batch that committed already: nothing to emit or record
        entries = {}
        for p, c, pr in zip(self.partitions, committed, prev):
            last, base = opaque_last_meta(t, current, json.loads(c) if c else None, json.loads(pr) if pr else None)
            meta = self.emitter_of.emit_partition_batch(attempt, emit_row, p, last)
            entries[str(p)] = json.dumps([attempt.attempt_id, meta, base])
        self.redis.hset(_key(self.tx_id, f"ometa:{t}"), mapping=entries)

    def _apply(self, f, anchor: Tuple | None = None) -> bool:
        """Returns True when a committer's finish_batch went off the loop: ``anchor`` is then
        acked (or failed) when it completes, not by the caller."""
        if f.finished:
            b = self.batches.pop(f.id, None)
            if b is not None and self.id_stream:
                self._finish_off_loop(b, f, anchor)
                return True
            if b is not None:
                try:
                    b.finish_batch()
                except Exception:
                    self._chunks.pop(f.id, None)
                    f2 = self.tracker.finish_failed(f.id)
                    for t in f.ack + f2.fail:
                        self.fail(t)
                    raise
            self._finished(f, anchor)
        else:
            for t in f.ack:
                self.ack(t)
        for t in f.fail:
            self.batches.pop(f.id, None)
            self._chunks.pop(f.id, None)
            self.fail(t)
        return False

    def _finished(self, f, anchor: Tuple | None) -> None:
        self._flush_chunks(f.id)  # counted before the counts are read
        held = [t for t in f.ack if t is not anchor]
        anchors = [t for t in ([anchor] if anchor is not None else []) + held]
        for task, n in f.counts.items():  # read after finish_batch: its emits count
            self.emit_direct(task, [wire(f.id), n], anchors=anchors or [], stream=COORD_STREAM)
        self.tracker.done(f.id)
        for t in held:
            self.ack(t)

    def _finish_off_loop(self, b: Any, f, anchor: Tuple | None) -> None:
        """A committer's finish_batch (the commit, often a slow sink) runs on this task's own
        thread so the worker keeps processing later batches meanwhile. Commits reach this task one
        at a time in txid order (the coordinator sends commit N+1 only once N's tree completed)
        and the thread runs them in arrival order. Its emits are buffered and replayed, then the
        counts sent and the held tuples acked, back on the loop thread (which owns routing and
        acking), in the order the inline path uses."""
        emits: list[tuple[list, str]] = []

        def buffered_emit(values, anchors=None, stream="default"):
            emits.append((list(values), stream))
            return []  # the targets are known once the emit is replayed on the loop

        b.emit = buffered_emit

        def done(_result: Any, error: BaseException | None) -> None:
            if error is None:
                try:
                    emit = self._counted_emit(f.id)
                    for values, stream in emits:
                        emit(values, stream=stream)
                except Exception as e:  # noqa: BLE001 - a bad emit fails the batch, as inline
                    error = e
            if error is not None:  # fail what was held: the coordinator replays the batch
                self._chunks.pop(f.id, None)
                f2 = self.tracker.finish_failed(f.id)
                self.tracker.done(f.id)
                for t in f.ack + f2.fail + ([anchor] if anchor is not None else []):
                    self.fail(t)
                raise error  # reported by the executor, like an exception in execute
            self._finished(f, anchor)
            if anchor is not None:
                self.ack(anchor)

        self.run_off_loop(b.finish_batch, done)


def is_committer(bolt: Any) -> bool:
    return isinstance(bolt, Committer)
