"""WindowedBolt: the glue between the runtime and the pure window manager (Storm's
WindowedBoltExecutor, without its threads).

The runtime calls ``execute(tup)`` as for any bolt. A data tuple goes into the window manager
with its timestamp (the wall clock in ms, or its timestamp field); the worker's tick tuples,
at a rate the bolt asks for through its component configuration, advance processing time or
produce watermarks. The user's ``execute(window)`` is stored as ``execute_window`` when the
subclass is created (``__init_subclass__``), so the executor needs nothing special. Tuples are
acked as they leave the window for good, failed when an evaluation of a window holding them
raises; emits during an evaluation are anchored to the window's tuples, as in Storm.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from ..api.components import DEFAULT_STREAM, TICK_INFO, Bolt, FailedException, Tuple, declared_streams
from .manager import WatermarkGenerator, build_manager
from .policies import Count, Duration

log = logging.getLogger("topology.windowing")

LATE_TUPLE_FIELD = "late_tuple"
DEFAULT_WATERMARK_INTERVAL = Duration(1)  # Storm's default
TICK_FLOOR_SECS = 0.01  # the worker loop sleeps up to 20 ms when idle: finer ticks buy nothing
LATE_LOG_SECS = 10.0
IDLE_WATERMARK_INTERVALS = 5  # an upstream task silent this many watermark intervals is idle
IDLE_FLOOR = Duration(1)
END_OF_INPUT_WATERMARK = 1 << 62  # past any timestamp: every window holding an event is evaluated


class TupleWindow:
    """One evaluation: the tuples in the window, those new since the last evaluation, those
    that expired since then; ``start_ts``/``end_ts`` in ms (``start_ts`` only for duration
    windows, as Storm)."""

    __slots__ = ("_tuples", "_new", "_expired", "start_ts", "end_ts")

    def __init__(self, tuples: list, new: list, expired: list, start_ts: int | None, end_ts: int | None) -> None:
        self._tuples, self._new, self._expired = tuples, new, expired
        self.start_ts, self.end_ts = start_ts, end_ts

    def get(self) -> list[Tuple]:
        return self._tuples

    def get_new(self) -> list[Tuple]:
        return self._new

    def get_expired(self) -> list[Tuple]:
        return self._expired

    def __iter__(self):
        return iter(self._tuples)

    def __len__(self) -> int:
        return len(self._tuples)

    def __repr__(self) -> str:
        return f"TupleWindow({len(self._tuples)} tuples, new {len(self._new)}, expired {len(self._expired)}, " \
               f"[{self.start_ts}, {self.end_ts}])"


def _now_ms() -> int:
    return int(time.time() * 1000)


def _execute_tuple(self: WindowedBolt, tup: Tuple) -> None:
    """What the runtime calls: feed the window manager (see the module docstring)."""
    wm = self._wm
    if tup.info is TICK_INFO:
        now = _now_ms()
        gen = self._wmgen
        if gen is None:
            wm.advance(now)
        elif now >= self._next_watermark:
            self._next_watermark = now + self._watermark_ms
            mark = gen.compute(now)
            if mark is not None:
                wm.add_watermark(mark)
        if self._late_dropped > self._late_logged_count and now - self._late_logged >= LATE_LOG_SECS * 1000:
            self._log_dropped()
            self._late_logged = now
        return
    field = self._ts_field
    if field is None:
        wm.add(tup, _now_ms())
        return
    ts = _timestamp(self, tup, field)
    if ts is not None and self._wmgen.track(tup.source_task, ts):
        wm.add(tup, ts)
        return
    if ts is not None:
        self._late(tup)


def _timestamp(self: WindowedBolt, tup: Tuple, field: str) -> int | None:
    """The tuple's event time in ms; a tuple without a usable one is failed, with the error
    naming the bolt, the field and the value (replaying it cannot help, but failing keeps it
    visible and lets the spout decide)."""
    try:
        return int(tup[field])
    except (KeyError, IndexError, TypeError, ValueError) as e:
        value = tup.values if not isinstance(e, (TypeError, ValueError)) else tup[field]
        report = getattr(self, "report_error", None)
        err = ValueError(f"timestamp field {field!r} of a tuple from {tup.info.component}/{tup.info.stream} "
                         f"is not an integer of milliseconds: {value!r}")
        if report is not None:
            report(f"{self._window_id}: event time", err)
        else:
            log.error("%s: %s", self._window_id, err)
        self.fail(tup)
        return None


class WindowedBolt(Bolt):
    """Subclass it and define ``execute(self, window: TupleWindow)``; declare the window with
    ``with_window(length, sliding=None)`` (each ``Count(n)`` or ``Duration(seconds)``;
    tumbling when ``sliding`` is omitted). Event time: ``with_timestamp_field(name)`` (values in
    ms), ``with_lag``, ``with_watermark_interval``, ``with_late_tuple_stream``."""

    _window_length: Count | Duration | None = None
    _window_sliding: Count | Duration | None = None
    _ts_field: str | None = None
    _lag: Duration | None = None
    _watermark_interval: Duration | None = None
    _late_stream: str | None = None
    _idle_timeout: Duration | None = None
    _window_inputs: list | None = None
    _window_id = "?"

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        fn = cls.__dict__.get("execute")
        if fn is not None and fn is not _execute_tuple:
            cls.execute_window = fn  # the user's execute(window)
            cls.execute = _execute_tuple
        prep = cls.__dict__.get("prepare")
        if prep is not None and not getattr(prep, "_windowed", False):
            def prepare(self, conf: dict, context: Any, _user=prep) -> None:
                self._window_prepare(conf, context)
                _user(self, conf, context)
            prepare._windowed = True
            cls.prepare = prepare

    execute = _execute_tuple

    def execute_window(self, window: TupleWindow) -> None:
        raise NotImplementedError(f"{type(self).__name__} must define execute(self, window)")

    def prepare(self, conf: dict, context: Any) -> None:
        self._window_prepare(conf, context)
    prepare._windowed = True

    # --- declaration (chainable, on the template given to set_bolt) --------------------------
    def with_window(self, length: Count | Duration, sliding: Count | Duration | None = None) -> WindowedBolt:
        for what, v in (("length", length), ("sliding interval", sliding)):
            if v is not None and not isinstance(v, (Count, Duration)):
                raise TypeError(f"{type(self).__name__}.with_window: window {what} must be Count(n) or "
                                f"Duration(seconds), got {v!r}")
        self._window_length = length
        self._window_sliding = length if sliding is None else sliding
        return self

    def with_tumbling_window(self, length: Count | Duration) -> WindowedBolt:
        return self.with_window(length)

    def with_timestamp_field(self, name: str) -> WindowedBolt:
        self._ts_field = name
        return self

    def with_lag(self, lag: Duration) -> WindowedBolt:
        self._lag = _duration(lag, "with_lag")
        return self

    def with_watermark_interval(self, interval: Duration) -> WindowedBolt:
        self._watermark_interval = _duration(interval, "with_watermark_interval")
        return self

    def with_idle_timeout(self, timeout: Duration) -> WindowedBolt:
        """Event time: an upstream task that sends nothing for ``timeout`` (wall clock) stops
        holding the watermark back until it sends again (default: 5 watermark intervals, at
        least 1 s)."""
        self._idle_timeout = _duration(timeout, "with_idle_timeout")
        return self

    def with_late_tuple_stream(self, stream: str) -> WindowedBolt:
        self._late_stream = stream
        outputs = declared_streams(self, type(self).__name__)
        self.outputs = {**{k: s for k, s in outputs.items()}, stream: [LATE_TUPLE_FIELD]}
        return self

    # --- what create_topology and build_plan ask (duck-typed: the API layer cannot import us) ---
    def configure_component(self, bolt_id: str, inputs: list[tuple[str, str]], conf: dict) -> list[str]:
        """Called by ``create_topology``: record the inputs (event time takes its watermark over
        their tasks), ask for tick tuples when time drives the window, return what is wrong."""
        self._window_id = bolt_id
        self._window_inputs = [tuple(i) for i in inputs]
        where = f"bolt {bolt_id!r}"
        if self._window_length is None:
            return [f"{where}: a windowed bolt needs with_window(length, sliding)"]
        if self._late_stream is not None and self._ts_field is None:
            return [f"{where}: a late tuple stream can be defined only with a timestamp field (with_timestamp_field)"]
        tick = self._tick_secs()
        if tick is not None:
            conf["topology.tick.tuple.freq.secs"] = tick
        if "topology.message.timeout.secs" in conf:
            return self.check_topology_conf(bolt_id, conf)
        return []

    def check_topology_conf(self, bolt_id: str, conf: dict) -> list[str]:
        """Storm's validate(): tuples are acked only when they leave the window, so the message
        timeout must exceed window length + sliding interval (and a count window must fit in
        max.spout.pending)."""
        length, sliding = self._window_length, self._window_sliding
        if length is None:
            return []
        errors = []
        if conf.get("topology.enable.message.timeouts", True):
            timeout = float(conf.get("topology.message.timeout.secs", 30))
            span = [d.seconds for d in (length, sliding) if isinstance(d, Duration)]
            if span and timeout <= sum(span):
                parts = " + ".join(f"{s:g}" for s in span)
                errors.append(
                    f"bolt {bolt_id!r}: topology.message.timeout.secs ({timeout:g} s) must be above the window "
                    f"length + sliding interval ({parts} = {sum(span):g} s): tuples are acked only when they "
                    f"leave the window")
        pending = conf.get("topology.max.spout.pending")
        counts = [c.value for c in (length, sliding) if isinstance(c, Count)]
        if pending and counts and sum(counts) > int(pending):
            errors.append(f"bolt {bolt_id!r}: window count (length + sliding interval = {sum(counts)}) is more than "
                          f"topology.max.spout.pending ({pending}): the window could never fill")
        return errors

    def _tick_secs(self) -> float | None:
        if self._ts_field is not None:
            every = (self._watermark_interval or DEFAULT_WATERMARK_INTERVAL).seconds
        elif isinstance(self._window_sliding, Duration):
            every = self._window_sliding.seconds
        else:
            return None  # count-triggered on processing time: tuples drive it, no ticks
        return round(max(TICK_FLOOR_SECS, min(1.0, every / 5)), 3)

    # --- runtime ------------------------------------------------------------------------------
    def _window_prepare(self, conf: dict, context: Any) -> None:
        length, sliding = self._window_length, self._window_sliding
        if length is None:
            raise ValueError(f"{type(self).__name__}: with_window(...) was not called")
        self._window_id = f"{getattr(context, 'component_id', '?')}[{getattr(context, 'task_id', '?')}]"
        errors = self.check_topology_conf(getattr(context, "component_id", "?"), conf)
        if errors:
            raise ValueError("; ".join(errors))
        event_time = self._ts_field is not None
        lag = self._lag.ms if self._lag is not None else 0
        now = _now_ms()
        self._wm = build_manager(length, sliding, event_time, lag, self._activate, self._expire, now)
        self._wmgen = None
        if event_time:
            inputs = self._window_inputs
            if not inputs:
                raise ValueError(f"{self._window_id}: event time needs the bolt's inputs; build the topology with "
                                 "TopologyBuilder.create_topology")
            self._watermark_ms = (self._watermark_interval or DEFAULT_WATERMARK_INTERVAL).ms
            self._next_watermark = now + self._watermark_ms
            idle = self._idle_timeout.ms if self._idle_timeout is not None else max(
                IDLE_FLOOR.ms, IDLE_WATERMARK_INTERVALS * self._watermark_ms)
            self._wmgen = WatermarkGenerator(lag, _upstream_tasks(context, inputs), idle, now)
        self._late_count = 0  # late tuples: to the late stream, or dropped without one
        self._late_dropped = 0  # tuples acked without being evaluated (late without a stream, count tails)
        self._late_logged = now
        self._late_logged_count = 0
        self._anchors: list | None = None
        # Emits during an evaluation anchor to the window's tuples (Storm's WindowedOutputCollector).
        self._raw_emit, self._raw_emit_direct = self.emit, self.emit_direct
        self.emit, self.emit_direct = self._window_emit, self._window_emit_direct

    def _window_emit(self, values, anchors=None, stream: str = DEFAULT_STREAM) -> list[int]:
        return self._raw_emit(values, self._anchors if anchors is None else anchors, stream)

    def _window_emit_direct(self, task: int, values, anchors=None, stream: str = DEFAULT_STREAM) -> list[int]:
        return self._raw_emit_direct(task, values, self._anchors if anchors is None else anchors, stream)

    def _late(self, tup: Tuple) -> None:
        """At or before a watermark already passed (its windows may have been evaluated): to
        the late tuple stream, or dropped with a count; acked either way."""
        self._late_count += 1
        if self._late_stream is not None:
            self._raw_emit([list(tup.values)], [tup], self._late_stream)
        else:
            self._late_dropped += 1
        self.ack(tup)

    def _log_dropped(self) -> None:
        log.warning("%s: %d tuple(s) dropped so far without evaluation (%d late; declare "
                    "with_late_tuple_stream to receive late tuples)", self._window_id, self._late_dropped,
                    self._late_count)
        self._late_logged_count = self._late_dropped

    # --- end of a bounded run -------------------------------------------------------------------
    def end_of_input(self) -> None:
        """Every spout has finished and nothing but windows holds tuples: evaluate what the
        windows hold one last time and let every tuple go. Duration and event-time windows are
        evaluated (event time: the watermark moves past every tuple); a count window's partial
        tail is not (Storm's and Flink's count semantics): its tuples are acked and counted as
        dropped. The windows are empty afterwards; the bolt keeps working if more arrives."""
        wm = self._wm
        if not wm.queue:
            return
        sliding = self._window_sliding
        if self._wmgen is not None:
            self._wmgen.close(max(e.ts for e in wm.queue))
            wm.add_watermark(END_OF_INPUT_WATERMARK)
        elif isinstance(sliding, Duration):
            wm.fire(max(_now_ms(), max(e.ts for e in wm.queue)))
        _, never = wm.drain()
        if never:
            self._late_dropped += len(never)
            log.info("%s: end of input: %d tuple(s) in a partial count window acked without evaluation",
                     self._window_id, len(never))
        if self._late_dropped > self._late_logged_count:
            self._log_dropped()

    @property
    def window_held(self) -> int:
        """Tuples the window holds (the runtime asks, at the end of a bounded run)."""
        wm = getattr(self, "_wm", None)
        return 0 if wm is None else len(wm.queue)

    @property
    def window_stats(self) -> dict[str, int]:
        """This task's late tuples and tuples dropped without evaluation (for the run's stats)."""
        return {"late": getattr(self, "_late_count", 0), "dropped": getattr(self, "_late_dropped", 0)}

    def _expire(self, tuples: list) -> None:
        ack = self.ack
        for t in tuples:
            ack(t)

    def _activate(self, tuples: list, new: list, expired: list, ref: int) -> None:
        length = self._window_length
        start = ref - length.ms if isinstance(length, Duration) else None
        self._anchors = self._window_anchors(tuples)
        try:
            self.execute_window(TupleWindow(tuples, new, expired, start, ref))
        except Exception as e:  # noqa: BLE001 - a user bug fails the window's tuples, the worker goes on
            self._window_failed(tuples)
            if not isinstance(e, FailedException):
                report = getattr(self, "report_error", None)
                if report is not None:
                    report(f"execute(window of {len(tuples)} tuples ending {ref})", e)
                else:
                    log.exception("%s: execute(window) raised", self._window_id)
        finally:
            self._anchors = None

    def _window_anchors(self, tuples: list) -> list:
        return tuples

    def _window_failed(self, tuples: list) -> None:
        fail = self.fail
        for t in tuples:
            fail(t)
        self._wm.discard(tuples)  # failed: the spouts replay them; they must not be acked later

    @property
    def late_tuples_dropped(self) -> int:
        """Late tuples dropped (acked, not evaluated) because no late tuple stream is declared."""
        return getattr(self, "_late_dropped", 0)


def _upstream_tasks(context: Any, inputs: list) -> list[int]:
    tasks: set[int] = set()
    for component, _stream in inputs:
        tasks.update(context.component_tasks(component))
    if not tasks:
        raise ValueError(f"event time: no upstream tasks found for the inputs {inputs!r}")
    return sorted(tasks)


def _duration(v: Any, what: str) -> Duration:
    if not isinstance(v, Duration):
        raise TypeError(f"{what} takes a Duration(seconds), got {v!r}")
    return v
