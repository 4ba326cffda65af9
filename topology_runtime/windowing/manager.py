"""Storm's WindowManager and WaterMarkEventGenerator as pure state machines.

The manager keeps events in arrival order; an eviction policy decides, per scan, which expire,
which belong to the window being evaluated and which wait (newer than the reference time, or
out of order within the lag). A trigger policy decides when to evaluate. Expiry is batched:
besides every evaluation, a cheap partial scan runs every ``EXPIRE_EVENTS_THRESHOLD`` events.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Hashable, Iterable
from typing import Any

from .policies import (
    EXPIRE,
    PROCESS,
    STOP,
    CountEvictionPolicy,
    CountTriggerPolicy,
    Event,
    TimeEvictionPolicy,
    TimeTriggerPolicy,
    WatermarkCountEvictionPolicy,
    WatermarkCountTriggerPolicy,
    WatermarkTimeEvictionPolicy,
    WatermarkTimeTriggerPolicy,
)

EXPIRE_EVENTS_THRESHOLD = 100

# on_activation(events, new_events, expired_events, reference_time)
OnActivation = Callable[[list, list, list, int], None]
OnExpiry = Callable[[list], None]


class WindowManager:
    """Holds the events of one windowed task and evaluates windows when its trigger fires.

    ``on_expiry(values)`` is called as values leave the window for good (the glue acks them);
    ``on_activation(values, new, expired, reference_ts)`` for each non-empty window."""

    def __init__(self, on_activation: OnActivation, on_expiry: OnExpiry, ordered: bool = False) -> None:
        self.on_activation = on_activation
        self.on_expiry = on_expiry
        # Event time: the queue is kept in timestamp order (stable for equal timestamps). The
        # eviction scan stops at the first event past the reference time plus the lag, which is
        # only sound if nothing older sits behind it; tuples from parallel upstream tasks arrive
        # interleaved and out of order, and an arrival-ordered queue hid them from every window.
        self.ordered = ordered
        self.queue: deque[Event] = deque()
        self.expired: list = []  # expired since the last activation (the window's get_expired)
        self.prev_window: set[int] = set()  # ids of the events in the last window
        self.since_expiry = 0
        self.eviction: Any = None
        self.trigger: Any = None

    # --- feeding -----------------------------------------------------------------------------
    def add(self, value: Any, ts: int) -> Event:
        ev = Event(value, ts)
        q = self.queue
        if self.ordered and q and q[-1].ts > ts:
            # Out of order: walk back from the tail (the distance is the skew between upstream
            # tasks, not the window's size); deque.insert near the tail costs that distance too.
            back = 0
            for e in reversed(q):
                if e.ts <= ts:
                    break
                back += 1
            q.insert(len(q) - back, ev)
        else:
            q.append(ev)
        self.eviction.track(ev)
        self.trigger.track(ev)
        self.since_expiry += 1
        if self.since_expiry >= EXPIRE_EVENTS_THRESHOLD:
            self._scan(False)
        return ev

    def add_watermark(self, ts: int) -> None:
        """A watermark: every event up to ``ts`` has arrived; event-time triggers fire."""
        self.trigger.track(None, ts)
        self.since_expiry += 1
        if self.since_expiry >= EXPIRE_EVENTS_THRESHOLD:
            self._scan(False)

    def advance(self, now: int) -> None:
        """Processing time has reached ``now`` (ms): a time trigger may fire."""
        self.trigger.advance(now)

    # --- TriggerHandler ------------------------------------------------------------------------
    def on_trigger(self) -> bool:
        window = self._scan(True)
        expired, self.expired = self.expired, []
        prev = self.prev_window
        values = [e.value for e in window]
        new = [e.value for e in window if id(e) not in prev]
        self.prev_window = {id(e) for e in window}
        if values:
            self.on_activation(values, new, expired, self.eviction.context.reference_time)
        self.trigger.reset()  # Storm resets only the trigger here
        return bool(values)

    def _scan(self, full: bool) -> list[Event]:
        expire: list = []
        window: list[Event] = []
        evict = self.eviction.evict
        q = self.queue
        # Iterate, never index: a deque's q[i] walks its blocks (O(n) in the middle), which made
        # a full scan quadratic in the window's size. Expired events are mostly a prefix of the
        # queue (popped in place); removal elsewhere rebuilds the deque once.
        prefix = True  # every event seen so far expired
        scattered = False
        for ev in q:
            action = evict(ev)
            if action == EXPIRE:
                expire.append(ev)
                if not prefix:
                    scattered = True
                continue
            prefix = False
            if not full or action == STOP:
                break
            if action == PROCESS:
                window.append(ev)
        self.since_expiry = 0
        if expire:
            if scattered:
                gone = {id(e) for e in expire}
                self.queue = deque(e for e in q if id(e) not in gone)
            else:
                popleft = q.popleft
                for _ in range(len(expire)):
                    popleft()
            vals = [e.value for e in expire]
            self.expired.extend(vals)
            self.prev_window.difference_update(map(id, expire))
            self.on_expiry(vals)
        return window

    def discard(self, values: Iterable[Any]) -> None:
        """Drop these values from the window (their evaluation failed: they were failed and
        will be replayed), without calling ``on_expiry``."""
        drop = {id(v) for v in values}
        kept = [e for e in self.queue if id(e.value) not in drop]
        self.queue = deque(kept)
        self.prev_window = {id(e) for e in kept if id(e) in self.prev_window}
        ev = self.eviction
        if isinstance(ev, CountEvictionPolicy):
            ev.current = len(kept)

    def drain(self) -> tuple[list, list]:
        """Empty the window for good (end of input, after the last evaluation): every value
        leaves through ``on_expiry``. Returns (values that were in an evaluated window, values
        that never were: a count window's partial tail)."""
        prev = self.prev_window
        q = self.queue
        seen = [e.value for e in q if id(e) in prev]
        never = [e.value for e in q if id(e) not in prev]
        self.queue = deque()
        self.prev_window = set()
        self.since_expiry = 0
        ev = self.eviction
        if isinstance(ev, CountEvictionPolicy):
            ev.current = 0
        elif isinstance(ev, WatermarkCountEvictionPolicy):
            ev.current = ev.processed = 0
        if seen or never:
            self.on_expiry(seen + never)
        return seen, never

    def fire(self, now: int) -> bool:
        """Processing time: evaluate the window ending at ``now`` at once (end of input)."""
        fire = getattr(self.trigger, "fire", None)
        return bool(fire(now)) if fire is not None else False

    # --- what event-time triggers ask ------------------------------------------------------------
    def earliest_event_ts(self, start: int, end: int) -> int | None:
        ts = [e.ts for e in self.queue if start < e.ts <= end]
        return min(ts) if ts else None

    def event_count(self, reference: int) -> int:
        return sum(1 for e in self.queue if e.ts <= reference)

    def sliding_count_timestamps(self, start: int, end: int, sliding: int) -> list[int]:
        out: list[int] = []
        if end > start:
            count = 0
            top = None
            for e in self.queue:
                if start < e.ts <= end:
                    top = e.ts if top is None else max(top, e.ts)
                    count += 1
                    if count % sliding == 0:
                        out.append(top)
        return out

    # --- checkpointed form ----------------------------------------------------------------------
    def get_state(self) -> dict:
        return {"es": self.eviction.get_state(), "ts": self.trigger.get_state()}

    def restore_state(self, state: dict) -> None:
        if state.get("es") is not None:
            self.eviction.restore_state(state["es"])
        if state.get("ts") is not None:
            self.trigger.restore_state(state["ts"])


def build_manager(length: Any, sliding: Any, event_time: bool, lag_ms: int,
                  on_activation: OnActivation, on_expiry: OnExpiry, now: int = 0) -> WindowManager:
    """The manager for ``with_window(length, sliding)``, with Storm's choice of policies:
    count or time eviction by the length, count or time trigger by the sliding interval, each
    in its watermark form when the bolt uses event time. Started at ``now`` (ms)."""
    from .policies import Count

    m = WindowManager(on_activation, on_expiry, ordered=event_time)
    if isinstance(length, Count):
        m.eviction = WatermarkCountEvictionPolicy(length.value) if event_time else CountEvictionPolicy(length.value)
    else:
        m.eviction = WatermarkTimeEvictionPolicy(length.ms, lag_ms) if event_time else TimeEvictionPolicy(length.ms)
    if isinstance(sliding, Count):
        m.trigger = (WatermarkCountTriggerPolicy(sliding.value, m, m.eviction, m) if event_time
                     else CountTriggerPolicy(sliding.value, m, m.eviction))
    else:
        m.trigger = (WatermarkTimeTriggerPolicy(sliding.ms, m, m.eviction, m) if event_time
                     else TimeTriggerPolicy(sliding.ms, m, m.eviction))
    m.trigger.start(now)
    return m


class WatermarkGenerator:
    """Storm's WaterMarkEventGenerator without its thread, with Flink's per-channel rule: the
    watermark is the minimum, over the upstream *tasks*, of the latest timestamp each delivered,
    minus the lag. Taking the minimum over streams instead let one fast task of a parallel
    upstream bolt push the watermark past what its slower sibling had still to send.

    An upstream task that delivered nothing for ``idle_ms`` of wall-clock time is idle and left
    out of the minimum until it delivers again (else a task that gets no data, e.g. under a
    fields grouping, would hold every window back for ever); what it then sends at or before
    the watermark is late. When every task is idle the watermark stays where it is.

    ``track`` is called per tuple (no clock read); ``compute(now)`` at every watermark interval
    returns a new watermark or None. A tuple is late when its timestamp is at or before the
    last watermark: every window it could belong to may have been evaluated already."""

    def __init__(self, lag_ms: int, upstream_tasks: Iterable[Hashable], idle_ms: int, now: int = 0) -> None:
        self.lag = lag_ms
        self.idle = idle_ms
        self.tasks = set(upstream_tasks)
        self.latest: dict[Hashable, int] = {}
        self.heard: set[Hashable] = set()  # tasks that delivered since the last compute
        self.last_active: dict[Hashable, int] = dict.fromkeys(self.tasks, now)
        self.last_watermark: int | None = None

    def track(self, task: Hashable, ts: int) -> bool:
        """Record ``ts`` from upstream ``task``; False when the tuple is late."""
        cur = self.latest.get(task)
        if cur is None or ts > cur:
            self.latest[task] = ts
        self.heard.add(task)
        last = self.last_watermark
        return last is None or ts > last

    def active_tasks(self, now: int) -> list[Hashable]:
        """The upstream tasks that count for the watermark at ``now`` (not idle)."""
        active = self.last_active
        for t in self.heard:
            active[t] = now
        self.heard.clear()
        return [t for t in self.tasks if now - active[t] < self.idle]

    def compute(self, now: int) -> int | None:
        tasks = self.active_tasks(now)
        if not tasks:
            return None  # everyone idle: nothing tells how far event time got
        latest = self.latest
        if any(t not in latest for t in tasks):
            return None  # an active task has not delivered yet: it may still send anything
        wm = min(latest[t] for t in tasks) - self.lag
        last = self.last_watermark
        if last is None or wm > last:
            self.last_watermark = wm
            return wm
        return None

    def close(self, ts: int) -> None:
        """End of input: the watermark is at least ``ts`` (the newest event held)."""
        last = self.last_watermark
        if last is None or ts > last:
            self.last_watermark = ts

    def get_state(self) -> list:
        return [self.last_watermark, [[k, v] for k, v in self.latest.items()]]

    def restore_state(self, state: list) -> None:
        # Upstream tasks that no longer exist (another parallelism) are dropped.
        self.last_watermark = state[0]
        self.latest = {k: v for k, v in state[1] if k in self.tasks}
