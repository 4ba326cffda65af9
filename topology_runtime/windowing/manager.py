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

    def __init__(self, on_activation: OnActivation, on_expiry: OnExpiry) -> None:
        self.on_activation = on_activation
        self.on_expiry = on_expiry
        self.queue: deque[Event] = deque()
        self.expired: list = []  # expired since the last activation (the window's get_expired)
        self.prev_window: set[int] = set()  # ids of the events in the last window
        self.since_expiry = 0
        self.eviction: Any = None
        self.trigger: Any = None

    # --- feeding -----------------------------------------------------------------------------
    def add(self, value: Any, ts: int) -> Event:
        ev = Event(value, ts)
        self.queue.append(ev)
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

    m = WindowManager(on_activation, on_expiry)
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
    """Storm's WaterMarkEventGenerator without its thread: ``track`` each tuple's timestamp per
    input stream; ``compute()`` at every watermark interval returns a new watermark (the
    minimum over the inputs' latest timestamps, minus the lag) or None."""

    def __init__(self, lag_ms: int, input_streams: Iterable[Hashable]) -> None:
        self.lag = lag_ms
        self.inputs = set(input_streams)
        self.latest: dict[Hashable, int] = {}
        self.last_watermark = 0

    def track(self, stream: Hashable, ts: int) -> bool:
        """Record ``ts``; False when the tuple is late (older than the last watermark)."""
        cur = self.latest.get(stream)
        if cur is None or ts > cur:
            self.latest[stream] = ts
        return ts >= self.last_watermark

    def compute(self) -> int | None:
        # Only once every input stream has delivered something (min over the inputs).
        if len(self.latest) < len(self.inputs) or not self.latest:
            return None
        wm = min(self.latest.values()) - self.lag
        if wm > self.last_watermark:
            self.last_watermark = wm
            return wm
        return None

    def get_state(self) -> list:
        return [self.last_watermark, [[list(k) if isinstance(k, tuple) else k, v] for k, v in self.latest.items()]]

    def restore_state(self, state: list) -> None:
        self.last_watermark = state[0]
        self.latest = {tuple(k) if isinstance(k, list) else k: v for k, v in state[1]}
