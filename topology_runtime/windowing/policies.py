"""Window specs and Storm's eviction and trigger policies, as pure state machines.

Timestamps are integer milliseconds (Storm's ``long`` millis). Nothing here reads a clock,
starts a thread or does I/O: the time-driven policies advance only when the caller hands them
an explicit ``now`` (the bolt glue does so from the worker's tick tuples), which is also what
makes Storm's ``WindowManagerTest`` scenarios deterministic here.
"""

from __future__ import annotations

from typing import Any, Protocol

# What an eviction policy says about one event (Storm's EvictionPolicy.Action).
EXPIRE, PROCESS, KEEP, STOP = "EXPIRE", "PROCESS", "KEEP", "STOP"


class Count:
    """A window length or sliding interval in tuples."""

    __slots__ = ("value",)

    def __init__(self, value: int) -> None:
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"Count needs an integer >= 1, got {value!r}")
        self.value = value

    def __repr__(self) -> str:
        return f"Count({self.value})"

    def __eq__(self, other: object) -> bool:
        return type(other) is Count and other.value == self.value

    def __hash__(self) -> int:
        return hash(("Count", self.value))


class Duration:
    """A window length, sliding interval, lag or watermark interval in seconds (kept as ms)."""

    __slots__ = ("ms",)

    def __init__(self, seconds: float) -> None:
        if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or seconds <= 0:
            raise ValueError(f"Duration needs seconds > 0, got {seconds!r}")
        self.ms = max(1, round(seconds * 1000))

    @classmethod
    def of_ms(cls, ms: int) -> Duration:
        return cls(ms / 1000)

    @property
    def seconds(self) -> float:
        return self.ms / 1000

    def __repr__(self) -> str:
        return f"Duration({self.seconds:g})"

    def __eq__(self, other: object) -> bool:
        return type(other) is Duration and other.ms == self.ms

    def __hash__(self) -> int:
        return hash(("Duration", self.ms))


class Event:
    """One tuple (or any value) in a window with its timestamp; identity is the event."""

    __slots__ = ("value", "ts")

    def __init__(self, value: Any, ts: int) -> None:
        self.value = value
        self.ts = ts

    def __repr__(self) -> str:
        return f"Event({self.value!r}, {self.ts})"


class EvictionContext:
    __slots__ = ("reference_time", "current_count", "sliding_count", "sliding_interval")

    def __init__(self, reference_time: int, current_count: int | None = None, sliding_count: int | None = None,
                 sliding_interval: int | None = None) -> None:
        self.reference_time = reference_time
        self.current_count = current_count
        self.sliding_count = sliding_count
        self.sliding_interval = sliding_interval


class TriggerHandler(Protocol):
    def on_trigger(self) -> bool: ...


# --- eviction ------------------------------------------------------------------------------------


class CountEvictionPolicy:
    """Keep the last ``threshold`` events."""

    def __init__(self, threshold: int) -> None:
        self.threshold = threshold
        self.current = 0
        self.context: EvictionContext | None = None

    def evict(self, event: Event) -> str:
        if self.current > self.threshold:
            self.current -= 1
            return EXPIRE
        return PROCESS

    def track(self, event: Event) -> None:
        self.current += 1

    def set_context(self, context: EvictionContext) -> None:
        self.context = context

    def get_state(self) -> Any:
        return self.current

    def restore_state(self, state: Any) -> None:
        self.current = state


class TimeEvictionPolicy:
    """Keep events younger than the window length at the reference time (processing time)."""

    def __init__(self, length_ms: int) -> None:
        self.length = length_ms
        self.context: EvictionContext | None = None
        self.delta = 0

    def evict(self, event: Event) -> str:
        ctx = self.context
        if ctx is None:  # asked (by compaction) before the first trigger: keep everything
            return PROCESS
        diff = ctx.reference_time - event.ts
        if diff >= self.length + self.delta:
            return EXPIRE
        if diff < 0:  # not yet: newer than the reference time
            return KEEP
        return PROCESS

    def track(self, event: Event) -> None:
        pass

    def set_context(self, context: EvictionContext) -> None:
        prev, self.context = self.context, context
        # A trigger that fires late stretches the window by the lateness, so a tumbling window
        # drops nothing between evaluations (Storm's drift adjustment).
        if context.sliding_interval is not None:
            if prev is None:
                self.delta = 1 << 62  # the first window considers every event
            else:
                self.delta = context.reference_time - prev.reference_time - context.sliding_interval

    def get_state(self) -> Any:
        c = self.context
        return None if c is None else [c.reference_time, c.current_count, c.sliding_count, c.sliding_interval]

    def restore_state(self, state: Any) -> None:
        self.context = None if state is None else EvictionContext(*state)


class WatermarkCountEvictionPolicy:
    """Count eviction on event time: only events up to the watermark's reference time count."""

    def __init__(self, threshold: int) -> None:
        self.threshold = threshold
        self.current = 0
        self.processed = 0
        self.context: EvictionContext | None = None

    def evict(self, event: Event) -> str:
        if self.context is None:  # no watermark yet: decide nothing
            return STOP
        if event.ts <= self.context.reference_time and self.processed < self.current:
            if self.current > self.threshold:
                self.current -= 1
                return EXPIRE
            self.processed += 1
            return PROCESS
        return KEEP

    def track(self, event: Event) -> None:
        pass

    def set_context(self, context: EvictionContext) -> None:
        self.context = context
        if context.current_count is not None:
            self.current = context.current_count
        else:
            self.current = self.processed + (context.sliding_count or 0)
        self.processed = 0

    def reset(self) -> None:
        self.processed = 0

    def get_state(self) -> Any:
        return [self.current, self.processed]

    def restore_state(self, state: Any) -> None:
        self.current, self.processed = state


class WatermarkTimeEvictionPolicy(TimeEvictionPolicy):
    """Time eviction on event time; events more than ``lag`` past the reference stop the scan."""

    def __init__(self, length_ms: int, lag_ms: int = 1 << 62) -> None:
        super().__init__(length_ms)
        self.lag = lag_ms

    def evict(self, event: Event) -> str:
        ctx = self.context
        if ctx is None:
            return STOP
        diff = ctx.reference_time - event.ts
        if diff < -self.lag:
            return STOP
        if diff < 0:
            return KEEP
        return super().evict(event)


# --- triggers ------------------------------------------------------------------------------------


class CountTriggerPolicy:
    """Fire every ``count`` events (processing time)."""

    def __init__(self, count: int, handler: TriggerHandler, eviction: Any) -> None:
        self.count = count
        self.handler = handler
        self.eviction = eviction
        self.current = 0
        self.started = False

    def track(self, event: Event) -> None:
        if self.started:
            self.current += 1
            if self.current >= self.count:
                self.eviction.set_context(EvictionContext(event.ts))
                self.handler.on_trigger()

    def advance(self, now: int) -> None:
        pass

    def reset(self) -> None:
        self.current = 0

    def start(self, now: int = 0) -> None:
        self.started = True

    def get_state(self) -> Any:
        return self.current

    def restore_state(self, state: Any) -> None:
        self.current = state


class TimeTriggerPolicy:
    """Fire every ``duration`` ms of processing time. Storm runs a scheduler thread; here the
    owner calls ``advance(now)`` (from ticks) and the policy fires once when a firing is due."""

    def __init__(self, duration_ms: int, handler: TriggerHandler, eviction: Any = None) -> None:
        self.duration = duration_ms
        self.handler = handler
        self.eviction = eviction
        self.next_fire: int | None = None

    def track(self, event: Event) -> None:
        pass

    def reset(self) -> None:
        pass

    def start(self, now: int = 0) -> None:
        self.next_fire = now + self.duration

    def advance(self, now: int) -> bool:
        if self.next_fire is None or now < self.next_fire:
            return False
        # Skip firings missed while the loop was busy: one evaluation covers them (the eviction
        # policy's drift adjustment widens that window to match).
        while self.next_fire <= now:
            self.next_fire += self.duration
        if self.eviction is not None:
            # Tuples stamped "now" may still arrive: this window ends just before it (as Storm).
            self.eviction.set_context(EvictionContext(now - 1, None, None, self.duration))
        self.handler.on_trigger()
        return True

    def fire(self, now: int) -> bool:
        """Evaluate the window ending at ``now`` whether or not a firing is due (end of input:
        no tuple can arrive any more, so ``now`` itself is in)."""
        if self.eviction is not None:
            self.eviction.set_context(EvictionContext(now, None, None, self.duration))
        self.next_fire = now + self.duration
        return self.handler.on_trigger()

    def get_state(self) -> Any:
        return None

    def restore_state(self, state: Any) -> None:
        pass


class WatermarkCountTriggerPolicy:
    """Fire every ``count`` events of event time, as watermarks make them final."""

    def __init__(self, count: int, handler: TriggerHandler, eviction: Any, manager: Any) -> None:
        self.count = count
        self.handler = handler
        self.eviction = eviction
        self.manager = manager
        self.last_processed_ts = 0
        self.started = False

    def track(self, event: Event | None, watermark: int | None = None) -> None:
        if self.started and watermark is not None:
            for ts in self.manager.sliding_count_timestamps(self.last_processed_ts, watermark, self.count):
                self.eviction.set_context(EvictionContext(ts, None, self.count))
                self.handler.on_trigger()
                self.last_processed_ts = ts

    def advance(self, now: int) -> None:
        pass

    def reset(self) -> None:
        pass

    def start(self, now: int = 0) -> None:
        self.started = True

    def get_state(self) -> Any:
        return self.last_processed_ts

    def restore_state(self, state: Any) -> None:
        self.last_processed_ts = state


class WatermarkTimeTriggerPolicy:
    """Fire for every sliding-interval boundary the watermark has passed; empty stretches are
    skipped to the next boundary that has events (Storm's aligned windows)."""

    def __init__(self, sliding_ms: int, handler: TriggerHandler, eviction: Any, manager: Any) -> None:
        self.sliding = sliding_ms
        self.handler = handler
        self.eviction = eviction
        self.manager = manager
        self.next_window_end = 0
        self.started = False

    def track(self, event: Event | None, watermark: int | None = None) -> None:
        if not (self.started and watermark is not None):
            return
        end = self.next_window_end
        while end <= watermark:
            self.eviction.set_context(EvictionContext(end, self.manager.event_count(end)))
            if self.handler.on_trigger():
                end += self.sliding
            else:
                # Nothing in this window: jump to the first boundary holding an event.
                nxt = self.manager.earliest_event_ts(end, watermark)
                if nxt is None:
                    break
                end = nxt if nxt % self.sliding == 0 else nxt + self.sliding - nxt % self.sliding
        self.next_window_end = end

    def advance(self, now: int) -> None:
        pass

    def reset(self) -> None:
        pass

    def start(self, now: int = 0) -> None:
        self.started = True

    def get_state(self) -> Any:
        return self.next_window_end

    def restore_state(self, state: Any) -> None:
        self.next_window_end = state
