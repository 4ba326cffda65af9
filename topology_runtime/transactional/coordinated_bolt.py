"""Storm's CoordinatedBolt on the plain runtime: the wrapper that runs a BatchBolt per batch
attempt (or, for the spout's component, the emitter) and reports per-attempt counts on the
coordination stream, so each task knows when its upstream's part of a batch is complete.

Also what travels between wrappers: the stream names, the attempt's wire form, and RowChunks
(a batch's rows sent per target task in chunks).
"""

from __future__ import annotations

import copy
from typing import Any

from ..api.components import Bolt, Stream, StreamInfo, Tuple
from ..reliability.coordinated import NOTHING, CoordinatedTracker
from ..reliability.transactional import TransactionAttempt
from .batch import Committer
from .emitter import TransactionalEmitter

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
    """The attempt a tuple carries: as sent on the wire ([txid, attempt_id]) or already one."""
    if isinstance(value, TransactionAttempt):
        return value
    return TransactionAttempt(int(value[0]), int(value[1]))


def wire(value: Any) -> Any:
    """What an attempt is sent as: a plain list every transport and serializer carries."""
    return [value.txid, value.attempt_id] if isinstance(value, TransactionAttempt) else value


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
        self.emitter: TransactionalEmitter | None = None  # set on the spout's component only
        if self.emitter_of is not None:
            self.emitter = TransactionalEmitter.open(self.emitter_of, conf, context, self.tx_id)

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
        elif self.emitter is not None:
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
        the per-row path is kept short: the wire form of the attempt is built once, the chunker's
        ``add_row`` goes straight to the spout, and the per-task counts are summed here and
        handed to the tracker once, at the end."""
        if self._rows_route is None:
            raise ValueError(f"transactional spout of {self.context.component_id!r} declares no fields")
        rows = RowChunks(self._rows_route, self._send_chunk, wire(attempt))
        try:
            # each row waits in its targets' chunks; values[1]: the last committed txid
            self.emitter.emit_batch(attempt, tup.values[1], rows.add_row)
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
