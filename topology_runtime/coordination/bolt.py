"""Storm's CoordinatedBolt: wraps any bolt whose tuples carry a batch or request id in field 0.
The one coordinated wrapper: linear DRPC stages and every component of a transactional topology
run in it.

The wrapper counts, per id, the tuples its delegate sent to each downstream task and, once this
task is finished for the id, reports those counts on the direct ``COORD_STREAM``.
Finished (``checkFinishId``): a first stage (no coordinated sources) when the request tuple was
acked or failed; a middle stage when every upstream task reported and the received count
matches; a last stage with an id stream when, in addition, the id tuple arrived. Then the
delegate's ``finished_id(id)`` runs (its emits still count) before the counts go out.

Delegates: a ``Bolt`` (acks its input itself), a ``BasicBolt`` (acked after ``execute``,
emits anchored to the input) or a ``BatchBolt`` (one instance per id; ``finish_batch`` on
finish). The counting itself is the pure ``tracker.CoordinatedTracker``.

Callbacks a ``Bolt`` delegate may define (Storm's FinishedCallback and TimeoutCallback, and two
more): ``finished_id(id)``, which may return ``DEFERRED`` and call ``finish_deferred(id,
error)`` later, when the finish ran off the loop (a transactional commit); ``timeout_id(id)``
when an id stays unfinished past the timeout; ``failed_id(id)`` when the id failed at this task
(drop what is held for it). Ids that failed at a task stay failed there: a late data tuple of
one is dropped, a late count or id tuple fails (its tree fails now instead of timing out).
Besides the actions of a bolt, a delegate is given ``router(stream)`` and
``chunk_emitter(stream)`` (many rows as one tuple, counted once per chunk).

``ids``: how an id travels (``IdCodec``): a transactional attempt goes as ``[txid, attempt]``
and is tracked as a ``TransactionAttempt``; a DRPC request id is itself.
"""

from __future__ import annotations

import copy
import logging
import time
from collections.abc import Callable, Hashable, Mapping
from typing import Any

from ..api.builder import InputDeclarer, TopologyBuilder
from ..api.components import BasicBolt, Bolt, FailedException, Stream, Tuple, declared_streams
from ..api.names import name_list
from .batch import BatchBolt
from .streams import COORD_FIELDS, COORD_STREAM
from .tracker import CoordinatedTracker, Finish

log = logging.getLogger(__name__)

SINGLE, ALL = "single", "all"  # Storm's SourceArgs: one upstream task reports per id, or all of them
TICK_SECS = 0.5  # how often a coordinated task looks for timed-out ids
DEFERRED = "deferred"  # finished_id's answer when it completes later, through finish_deferred(id, error)
_OK, _FAILED = "ok", "failed"
_MAX_FAILED = 4096  # ids that failed here, remembered (oldest dropped first: ids are not reused)


class IdCodec:
    """How ids travel in field 0 (``wire``) and how they are tracked (``key``, hashable)."""

    def key(self, value: Any) -> Hashable:
        return value

    def wire(self, key: Any) -> Any:
        return key


class CoordinatedBolt(Bolt):
    """Wrap ``bolt`` (request id in field 0 of every tuple in and out).

    ``sources``: coordinated upstream components -> ``"single"`` or ``"all"`` (None: filled in
    by ``coordinate(builder)``); ``downstream``: the coordinated components this one reports to;
    ``id_stream``: ``(component, stream)`` whose tuple (request id in field 0) must also arrive
    before the id is finished (the last stage of a linear DRPC topology, a transactional
    committer's commit stream); ``rotate_secs``: how often the timeout map rotates (3 buckets;
    None: half the message timeout; 0: at every tick tuple).
    """

    def __init__(self, bolt: Any, sources: Mapping[str, str] | None = None, downstream: list[str] | None = None,
                 id_stream: tuple[str, str] | None = None, ids: IdCodec | None = None,
                 rotate_secs: float | None = None) -> None:
        if not hasattr(bolt, "execute"):
            raise TypeError(f"CoordinatedBolt wraps a bolt, got {type(bolt).__name__}")
        for comp, kind in (sources or {}).items():
            if kind not in (SINGLE, ALL):
                raise ValueError(f"CoordinatedBolt sources[{comp!r}]: 'single' or 'all', got {kind!r}")
        self.delegate = bolt
        self.sources = dict(sources) if sources is not None else None
        self.downstream = name_list(downstream, "downstream", "CoordinatedBolt", allow_empty=True) \
            if downstream is not None else None
        if id_stream is not None and (isinstance(id_stream, (str, bytes)) or len(id_stream) != 2):
            raise ValueError(f"CoordinatedBolt: id_stream must be a (component, stream) pair, got {id_stream!r}")
        self.id_stream = tuple(id_stream) if id_stream is not None else None
        self.ids = ids
        self.rotate_secs = rotate_secs
        outputs = {name: s for name, s in declared_streams(bolt, type(bolt).__name__).items()}
        outputs[COORD_STREAM] = Stream(COORD_FIELDS, direct=True)
        self.outputs = outputs

    # --- lifecycle ---------------------------------------------------------------------------
    def prepare(self, conf: dict, context: Any) -> None:
        self.conf, self.context = conf, context
        sources = self.sources or {}
        n_reports = sum(1 if kind == SINGLE else len(context.component_tasks(c)) for c, kind in sources.items())
        out_tasks = [t for c in (self.downstream or []) for t in context.component_tasks(c)]
        self.tracker = CoordinatedTracker(n_reports, out_tasks, has_id_stream=self.id_stream is not None)
        # Storm's TimeCacheMap expires after the message timeout: 3 buckets rotated every T/2.
        if self.rotate_secs is None:
            self.rotate_secs = float(conf.get("topology.message.timeout.secs") or 30) / 2
        self._next_rotate = time.monotonic() + self.rotate_secs
        self._key: Callable[[Any], Any] | None = self.ids.key if self.ids is not None else None
        self._failed: dict[Any, None] = {}
        self._deferred: dict[Any, tuple[Finish, list, Tuple | None]] = {}
        self.batch = isinstance(self.delegate, BatchBolt)
        self.basic = isinstance(self.delegate, BasicBolt)
        self.batches: dict[Any, Any] = {}
        self._current: Tuple | None = None  # BasicBolt: emits are anchored to the input
        self._finish_anchors: list | None = None  # finished_id's emits are anchored to what was held
        self._raw_emit, self._raw_ack, self._raw_fail = self.emit, self.ack, self.fail
        if not self.batch:
            d = self.delegate
            d.emit, d.emit_direct = self._counted_emit, self._counted_emit_direct
            d.ack, d.fail = self._delegate_ack, self._delegate_fail
            d.reset_timeout, d.run_off_loop = self.reset_timeout, self.run_off_loop
            d.router, d.chunk_emitter, d.finish_deferred = self.router, self._counted_chunk_emitter, self._finish_deferred
            if hasattr(self, "row_router"):  # optional: a chunker falls back to router without it
                d.row_router = self.row_router
            d.prepare(conf, context)

    def cleanup(self) -> None:
        if not self.batch:
            self.delegate.cleanup()

    def _id(self, value: Any) -> Any:
        return value if self._key is None else self._key(value)

    # --- what the delegate calls -------------------------------------------------------------
    def _anchors(self, anchors: Any) -> Any:
        if anchors is not None:
            return anchors
        if self._finish_anchors is not None:
            return self._finish_anchors
        return self._current if self._current is not None else []

    def _counted_emit(self, values: list, anchors: Any = None, stream: str = "default") -> list[int]:
        targets = self._raw_emit(values, anchors=self._anchors(anchors), stream=stream)
        self.tracker.emitted(self._id(values[0]), targets)
        return targets

    def _counted_emit_direct(self, task: int, values: list, anchors: Any = None, stream: str = "default") -> list[int]:
        targets = self.emit_direct(task, values, anchors=self._anchors(anchors), stream=stream)
        self.tracker.emitted(self._id(values[0]), targets)
        return targets

    def _counted_chunk_emitter(self, stream: str) -> Callable[[int, list, list], None]:
        send, emitted, id_of = self.chunk_emitter(stream), self.tracker.emitted, self._id

        def emit(task: int, head: list, rows: list) -> None:
            send(task, head, rows)
            emitted(id_of(head), [task])  # one tuple on the wire, whatever its rows
        return emit

    def _delegate_ack(self, tup: Tuple) -> None:
        # Storm's order: count, check (the counts go out anchored to ``tup``), then ack it.
        done = self._apply(self.tracker.regular_acked(self._id(tup.values[0])), tup)
        if done is _OK:
            self._raw_ack(tup)
        elif done is _FAILED:
            self._raw_fail(tup)

    def _delegate_fail(self, tup: Tuple) -> None:
        self._tracked_fail(tup)
        self._raw_fail(tup)

    def _tracked_fail(self, tup: Tuple) -> None:
        """The id fails here (what was held fails); ``tup`` itself is failed by the caller."""
        id_ = self._id(tup.values[0])
        self._mark_failed(id_)
        self._dropped(id_)
        self._apply(self.tracker.regular_failed(id_), tup)

    def _mark_failed(self, id_: Any) -> None:
        self._failed[id_] = None
        if len(self._failed) > _MAX_FAILED:
            del self._failed[next(iter(self._failed))]

    # --- execution ---------------------------------------------------------------------------
    def execute(self, tup: Tuple) -> None:
        if tup.is_tick():
            self._tick()
            return
        id_ = self._id(tup.values[0])
        stream, comp = tup.info.stream, tup.info.component
        is_coord = stream == COORD_STREAM and self.sources is not None and comp in self.sources
        is_id = self.id_stream is not None and (comp, stream) == self.id_stream
        if self._failed and id_ in self._failed:
            # Its tracking is gone: a late count or id tuple would start it afresh and wait for
            # the timeout. Failing it fails the id's tree now (Storm fails an id or coord tuple it
            # has no tracking for); a data tuple is dropped.
            (self._raw_fail if is_coord or is_id else self._raw_ack)(tup)
            return
        if is_coord:
            # The tracker holds, acks or fails a count or id tuple itself (through _apply).
            self._apply(self.tracker.coord(id_, int(tup.values[1]), tup), tup)
        elif is_id:
            self._apply(self.tracker.id_tuple(id_, tup), tup)
        elif self.batch:
            b = self._batch(id_)
            try:
                b.execute(tup)
            except FailedException:
                self._delegate_fail(tup)
                return
            except Exception:
                self._tracked_fail(tup)
                raise  # the executor reports it and fails ``tup``
            self._delegate_ack(tup)
        elif self.basic:
            self._current = tup
            try:
                self.delegate.execute(tup)
            except FailedException:
                self._delegate_fail(tup)
                return
            except Exception:
                self._tracked_fail(tup)
                raise
            finally:
                self._current = None
            self._delegate_ack(tup)
        else:
            try:
                self.delegate.execute(tup)
            except Exception:
                self._tracked_fail(tup)
                raise

    def _batch(self, id_: Any) -> Any:
        b = self.batches.get(id_)
        if b is None:
            b = self.batches[id_] = copy.deepcopy(self.delegate)
            b.emit = self._counted_emit
            b.prepare(self.conf, self.context, id_)
        return b

    def _tick(self) -> None:
        now = time.monotonic()
        if now < self._next_rotate:
            return
        self._next_rotate = now + self.rotate_secs
        for f in self.tracker.tick():  # unfinished ids past the timeout
            self._mark_failed(f.id)
            self.batches.pop(f.id, None)
            callback = getattr(self.delegate, "timeout_id", None)
            if callback is not None and not self.batch:
                callback(f.id)
            for t in f.fail:
                self._raw_fail(t)

    def _apply(self, f: Finish, tup: Tuple | None) -> str:
        """Act on the tracker's answer: ``_OK`` (the caller acks ``tup`` if it is not held),
        ``_FAILED`` (``tup`` must fail) or ``DEFERRED`` (``finish_deferred`` acks it later)."""
        if f.finished:
            held = [t for t in f.ack if t is not tup]
            anchors = ([tup] if tup is not None else []) + held
            self._finish_anchors = anchors
            try:
                answer = self._finished_id(f.id)
            except BaseException as e:
                self._finish_failed(f, tup)
                if isinstance(e, FailedException):
                    return _FAILED
                raise  # the executor reports it and fails ``tup``
            finally:
                self._finish_anchors = None
            if answer == DEFERRED:
                self._deferred[f.id] = (f, anchors, tup)
                return DEFERRED
            self._report_counts(f, anchors)
            for t in f.ack:
                self._raw_ack(t)
        else:
            for t in f.ack:
                self._raw_ack(t)
        if f.fail:  # the id failed (a failed tuple): what was held fails
            self._dropped(f.id)
            for t in f.fail:
                self._raw_fail(t)
        return _OK

    def _finish_failed(self, f: Finish, tup: Tuple | None) -> None:
        self._mark_failed(f.id)
        self._dropped(f.id)
        self.tracker.done(f.id)
        for t in f.ack:
            self._raw_fail(t)

    def _dropped(self, id_: Any) -> None:
        self.batches.pop(id_, None)
        callback = getattr(self.delegate, "failed_id", None)
        if callback is not None and not self.batch:
            callback(id_)

    def _finish_deferred(self, id_: Any, error: BaseException | None = None) -> None:
        """A deferred ``finished_id`` completed (on the loop thread): send the counts and ack
        what was held, or, on ``error``, fail it all and raise ``error`` for the executor."""
        f, anchors, tup = self._deferred.pop(id_)
        extra = [tup] if tup is not None and not any(t is tup for t in f.ack) else []
        if error is not None:
            self._finish_failed(f, tup)
            for t in extra:
                self._raw_fail(t)
            raise error
        self._report_counts(f, anchors)
        for t in f.ack + extra:
            self._raw_ack(t)

    def _report_counts(self, f: Finish, anchors: list) -> None:
        """Tell each downstream task how many tuples of the finished id this task sent it (read
        now, after finish_batch or finished_id ran: their emits count), then drop the id."""
        value = f.id if self.ids is None else self.ids.wire(f.id)
        for task, n in f.counts.items():
            self.emit_direct(task, [value, n], anchors=anchors, stream=COORD_STREAM)
        self.tracker.done(f.id)

    def _finished_id(self, id_: Any) -> Any:
        if self.batch:
            b = self.batches.pop(id_, None)
            if b is None:  # this task got no tuple of the id: nothing to aggregate, as Storm
                b = self._batch(id_)
                self.batches.pop(id_, None)
            b.finish_batch()
            return None
        callback = getattr(self.delegate, "finished_id", None)
        return callback(id_) if callback is not None else None


def is_finisher(bolt: Any) -> bool:
    """Storm's FinishedCallback test: a BatchBolt or a bolt with ``finished_id``."""
    return isinstance(bolt, BatchBolt) or callable(getattr(bolt, "finished_id", None))


def coordinate(builder: TopologyBuilder, tick_secs: float = TICK_SECS) -> None:
    """Wire the CoordinatedBolts of an ordinary topology before ``create_topology()``: each one's
    coordinated sources (``single`` when that source has no coordinated sources itself, i.e. a
    first stage fed one tuple per id, else ``all``) unless given, its downstream, the direct
    subscriptions to its sources' ``$coord`` streams and the tick that drives its timeouts."""
    specs = builder._components  # noqa: SLF001 - the same layer's builder, read before validation
    coord = {cid: s for cid, s in specs.items() if isinstance(s.template, CoordinatedBolt)}

    def data_sources(cid: str) -> list[str]:
        cb = coord[cid].template
        return sorted({g.source for g in coord[cid].inputs if g.source in coord and g.stream != COORD_STREAM
                       and (g.source, g.stream) != cb.id_stream})

    for cid, spec in coord.items():
        cb = spec.template
        if cb.sources is None:
            cb.sources = {s: (SINGLE if not data_sources(s) else ALL) for s in data_sources(cid)}
        if cb.downstream is None:
            cb.downstream = [d for d in coord if cid in data_sources(d)]
        have = {(g.source, g.stream) for g in spec.inputs}
        for s in cb.sources:
            if (s, COORD_STREAM) not in have:
                InputDeclarer(spec).direct_grouping(s, stream=COORD_STREAM)
        spec.conf.setdefault("topology.tick.tuple.freq.secs", tick_secs)
