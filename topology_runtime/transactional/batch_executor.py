"""What a transactional topology's components run inside coordination's ``CoordinatedBolt``:
``BatchBoltExecutor`` for its bolts (Storm's BatchBoltExecutor: a BatchBolt instance per batch
attempt, or a BasicBolt or plain Bolt per tuple) and ``SpoutBatchExecutor`` for the spout's
component (Storm's TransactionalSpoutBatchExecutor: the emitter).

The wrapper tracks each attempt and reports the counts; what is transactional stays here:
attempts and their wire form (``ATTEMPT_IDS``), committers whose ``finish_batch`` runs off the
loop, failure records for the coordinator, and RowChunks (a batch's rows sent per target task in
chunks, unanchored: the coordination stream tracks batches).
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Hashable
from typing import Any, cast

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
from ..coordination.bolt import DEFERRED, IdCodec
from ..coordination.streams import ROWS_STREAM
from ..reliability.transactional import TransactionAttempt
from .batch import Committer
from .emitter import TransactionalEmitter, open_state
from .spouts import BatchCannotSucceed

log = logging.getLogger(__name__)

# A batch's default-stream tuples travel between coordinated bolts in chunks: one tuple
# [attempt, rows] per target task per CHUNK_ROWS rows, each row a tuple's values after the
# attempt (the chunk's head stands for it: not repeated per row, so not packed, sent and
# unpacked per row either). Routing (the user's grouping) is still per row, on the whole
# values; the queue, transport, coordination tracking and acking are per chunk, a fraction of
# a row's cost on a hop that carries thousands of rows per batch.
CHUNK_ROWS = 256


class RowChunks:
    """One attempt's rows on their way to each target task: a chunk leaves when it holds
    CHUNK_ROWS rows, the rest at ``flush``. ``sent`` counts the chunks per task. ``add(values)``
    takes a tuple's values (``head`` first), ``add_row(row)`` a spout's row and ``add_rest(rest)``
    a list of the values after the attempt that the caller gives up (the attempt is put in front
    of both); all route by the user's grouping on the whole values, checked as an emit, and keep
    the values after the attempt. ``row_route``, if given, is ``targets(row)`` for the values
    ``[head, *row]`` (``BoltExecutor.row_router``: the head checked once, not per row). Closures,
    not methods: they run once per row."""

    __slots__ = ("head", "chunks", "sent", "add", "add_row", "add_rest", "_send")

    def __init__(self, route: Any, send: Any, head: list, row_route: Any = None) -> None:
        self.head = head
        chunks: dict[int, list] = {}
        sent: dict[int, int] = {}
        self.chunks, self.sent = chunks, sent

        def send_chunk(task: int, rows: list) -> None:
            send(task, head, rows)
            sent[task] = sent.get(task, 0) + 1

        def keep(targets: list[int], row: Any) -> list[int]:
            for t in targets:
                c = chunks.get(t)
                if c is None:
                    chunks[t] = [row]
                else:
                    c.append(row)
                    if len(c) >= CHUNK_ROWS:
                        send_chunk(t, c)
                        chunks[t] = []
            return targets

        if row_route is None:
            def row_route(row: Any) -> list[int]:
                return route([head, *row])

        def add(values: list) -> list[int]:
            rest = values[1:]
            return keep(row_route(rest), rest)

        def add_rest(rest: list) -> list[int]:
            return keep(row_route(rest), rest)

        def add_row(row: Any) -> list[int]:
            # A tuple row is kept as it is (immutable: the in-memory spout's), a list copied.
            return keep(row_route(row), row if type(row) is tuple else list(row))

        self.add, self.add_row, self.add_rest, self._send = add, add_row, add_rest, send_chunk

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


class AttemptIds(IdCodec):
    """Attempts travel as [txid, attempt_id] and are tracked as TransactionAttempts. A batch's
    tuples come in runs, so the last conversion is kept: one attempt object for the run."""

    __slots__ = ("_last_wire", "_last")

    def __init__(self) -> None:
        self._last_wire: Any = None
        self._last: TransactionAttempt | None = None

    def key(self, value: Any) -> Hashable:
        if value == self._last_wire:
            return self._last
        attempt = attempt_of(value)
        self._last, self._last_wire = attempt, wire(attempt)
        return attempt

    def wire(self, key: Any) -> Any:
        return wire(key)


# The three kinds of bolt a transactional topology runs: a BatchBolt (one instance per attempt,
# finish_batch when the batch is complete; a committer's in the commit phase), a BasicBolt (per
# tuple; acked after execute) and a plain Bolt (per tuple; acks or fails each tuple itself).
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


def is_committer(bolt: Any) -> bool:
    return isinstance(bolt, Committer)


class _Executor(Bolt):
    """What both executors share: the default stream's rows go as chunks, failures are recorded
    for the coordinator. The CoordinatedBolt around it gives ``emit`` (counted), ``router`` and
    ``chunk_emitter`` (counted per chunk) before ``prepare``."""

    def __init__(self, fields: list[str], declared: dict[str, Stream], tx_id: str | None) -> None:
        self.tx_id = tx_id  # where the coordinator keeps txids, metadata and failure records
        self.outputs: dict[str, Any] = {name: st for name, st in declared.items() if name != "default"}
        if fields:
            self.outputs["default"] = fields
            self.outputs[ROWS_STREAM] = Stream(["id", "rows"], direct=True, chunk=True)

    def prepare(self, conf: dict, context: Any) -> None:
        self.conf, self.context = conf, context
        self._rows_route = self._send_chunk = self._row_router = None
        if "default" in self.outputs:
            self._rows_route = self.router("default")  # type: ignore[attr-defined]  # the user's grouping, per row
            # the executor's row_router(stream, head) where it offers one: a chunker's head checked once
            self._row_router = getattr(self, "row_router", None)
            self._send_chunk = self.chunk_emitter(ROWS_STREAM)  # type: ignore[attr-defined]
        self._tx_state: Any = None  # opened on the first failure to record (bolts); the emitter's own

    def _row_chunks(self, head: list) -> RowChunks:
        rr = self._row_router
        return RowChunks(self._rows_route, self._send_chunk, head, rr("default", head) if rr is not None else None)

    def _record_failure(self, attempt: TransactionAttempt, what: str, exc: BaseException) -> None:
        try:
            if self._tx_state is None:
                self._tx_state = open_state(self.conf, self.context, self.tx_id)
            self._tx_state.record_failure(attempt.txid, {
                "attempt": attempt.attempt_id, "component": self.context.component_id, "task": self.context.task_id,
                "error": f"{what}: {type(exc).__name__}: {exc}"[:2000], "final": isinstance(exc, BatchCannotSucceed)})
        except Exception as e:  # noqa: BLE001 - Redis lost: the batch fails all the same
            log.warning("failure of batch %s not recorded (%s: %s)", attempt, type(e).__name__, e)


class SpoutBatchExecutor(_Executor):
    """The emitter: each batch tuple from the coordinator emits this task's part of the batch.
    Its counts go out anchored to the batch tuple before that is acked (Storm's order), so the
    batch's tree completes only when every downstream task finished the batch."""

    def __init__(self, spout: Any, tx_id: str | None) -> None:
        super().__init__(["tx", *spout.fields], {}, tx_id)
        self.spout = spout

    def prepare(self, conf: dict, context: Any) -> None:
        super().prepare(conf, context)
        self.emitter = TransactionalEmitter.open(self.spout, conf, context, self.tx_id)
        self._tx_state = self.emitter.state

    def execute(self, tup: Tuple) -> None:
        attempt = attempt_of(tup.values[0])
        if self._rows_route is None:
            raise ValueError(f"transactional spout of {self.context.component_id!r} declares no fields")
        # One call emits thousands of rows: the wire form of the attempt is built once and the
        # chunker's add_row goes straight to the spout.
        rows = self._row_chunks(wire(attempt))
        try:
            # values[1]: the last committed txid; values[2]: the coordinator's metadata, if any
            self.emitter.emit_batch(attempt, tup.values[1], rows.add_row, tup.values[2] if len(tup.values) > 2 else None)
            rows.flush()
        except Exception as e:
            self._record_failure(attempt, "emit_batch", e)
            raise  # the wrapper fails the attempt; the executor reports it
        self.ack(tup)


class _Pending:
    """An input tuple (or chunk: ``left`` rows) of a per-tuple bolt, until every row was acked."""

    __slots__ = ("attempt", "tup", "left", "failed")

    def __init__(self, attempt: TransactionAttempt, tup: Tuple, left: int) -> None:
        self.attempt, self.tup, self.left, self.failed = attempt, tup, left, False


class BatchBoltExecutor(_Executor):
    """A transactional bolt: a BatchBolt instance per attempt (``finish_batch`` when the
    wrapper finds the attempt complete; a committer's off the loop), or a BasicBolt or plain Bolt
    per tuple, each row of a chunk one tuple. Input chunks and tuples are acked to the wrapper
    once processed; a failure fails the attempt."""

    def __init__(self, delegate: Any, committer: bool, tx_id: str | None) -> None:
        declared = declared_streams(delegate, type(delegate).__name__)
        super().__init__(declared["default"].fields if "default" in declared else [], declared, tx_id)
        self.delegate = delegate
        self.kind = bolt_kind(delegate)
        self.committer = committer
        self.source_fields: dict[str, list[str]] = {}  # per source: its default stream's fields (set by the builder)

    def prepare(self, conf: dict, context: Any) -> None:
        super().prepare(conf, context)
        self.ids = AttemptIds()
        self.batches: dict[TransactionAttempt, Any] = {}
        self._row_infos: dict[str, StreamInfo] = {}
        self._chunks: dict[TransactionAttempt, RowChunks] = {}  # rows not sent yet, per attempt
        self._emits: dict[TransactionAttempt, Any] = {}
        self._rows: dict[int, tuple[Tuple, _Pending]] = {}  # per-tuple bolts: id(row) -> row, its input
        if self.kind in (BASIC, PLAIN):  # one instance for the task; its actions go through here
            d = self.delegate
            d.emit, d.emit_direct = self._delegate_emit, self._delegate_emit_direct
            d.ack = (lambda tup: None) if self.kind == BASIC else (lambda tup: self._row_done(tup, True))
            d.fail = lambda tup: self._row_done(tup, False)
            d.reset_timeout = lambda tup: None  # a batch's tuples are tracked by its coordination
            d.run_off_loop = self.run_off_loop
            d.prepare(conf, context)

    def cleanup(self) -> None:
        if self.kind in (BASIC, PLAIN):
            self.delegate.cleanup()

    # --- the wrapper's callbacks -------------------------------------------------------------
    def finished_id(self, attempt: TransactionAttempt) -> Any:
        """The attempt is complete at this task: finish_batch (a committer's off the loop),
        then the partly filled chunks go, before the wrapper reads the counts."""
        b = self.batches.pop(attempt, None)
        if b is None and self.kind == BATCH:
            # No tuple of the attempt reached this task: finish_batch still runs, as in Storm. An
            # opaque committer must see its empty replay to undo what an earlier attempt of the
            # same txid wrote; skipping it let the next txid add onto that stale value.
            b = self._batch(attempt)
            del self.batches[attempt]
        if b is not None and self.committer:
            self._finish_off_loop(b, attempt)
            return DEFERRED
        if b is not None:
            try:
                b.finish_batch()
            except Exception as e:
                self._record_failure(attempt, "finish_batch", e)
                raise
        self._flush_chunks(attempt)
        self._emits.pop(attempt, None)
        return None

    def failed_id(self, attempt: TransactionAttempt) -> None:
        self.batches.pop(attempt, None)
        self._chunks.pop(attempt, None)
        self._emits.pop(attempt, None)

    def timeout_id(self, attempt: TransactionAttempt) -> None:
        self.failed_id(attempt)
        if self._rows:  # a plain Bolt that never acked them
            for k in [k for k, (_, q) in self._rows.items() if q.attempt == attempt]:
                del self._rows[k]

    # --- execution ---------------------------------------------------------------------------
    def execute(self, tup: Tuple) -> None:
        attempt = cast(TransactionAttempt, self.ids.key(tup.values[0]))  # values are shared: never mutate them
        if self.kind != BATCH:
            self._execute_each(attempt, tup)
            return
        batch = self._batch(attempt)
        try:
            if tup.info.stream == ROWS_STREAM:  # a chunk: each row is one tuple of the source's default stream
                info, src, execute, make = self._row_info(tup), tup.source_task, batch.execute, Tuple
                for row in tup.values[1]:
                    execute(make([attempt, *row], info, src, None))
            else:
                batch.execute(Tuple([attempt, *tup.values[1:]], tup.info, tup.source_task, tup.anchors))
        except Exception as e:
            self._record_failure(attempt, "execute", e)
            raise  # the wrapper fails the attempt; the executor reports it
        self.ack(tup)

    def _batch(self, attempt: TransactionAttempt) -> Any:
        b = self.batches.get(attempt)
        if b is None:
            b = copy.deepcopy(self.delegate)
            b.emit = self._attempt_emit(attempt)
            b.prepare(self.conf, self.context, attempt)
            self.batches[attempt] = b
        return b

    def _execute_each(self, attempt: TransactionAttempt, tup: Tuple) -> None:
        """A BasicBolt or Bolt: ``execute`` per tuple (each row of a chunk). The input counts as
        received once every row was acked (a BasicBolt's when execute returns); a fail, an
        exception or FailedException fails the batch."""
        if tup.info.stream == ROWS_STREAM:
            info, src = self._row_info(tup), tup.source_task
            rows = [Tuple([attempt, *row], info, src, None) for row in tup.values[1]]
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
                raise  # the wrapper fails the attempt; the executor reports it (and fails ``tup``)
            if basic:
                self._row_done(r, True)
            if p.failed:
                return

    def _row_done(self, r: Tuple, ok: bool, raised: bool = False) -> None:
        entry = self._rows.pop(id(r), None)
        if entry is None or entry[0] is not r:
            return  # acked twice, or not a tuple of this executor
        p = entry[1]
        if p.failed:
            return
        if not ok:
            p.failed = True
            for k in [k for k, (_, q) in self._rows.items() if q is p]:
                del self._rows[k]
            if not raised:
                self.fail(p.tup)
            return
        p.left -= 1
        if p.left == 0:
            self.ack(p.tup)

    # --- emits: an attempt's rows wait in per-target chunks, other streams go at once --------
    def _attempt_emit(self, attempt: TransactionAttempt):
        wired = wire(attempt)  # one list per batch, shared by its tuples (receivers never mutate values)
        emit = self.emit
        add_rest = None
        if self._rows_route is not None:
            rows = self._chunks.get(attempt)
            if rows is None:
                rows = self._chunks[attempt] = self._row_chunks(wired)
            add_rest = rows.add_rest

        def attempt_emit(values, anchors=None, stream="default"):
            first = values[0]
            head = wired if first is attempt else wire(first)
            if stream == "default" and add_rest is not None and head == wired:
                return add_rest(values[1:])  # a copy: the caller's list stays theirs; sent when full or at finish
            return emit([head, *values[1:]], anchors=[], stream=stream)  # unanchored: the coordination stream tracks batches
        return attempt_emit

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
            emit = self._emits[attempt] = self._attempt_emit(attempt)
        return emit(values, stream=stream)

    def _delegate_emit_direct(self, task, values, anchors=None, stream="default"):
        attempt = self._attempt_of_emit(values)
        return self.emit_direct(task, [wire(attempt), *values[1:]], anchors=[], stream=stream)

    def _flush_chunks(self, attempt: TransactionAttempt) -> None:
        rows = self._chunks.pop(attempt, None)
        if rows is not None:
            rows.flush()

    def _row_info(self, tup: Tuple) -> StreamInfo:
        """The stream a chunk's rows show their bolt: the source's default stream."""
        src = tup.info.component
        info = self._row_infos.get(src)
        if info is None:
            info = self._row_infos[src] = StreamInfo(tup.info.sid, src, "default", self.source_fields.get(src) or [])
        return info

    def _finish_off_loop(self, b: Any, attempt: TransactionAttempt) -> None:
        """A committer's finish_batch (the commit, often a slow sink) runs on this task's own
        thread so the worker keeps processing later batches meanwhile. Commits reach this task one
        at a time in txid order (the coordinator sends commit N+1 only once N's tree completed)
        and the thread runs them in arrival order. Its emits are buffered and replayed, then the
        wrapper sends the counts and acks what it held, back on the loop thread (which owns
        routing and acking)."""
        emits: list[tuple[list, str]] = []

        def buffered_emit(values, anchors=None, stream="default"):
            emits.append((list(values), stream))
            return []  # the targets are known once the emit is replayed on the loop

        b.emit = buffered_emit

        def done(_result: Any, error: BaseException | None) -> None:
            if error is None:
                try:
                    emit = self._attempt_emit(attempt)
                    for values, stream in emits:
                        emit(values, stream=stream)
                    self._flush_chunks(attempt)
                except Exception as e:  # noqa: BLE001 - a bad emit fails the batch, as inline
                    error = e
            if error is not None:  # the coordinator replays the batch
                self._record_failure(attempt, "finish_batch", error)
                self._chunks.pop(attempt, None)
            self.finish_deferred(attempt, error)  # type: ignore[attr-defined]  # raises ``error`` for the executor

        self.run_off_loop(b.finish_batch, done)
