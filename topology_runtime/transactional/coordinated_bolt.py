"""The coordinated wrapper of a transactional topology: runs a BatchBolt per batch attempt (or,
for the spout's component, the emitter) and reports per-attempt counts on the coordination
stream, so each task knows when its upstream's part of a batch is complete.

Built on coordination's ``CoordinatedCore`` (the tracker and the count report, shared with the
general ``CoordinatedBolt``); what is transactional stays here: attempts and their wire form,
attempts that failed stay failed, committers, failure records for the coordinator, the
coordinator's batch and commit streams, and RowChunks (a batch's rows sent per target task in
chunks, unanchored: the coordination stream tracks batches).
"""

from __future__ import annotations

import copy
import logging
from typing import Any

from ..api.components import (
    BasicBolt,
    Bolt,
    FailedException,
    Spout,
    StatefulBolt,
    Stream,
    StreamInfo,
    Tuple,
    declared_streams,
)
from ..coordination.batch import BatchBolt
from ..coordination.bolt import ALL, CoordinatedCore
from ..coordination.streams import COORD_FIELDS, COORD_STREAM, ROWS_STREAM
from ..coordination.tracker import NOTHING
from ..reliability.transactional import TransactionAttempt
from .batch import Committer
from .emitter import TransactionalEmitter, open_state

log = logging.getLogger(__name__)

# The coordinator's streams: each batch's start, and the commit (a committer's id stream).
BATCH_STREAM, COMMIT_STREAM = "batch", "commit"
# A batch's default-stream tuples travel between coordinated bolts in chunks: one tuple
# [attempt, rows] per target task per CHUNK_ROWS rows, each row a whole tuple's values. Routing
# (the user's grouping) is still per row; the queue, transport, coordination tracking and acking
# are per chunk, a fraction of a row's cost on a hop that carries thousands of rows per batch.
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
    """The attempt a tuple carries: as sent on the wire ([txid, attempt_id]) or already one."""
    if isinstance(value, TransactionAttempt):
        return value
    return TransactionAttempt(int(value[0]), int(value[1]))


def wire(value: Any) -> Any:
    """What an attempt is sent as: a plain list every transport and serializer carries."""
    return [value.txid, value.attempt_id] if isinstance(value, TransactionAttempt) else value


# The three kinds of bolt a transactional topology runs: a BatchBolt (one instance per attempt, finish_batch when
# the batch is complete; a committer's in the commit phase), a BasicBolt (per tuple; acked after
# execute) and a plain Bolt (per tuple; acks or fails each tuple itself).
BATCH, BASIC, PLAIN = "BatchBolt", "BasicBolt", "Bolt"


def bolt_kind(bolt: Any) -> str:
    """Which kind ``bolt`` is run as, or ValueError saying why it cannot be set in a
    transactional topology (the builder names the component)."""
    if isinstance(bolt, StatefulBolt):
        raise ValueError("a StatefulBolt cannot be set in a transactional topology (its checkpoints are not "
                         "batches; keep state in a committer BatchBolt with TransactionalValue)")
    if isinstance(bolt, Spout) or callable(getattr(bolt, "next_tuple", None)):
        raise ValueError("a spout cannot be set as a bolt (a transactional topology has one spout, given to "
                         "TransactionalTopologyBuilder)")
    if not callable(getattr(bolt, "execute", None)):
        raise ValueError(f"{type(bolt).__name__} has no execute(tup): expected a BatchBolt, BasicBolt or Bolt")
    if isinstance(bolt, BatchBolt) or (not isinstance(bolt, Bolt) and callable(getattr(bolt, "finish_batch", None))):
        return BATCH
    if isinstance(bolt, BasicBolt):
        return BASIC
    if isinstance(bolt, Bolt):
        return PLAIN
    raise ValueError(f"{type(bolt).__name__} is not a BatchBolt, BasicBolt or Bolt")


class _Pending:
    """An input tuple (or chunk: ``left`` rows) of a per-tuple bolt, until every row was acked."""

    __slots__ = ("attempt", "tup", "left", "failed")

    def __init__(self, attempt: TransactionAttempt, tup: Tuple, left: int) -> None:
        self.attempt, self.tup, self.left, self.failed = attempt, tup, left, False


class TransactionalCoordinatedBolt(CoordinatedCore):
    """Runs a BatchBolt per batch attempt and tracks, per attempt, what it received and sent,
    so it knows when an upstream's batch is complete (Storm's CoordinatedBolt around its
    BatchBoltExecutor or TransactionalSpoutBatchExecutor)."""

    def __init__(self, delegate: Any, sources: list[str], downstream: list[str], id_stream: bool,
                 emitter_of: Any = None, tx_id: str | None = None) -> None:
        self.delegate = delegate  # a BatchBolt template, a BasicBolt or Bolt (None for the emitter)
        self.kind = bolt_kind(delegate) if delegate is not None else None
        self.tx_id = tx_id  # where the coordinator keeps txids, metadata and failure records
        self.sources = sources
        self.downstream = downstream
        self.id_stream = id_stream
        self.emitter_of = emitter_of  # the transactional spout, when this is the emitter
        declared = declared_streams(delegate, type(delegate).__name__) if delegate is not None else {}
        self.outputs = {COORD_STREAM: Stream(COORD_FIELDS, direct=True)}
        self.outputs.update({name: st for name, st in declared.items() if name != "default"})
        fields = (declared["default"].fields if "default" in declared
                  else (["tx", *emitter_of.fields] if emitter_of is not None else []))
        if fields:
            self.outputs["default"] = fields
            self.outputs[ROWS_STREAM] = Stream(["id", "rows"], direct=True, chunk=True)
        self.source_fields: dict[str, list[str]] = {}  # per source: its default stream's fields (set by the builder)

    def prepare(self, conf, context):
        self.conf, self.context = conf, context
        self._track(context, dict.fromkeys(self.sources, ALL), self.downstream, self.id_stream)
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
        self.emitter: TransactionalEmitter | None = None  # set on the spout's component only
        self._tx_state = None  # opened on the first failure to record (bolts); the emitter's own
        if self.emitter_of is not None:
            self.emitter = TransactionalEmitter.open(self.emitter_of, conf, context, self.tx_id)
            self._tx_state = self.emitter.state
        self._rows: dict[int, tuple[Tuple, _Pending]] = {}  # per-tuple bolts: id(row) -> row, its input
        self._failed: dict[TransactionAttempt, None] = {}  # attempts this task failed (oldest first)
        if self.kind in (BASIC, PLAIN):  # one instance for the task; its actions go through here
            d = self.delegate
            d.emit, d.emit_direct = self._delegate_emit, self._delegate_emit_direct
            d.ack = (lambda tup: None) if self.kind == BASIC else (lambda tup: self._row_done(tup, True))
            d.fail = lambda tup: self._row_done(tup, False)
            d.reset_timeout = lambda tup: None  # a batch's tuples are tracked by its coordination
            d.run_off_loop = self.run_off_loop
            self._emits: dict[TransactionAttempt, Any] = {}
            d.prepare(conf, context)

    def cleanup(self) -> None:
        if self.kind in (BASIC, PLAIN):
            self.delegate.cleanup()

    # --- failures: recorded for the coordinator (its log line and, past max attempts, the error) ---
    def _record_failure(self, attempt: TransactionAttempt, what: str, exc: BaseException) -> None:
        try:
            if self._tx_state is None:
                self._tx_state = open_state(self.conf, self.context, self.tx_id)
            self._tx_state.record_failure(attempt.txid, {
                "attempt": attempt.attempt_id, "component": self.context.component_id, "task": self.context.task_id,
                "error": f"{what}: {type(exc).__name__}: {exc}"[:2000]})
        except Exception as e:  # noqa: BLE001 - Redis lost: the batch fails all the same
            log.warning("failure of batch %s not recorded (%s: %s)", attempt, type(e).__name__, e)

    # --- a BasicBolt's or plain Bolt's emits and acks ----------------------------------------------
    def _attempt_of_emit(self, values: Any) -> TransactionAttempt:
        first = values[0] if isinstance(values, (list, tuple)) and values else None
        if isinstance(first, TransactionAttempt) or (isinstance(first, list) and len(first) == 2):
            return attempt_of(first)
        raise ValueError(f"component {self.context.component_id!r}: a tuple emitted in a transactional topology "
                         f"must have the TransactionAttempt (tup[0]) as its first value, got {first!r:.80}")

    def _delegate_emit(self, values, anchors=None, stream="default"):
        attempt = self._attempt_of_emit(values)
        emit = self._emits.get(attempt)
        if emit is None:
            emit = self._emits[attempt] = self._counted_emit(attempt)
        return emit(values, stream=stream)

    def _delegate_emit_direct(self, task, values, anchors=None, stream="default"):
        attempt = self._attempt_of_emit(values)
        targets = self.emit_direct(task, [wire(attempt), *values[1:]], stream=stream)
        self.tracker.emitted(attempt, targets)
        return targets

    def _execute_each(self, attempt: TransactionAttempt, tup: Tuple, stream: str) -> None:
        """A BasicBolt or Bolt: ``execute`` per tuple (each row of a chunk). The input counts as
        received once every row was acked (a BasicBolt's when execute returns); a fail, an
        exception or FailedException fails the batch."""
        if stream == ROWS_STREAM:
            info, src = self._row_info(tup), tup.source_task
            rows = [Tuple([attempt, *row[1:]], info, src, None) for row in tup.values[1]]
        else:
            rows = [Tuple([attempt, *tup.values[1:]], tup.info, tup.source_task, None)]
        p = _Pending(attempt, tup, len(rows))
        basic, execute, pending = self.kind == BASIC, self.delegate.execute, self._rows
        for r in rows:
            pending[id(r)] = (r, p)
            try:
                execute(r)
            except FailedException as e:
                self._record_failure(attempt, "execute", e)
                self._row_done(r, False)
                return
            except Exception as e:
                self._record_failure(attempt, "execute", e)
                self._row_done(r, False, raised=True)
                raise  # the executor reports it (and fails ``tup``)
            if basic:
                self._row_done(r, True)
            if p.failed:
                return

    def _row_done(self, r: Tuple, ok: bool, raised: bool = False) -> None:
        entry = self._rows.pop(id(r), None)
        if entry is None or entry[0] is not r:
            return  # acked twice, or not a tuple of this wrapper
        p = entry[1]
        if p.failed:
            return
        if not ok:
            p.failed = True
            for k in [k for k, (_, q) in self._rows.items() if q is p]:
                del self._rows[k]
            self._forget(p.attempt)
            self._batch_failed(p.attempt)
            if not raised:
                self.fail(p.tup)
            return
        p.left -= 1
        if p.left == 0:
            f = self.tracker.regular_acked(p.attempt)
            if f is NOTHING or not self._apply(f, anchor=p.tup):
                self.ack(p.tup)

    def _batch_failed(self, attempt: TransactionAttempt) -> None:
        self._mark_failed(attempt)
        self._apply(self.tracker.regular_failed(attempt))

    def _mark_failed(self, attempt: TransactionAttempt) -> None:
        self._failed[attempt] = None
        if len(self._failed) > 4096:  # attempts are never reused: the oldest can go
            del self._failed[next(iter(self._failed))]

    def _forget(self, attempt: TransactionAttempt) -> None:
        """Drop what this task holds for an attempt that finished, failed or timed out."""
        self.batches.pop(attempt, None)
        self._chunks.pop(attempt, None)
        if self.kind in (BASIC, PLAIN):
            self._emits.pop(attempt, None)

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
                self._mark_failed(f.id)
                self._forget(f.id)
                if self._rows:  # a plain Bolt that never acked them
                    for k in [k for k, (_, q) in self._rows.items() if q.attempt == f.id]:
                        del self._rows[k]
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
        if attempt in self._failed:
            # This task failed the attempt: its tracking is gone, so a late count or commit tuple
            # would start it afresh and wait until it times out. Failing it fails the batch's
            # tree now (Storm fails an id/coord tuple it has no tracking for); data is dropped.
            (self.ack if stream not in (COORD_STREAM, COMMIT_STREAM) else self.fail)(tup)
            return
        if stream == COORD_STREAM:
            self._apply(self.tracker.coord(attempt, int(tup.values[1]), tup))
        elif self.id_stream and stream == COMMIT_STREAM:
            self._apply(self.tracker.id_tuple(attempt, tup))
        elif self.emitter is not None:
            try:
                self._emit_batch(attempt, tup)
            except Exception as e:
                self._record_failure(attempt, "emit_batch", e)
                self._batch_failed(attempt)  # forget this attempt; the batch fails
                raise
            # Counts go out anchored to the batch tuple *before* it is acked (Storm's order), so
            # its tree completes only when every downstream task finished the batch.
            self._apply(self.tracker.regular_acked(attempt), anchor=tup)
            self.ack(tup)
        elif self.kind != BATCH:
            self._execute_each(attempt, tup, stream)
        else:
            batch = self._batch(attempt)
            try:
                if stream == ROWS_STREAM:  # a chunk: each row is one tuple of the source's default stream
                    info, src, execute = self._row_info(tup), tup.source_task, batch.execute
                    for row in tup.values[1]:
                        execute(Tuple([attempt, *row[1:]], info, src, None))
                else:
                    batch.execute(Tuple([attempt, *tup.values[1:]], tup.info, tup.source_task, tup.anchors))
            except Exception as e:
                self._record_failure(attempt, "execute", e)
                self._batch_failed(attempt)
                raise
            f = self.tracker.regular_acked(attempt)
            if f is NOTHING or not self._apply(f, anchor=tup):
                self.ack(tup)

    def _emit_batch(self, attempt: TransactionAttempt, tup: Tuple) -> None:
        """The emitter: one call emits this task's part of the batch (thousands of rows), so
        the per-row path is kept short: the wire form of the attempt is built once, the chunker's
        ``add_row`` goes straight to the spout, and the per-task counts are summed here and
        handed to the tracker once, at the end."""
        if self._rows_route is None:
            raise ValueError(f"transactional spout of {self.context.component_id!r} declares no fields")
        rows = RowChunks(self._rows_route, self._send_chunk, wire(attempt))
        try:
            # each row waits in its targets' chunks; values[1]: the last committed txid
            self.emitter.emit_batch(attempt, tup.values[1], rows.add_row, tup.values[2] if len(tup.values) > 2 else None)
            rows.flush()
        finally:  # also on failure: what went out is counted (the batch fails either way)
            self.tracker.emitted_counts(attempt, rows.sent)

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
                except Exception as e:
                    self._record_failure(f.id, "finish_batch", e)
                    self._chunks.pop(f.id, None)
                    self._mark_failed(f.id)
                    f2 = self.tracker.finish_failed(f.id)
                    for t in f.ack + f2.fail:
                        self.fail(t)
                    raise
            self._finished(f, anchor)
        else:
            for t in f.ack:
                self.ack(t)
        for t in f.fail:
            self._forget(f.id)
            self.fail(t)
        return False

    def _finished(self, f, anchor: Tuple | None) -> None:
        self._flush_chunks(f.id)  # counted before the counts are read
        held = [t for t in f.ack if t is not anchor]
        anchors = [t for t in ([anchor] if anchor is not None else []) + held]
        self._report_counts(f, wire(f.id), anchors)
        if self.kind in (BASIC, PLAIN):
            self._emits.pop(f.id, None)
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
                self._record_failure(f.id, "finish_batch", error)
                self._chunks.pop(f.id, None)
                self._mark_failed(f.id)
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
