"""StatefulWindowedBolt: a windowed bolt whose window contents and own state are checkpointed
(Storm's IStatefulWindowedBolt in its persistent form, PersistentWindowedBoltExecutor).

What changes against ``WindowedBolt``:

* A tuple is acked once the checkpoint that holds it in the window is taken (at PREPARE; with
  Storm's protocol the ack is then held until that checkpoint's COMMIT), not when it leaves the
  window. So the window may be longer than the message timeout, and a worker that starts again
  resumes its windows from the state instead of having the spouts re-send what is in them.
* At every PREPARE the window manager's queue, its policies' state, the watermark generator and
  the events of the last window are written into the task's ``KeyValueState`` beside the bolt's
  own keys (``__window`` and ``__window:<partition>``, ``PARTITION`` events per partition: only
  partitions that changed since the last checkpoint are written, as Storm's WindowState does).
* Emits during an evaluation are anchored to the window's tuples that are not in a checkpoint
  yet (a tuple already acked can take no new edge). A raising evaluation fails those tuples
  (with ``topology.state.exactly.once``: a rollback of every task); the tuples already
  checkpointed stay in the window, and the error is reported.
* With ``topology.state.exactly.once`` and a replayable spout, a rollback restores window and
  state to the checkpoint and the spouts to its positions: each window's emitted aggregate is
  the same in every replay when its contents are decided by event time on ordered input
  (docs/windowing.md, "Exactly-once windows").
"""

from __future__ import annotations

from bisect import bisect_right
from collections import deque
from typing import Any

from ..api.components import TICK_INFO, StatefulBolt, StreamInfo, Tuple
from .bolt import WindowedBolt, _execute_tuple, _now_ms, _timestamp
from .policies import Event

WINDOW_KEY = "__window"
PARTITION = 1000  # events per state key: a checkpoint rewrites only the partitions that changed
FORMAT = 2  # 2: watermarks per upstream task; the event-time queue in timestamp order


def _part_key(p: int) -> str:
    return f"{WINDOW_KEY}:{p}"


def _ranges(seqs: list[int]) -> list[list[int]]:
    """Sorted seqs as [first, last] runs (the last window is mostly contiguous)."""
    out: list[list[int]] = []
    for s in seqs:
        if out and out[-1][1] + 1 == s:
            out[-1][1] = s
        else:
            out.append([s, s])
    return out


def _execute_stateful(self: StatefulWindowedBolt, tup: Tuple) -> None:
    if self._reload:
        self._restore_window(self.state)
    if tup.info is TICK_INFO:
        _execute_tuple(self, tup)
        return
    field = self._ts_field
    if field is None:
        ts = _now_ms()
    else:
        ts = _timestamp(self, tup, field)
        if ts is None:
            return
        if not self._wmgen.track(tup.source_task, ts):
            self._late(tup)
            return
    key = id(tup)
    self._seq[key] = self._next_seq
    self._next_seq += 1
    self._unsaved[key] = tup  # before add: a count trigger may evaluate (and anchor) at once
    self._wm.add(tup, ts)


def _wrap_first(ours: Any, user: Any) -> Any:
    def both(self, *args):
        ours(self, *args)
        user(self, *args)
    both._windowed = True
    return both


class StatefulWindowedBolt(WindowedBolt, StatefulBolt):
    """A windowed bolt with checkpointed state: define ``execute(self, window)`` and, if it
    keeps state of its own, ``init_state(self, state)`` (a ``KeyValueState``; the keys
    ``__window`` and ``__window:*`` are the runtime's)."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "execute" in cls.__dict__:
            cls.execute = _execute_stateful
        # Our part runs first: init_state sees the restored window, pre_rollback drops it.
        for name, ours in (("init_state", StatefulWindowedBolt._init_window),
                           ("pre_rollback", StatefulWindowedBolt._rollback_window)):
            user = cls.__dict__.get(name)
            if user is not None and not getattr(user, "_windowed", False):
                setattr(cls, name, _wrap_first(ours, user))
        user = cls.__dict__.get("pre_prepare")
        if user is not None and not getattr(user, "_windowed", False):
            def pre_prepare(self, txid: int, _user=user) -> None:
                _user(self, txid)  # the user's writes go into the same checkpoint
                self._save_window(txid)
            pre_prepare._windowed = True
            cls.pre_prepare = pre_prepare

    execute = _execute_stateful

    # --- StatefulBolt hooks ---------------------------------------------------------------------
    def init_state(self, state: Any) -> None:
        self._init_window(state)
    init_state._windowed = True

    def pre_prepare(self, txid: int) -> None:
        self._save_window(txid)
    pre_prepare._windowed = True

    def pre_rollback(self) -> None:
        self._rollback_window()
    pre_rollback._windowed = True

    def end_of_input(self) -> None:
        if self._reload:
            self._restore_window(self.state)
        super().end_of_input()

    # --- checks: acks wait for a checkpoint, not for the window -----------------------------------
    def check_topology_conf(self, bolt_id: str, conf: dict) -> list[str]:
        return []  # the checkpoint interval is checked against the message timeout for every stateful bolt

    # --- runtime ----------------------------------------------------------------------------------
    def _window_prepare(self, conf: dict, context: Any) -> None:
        super()._window_prepare(conf, context)
        self._seq: dict[int, int] = {}        # id(tuple) -> its sequence number (partition = seq // PARTITION)
        self._unsaved: dict[int, Tuple] = {}  # live tuples not in a checkpoint yet: acked at the next PREPARE
        self._next_seq = 0
        self._written: dict[int, tuple[int, int]] = {}  # partition -> (events, last seq) as last written
        self._streams: dict[tuple[str, str], int] = {}
        self._stream_rows: list[list] = []
        self._reload = False
        self.state = None

    def _init_window(self, state: Any) -> None:
        self.state = state
        self._restore_window(state)

    def _expire(self, tuples: list) -> None:
        seq = self._seq
        for t in tuples:
            seq.pop(id(t), None)  # acked at its checkpoint already, or at the next one (in _unsaved)

    def _window_anchors(self, tuples: list) -> list:
        unsaved = self._unsaved
        return [t for t in tuples if id(t) in unsaved]

    def _window_failed(self, tuples: list) -> None:
        unsaved, seq = self._unsaved, self._seq
        live = [t for t in tuples if id(t) in unsaved]
        for t in live:
            del unsaved[id(t)]
            seq.pop(id(t), None)
            self.fail(t)
        if live:
            self._wm.discard(live)  # replayed (or rolled back): must not stay in the window

    def _rollback_window(self) -> None:
        # Storm's protocol: the state goes back to the last commit right after this hook; what
        # arrived since is failed (the spouts replay it) and the window is reloaded from the state.
        for t in self._unsaved.values():
            self.fail(t)
        self._unsaved = {}
        self._reload = True

    def _stream_index(self, info: StreamInfo) -> int:
        key = (info.component, info.stream)
        i = self._streams.get(key)
        if i is None:
            i = self._streams[key] = len(self._stream_rows)
            self._stream_rows.append([info.component, info.stream, list(info.fields)])
        return i

    def _row(self, s: int, ev_value: Tuple, ts: int) -> list:
        return [s, list(ev_value.values), ts, self._stream_index(ev_value.info), ev_value.source_task]

    def _save_window(self, txid: int) -> None:
        st = self.state
        if st is None:
            return
        if self._reload:
            self._restore_window(st)
        wm, seqmap = self._wm, self._seq
        parts: dict[int, list] = {}
        prev = wm.prev_window
        prev_seqs: list[int] = []
        for ev in wm.queue:
            s = seqmap[id(ev.value)]
            rows = parts.get(s // PARTITION)
            if rows is None:
                rows = parts[s // PARTITION] = []
            rows.append((s, ev))
            if id(ev) in prev:
                prev_seqs.append(s)
        written = self._written
        for p, rows in parts.items():
            # Events only leave, or join with a new highest seq (anywhere in an event-time
            # queue, which is in timestamp order): this changes with either.
            sig = (len(rows), max(r[0] for r in rows))
            if written.get(p) != sig:
                st.put(_part_key(p), [self._row(s, ev.value, ev.ts) for s, ev in rows])
                written[p] = sig
        for p in [p for p in written if p not in parts]:
            st.delete(_part_key(p))
            del written[p]
        gen = self._wmgen
        st.put(WINDOW_KEY, {
            "format": FORMAT, "seq": self._next_seq, "parts": sorted(parts), "prev": _ranges(prev_seqs),
            "streams": self._stream_rows,
            "expired": [self._row(-1, t, 0) for t in wm.expired],
            "policies": wm.get_state(), "watermarks": None if gen is None else gen.get_state()})
        ack = self.ack
        for t in self._unsaved.values():
            ack(t)  # in this checkpoint now (Storm's protocol holds the ack until it commits)
        self._unsaved = {}

    def _restore_window(self, state: Any) -> None:
        """Load the window from ``state`` (start-up, or after a rollback): the queue in its live
        order, the last window's membership, what expired since it, the policies and watermarks."""
        self._reload = False
        wm = self._wm
        meta = state.get(WINDOW_KEY)
        self._seq, self._written = {}, {}
        self._streams, self._stream_rows = {}, []
        if meta is None:  # nothing checkpointed: an empty window, from the start
            wm.queue, wm.expired, wm.prev_window, wm.since_expiry = deque(), [], set(), 0
            self._next_seq = 0
            return
        if meta.get("format") != FORMAT:
            raise ValueError(f"{self._window_id}: window state format {meta.get('format')!r} is not {FORMAT} "
                             "(written by another version)")
        infos = [StreamInfo(-2, component, stream, fields) for component, stream, fields in meta["streams"]]
        for info in infos:
            self._stream_index(info)

        def tup(row: list) -> Tuple:
            return Tuple(list(row[1]), infos[row[3]], row[4], None)  # no tree: its ack was given at the checkpoint

        rows = []
        for p in meta["parts"]:
            part = state.get(_part_key(p)) or []
            rows.extend(part)
            if part:
                self._written[p] = (len(part), max(r[0] for r in part))
        # The live queue's order: arrival (seq), or timestamp then arrival on event time.
        rows.sort(key=(lambda r: (r[2], r[0])) if wm.ordered else (lambda r: r[0]))
        prev_ranges = meta["prev"]
        starts = [a for a, _ in prev_ranges]
        queue: deque[Event] = deque()
        prev: set[int] = set()
        seqmap = self._seq
        for row in rows:
            t = tup(row)
            ev = Event(t, row[2])
            queue.append(ev)
            s = row[0]
            seqmap[id(t)] = s
            i = bisect_right(starts, s) - 1
            if i >= 0 and s <= prev_ranges[i][1]:
                prev.add(id(ev))
        wm.queue, wm.prev_window, wm.since_expiry = queue, prev, 0
        wm.expired = [tup(r) for r in meta["expired"]]
        wm.restore_state(meta["policies"])
        if self._wmgen is not None and meta.get("watermarks") is not None:
            self._wmgen.restore_state(meta["watermarks"])
        self._next_seq = meta["seq"]
