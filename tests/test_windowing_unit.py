"""The pure window manager, policies and watermark generator: the scenarios of Storm's
WindowManagerTest and WaterMarkEventGeneratorTest, with explicit timestamps (no clock)."""

from __future__ import annotations

import pytest

from topology_runtime.windowing import Count, Duration
from topology_runtime.windowing.manager import EXPIRE_EVENTS_THRESHOLD, WatermarkGenerator, WindowManager, build_manager
from topology_runtime.windowing.policies import (
    CountEvictionPolicy,
    CountTriggerPolicy,
    EvictionContext,
    TimeEvictionPolicy,
    TimeTriggerPolicy,
    WatermarkCountEvictionPolicy,
    WatermarkCountTriggerPolicy,
    WatermarkTimeEvictionPolicy,
    WatermarkTimeTriggerPolicy,
)

DAY = 86_400_000


def seq(a, b=None):
    return list(range(a, (a if b is None else b) + 1))


class Listener:
    def __init__(self):
        self.clear()

    def clear(self):
        self.expiry, self.events, self.new, self.expired = [], [], [], []
        self.all_events, self.all_new, self.all_expired, self.all_expiry, self.refs = [], [], [], [], []

    def on_expiry(self, vals):
        self.expiry = list(vals)
        self.all_expiry.append(list(vals))

    def on_activation(self, events, new, expired, ref):
        self.events, self.new, self.expired = events, new, expired
        self.all_events.append(events)
        self.all_new.append(new)
        self.all_expired.append(expired)
        self.refs.append(ref)


@pytest.fixture
def lis():
    return Listener()


def manager(lis, eviction, trigger_factory, now=0):
    m = WindowManager(lis.on_activation, lis.on_expiry)
    m.eviction = eviction
    m.trigger = trigger_factory(m)
    m.trigger.start(now)
    return m


def test_count_based_window(lis):
    ev = CountEvictionPolicy(5)
    m = manager(lis, ev, lambda m: CountTriggerPolicy(2, m, ev))
    m.add(1, 1)
    m.add(2, 2)
    assert lis.expiry == [] and lis.events == seq(1, 2) and lis.new == seq(1, 2) and lis.expired == []
    m.add(3, 3)
    m.add(4, 4)
    assert lis.expiry == [] and lis.events == seq(1, 4) and lis.new == seq(3, 4) and lis.expired == []
    m.add(5, 5)
    m.add(6, 6)
    assert lis.expiry == [1] and lis.events == seq(2, 6) and lis.new == seq(5, 6) and lis.expired == [1]
    lis.clear()
    m.add(7, 7)
    assert lis.expiry == []
    m.add(8, 8)
    assert lis.expiry == seq(2, 3) and lis.events == seq(4, 8) and lis.new == seq(7, 8) and lis.expired == seq(2, 3)


def test_expire_threshold_batches_expiry(lis):
    ev = CountEvictionPolicy(5)
    m = manager(lis, ev, lambda m: TimeTriggerPolicy(DAY, m))
    for i in seq(1, 10):
        m.add(i, i)
    assert lis.all_expiry == []  # nothing scanned before the threshold: no per-tuple work
    for i in seq(11, EXPIRE_EVENTS_THRESHOLD):
        m.add(i, i)
    assert lis.expiry == seq(1, EXPIRE_EVENTS_THRESHOLD - 5)


@pytest.mark.parametrize("eviction", ["count", "time"])
def test_watermark_eviction_waits_for_the_first_watermark(lis, eviction):
    length = EXPIRE_EVENTS_THRESHOLD
    ev = WatermarkCountEvictionPolicy(length) if eviction == "count" else WatermarkTimeEvictionPolicy(length)
    m = manager(lis, ev, lambda m: WatermarkCountTriggerPolicy(length, m, ev, m))
    for i in seq(1, EXPIRE_EVENTS_THRESHOLD):
        m.add(i, i)
    assert lis.all_expiry == []
    m.add_watermark(EXPIRE_EVENTS_THRESHOLD)
    assert lis.events == seq(1, EXPIRE_EVENTS_THRESHOLD)
    for i in seq(EXPIRE_EVENTS_THRESHOLD + 1, 2 * EXPIRE_EVENTS_THRESHOLD):
        m.add(i, i)
    m.add_watermark(EXPIRE_EVENTS_THRESHOLD + length + 1)
    assert sum(lis.all_expiry, []) == seq(1, EXPIRE_EVENTS_THRESHOLD)


def test_time_based_window(lis):
    ev = TimeEvictionPolicy(1000)
    m = manager(lis, ev, lambda m: TimeTriggerPolicy(DAY, m, ev))
    now = 1_700_000_000_000
    for i in seq(1, 50):
        m.add(i, now - 1000)
    for i in seq(51, EXPIRE_EVENTS_THRESHOLD):
        m.add(i, now)
    # Before any trigger the time policy has no reference: Storm uses the wall clock there;
    # give it the same reference explicitly.
    ev.set_context(EvictionContext(now))
    m._scan(False)
    assert len(lis.expiry) == 50
    for i in seq(EXPIRE_EVENTS_THRESHOLD + 1, EXPIRE_EVENTS_THRESHOLD + 100):
        m.add(i, now - 1000)
    ev.set_context(EvictionContext(now + 100))
    m.on_trigger()
    assert lis.expiry == seq(EXPIRE_EVENTS_THRESHOLD + 1, EXPIRE_EVENTS_THRESHOLD + 100)
    activation = seq(51, EXPIRE_EVENTS_THRESHOLD)
    assert lis.events == activation and lis.new == activation
    assert lis.expired == seq(1, 50) + seq(EXPIRE_EVENTS_THRESHOLD + 1, EXPIRE_EVENTS_THRESHOLD + 100)
    lis.clear()
    new = seq(EXPIRE_EVENTS_THRESHOLD + 101, EXPIRE_EVENTS_THRESHOLD + 200)
    for i in new:
        m.add(i, now)
    ev.set_context(EvictionContext(now + 200))
    m.on_trigger()
    assert lis.expiry == [] and lis.events == activation + new and lis.new == new


def test_time_based_window_expiry(lis):
    ev = TimeEvictionPolicy(100)
    m = manager(lis, ev, lambda m: TimeTriggerPolicy(DAY, m))
    now = 1_000_000
    for i in seq(1, 10):
        m.add(i, now)
    ev.set_context(EvictionContext(now + 60))
    m.on_trigger()
    assert lis.events == seq(1, 10) and lis.expired == []
    lis.clear()
    ev.set_context(EvictionContext(now + 120))
    m.on_trigger()
    assert lis.expiry == seq(1, 10) and lis.all_events == []
    lis.clear()
    ev.set_context(EvictionContext(now + 180))
    m.on_trigger()
    assert lis.all_events == [] and lis.all_expiry == []


def test_tumbling_count_window(lis):
    ev = CountEvictionPolicy(3)
    m = manager(lis, ev, lambda m: CountTriggerPolicy(3, m, ev))
    m.add(1, 1)
    m.add(2, 2)
    assert lis.all_events == []
    m.add(3, 3)
    assert lis.expiry == [] and lis.events == seq(1, 3) and lis.new == seq(1, 3) and lis.expired == []
    lis.clear()
    for i in (4, 5, 6):
        m.add(i, i)
    assert lis.expiry == seq(1, 3) and lis.events == seq(4, 6) and lis.expired == seq(1, 3) and lis.new == seq(4, 6)


def event_time(lis, eviction, trigger):
    return manager(lis, eviction, lambda m: trigger(m, eviction))


def test_event_time_based_window(lis):
    m = event_time(lis, WatermarkTimeEvictionPolicy(20), lambda m, ev: WatermarkTimeTriggerPolicy(10, m, ev, m))
    for v, ts in ((1, 603), (2, 605), (3, 607)):
        m.add(v, ts)
    m.add_watermark(609)
    assert lis.all_events == []
    for v, ts in ((4, 618), (5, 626), (6, 636)):
        m.add(v, ts)
    m.add_watermark(631)
    assert lis.all_events == [seq(1, 3), seq(1, 4), seq(4, 5)]
    assert lis.all_expired == [[], [], seq(1, 3)]
    assert lis.all_new == [seq(1, 3), [4], [5]]
    assert lis.all_expiry[0] == seq(1, 3)
    assert lis.refs == [610, 620, 630]
    for v, ts in ((7, 825), (8, 826), (9, 827), (10, 839)):
        m.add(v, ts)
    lis.clear()
    m.add_watermark(834)
    assert lis.all_events == [seq(5, 6), [6], seq(7, 9)]
    assert lis.all_expired == [[4], [5], []]
    assert lis.all_new == [[6], [], seq(7, 9)]
    assert lis.all_expiry == [[4], [5], [6]]


def test_count_window_with_event_ts(lis):
    m = event_time(lis, WatermarkCountEvictionPolicy(3), lambda m, ev: WatermarkTimeTriggerPolicy(10, m, ev, m))
    for v, ts in ((1, 603), (2, 605), (3, 607), (4, 618), (5, 626), (6, 636)):
        m.add(v, ts)
    m.add_watermark(631)
    assert lis.all_events == [seq(1, 3), seq(2, 4), seq(3, 5)]
    for v, ts in ((7, 665), (8, 666), (9, 667), (10, 679)):
        m.add(v, ts)
    lis.clear()
    m.add_watermark(674)
    assert lis.all_events == [seq(4, 6), seq(4, 6), seq(4, 6), seq(7, 9)]


def test_count_trigger_with_event_ts(lis):
    m = event_time(lis, WatermarkTimeEvictionPolicy(20), lambda m, ev: WatermarkCountTriggerPolicy(3, m, ev, m))
    for v, ts in ((1, 603), (2, 605), (3, 607), (4, 618), (5, 625), (6, 626), (7, 629), (8, 636)):
        m.add(v, ts)
    m.add_watermark(631)
    assert lis.all_events == [seq(1, 3), seq(3, 6)]
    for v, ts in ((9, 665), (10, 666), (11, 667), (12, 669), (12, 679)):
        m.add(v, ts)
    lis.clear()
    m.add_watermark(674)
    assert lis.all_events == [[9], seq(9, 12)]


@pytest.mark.parametrize("length,expected", [
    (2, [seq(1, 2), seq(3, 4), seq(5, 6), seq(7, 8), seq(9, 10)]),       # tumbling
    (5, [seq(1, 2), seq(1, 4), seq(2, 6), seq(4, 8), seq(6, 10)]),       # sliding
])
def test_count_windows_with_same_event_ts(lis, length, expected):
    m = event_time(lis, WatermarkCountEvictionPolicy(length), lambda m, ev: WatermarkCountTriggerPolicy(2, m, ev, m))
    for v, ts in zip(seq(1, 10), (10, 10, 11, 12, 12, 12, 12, 13, 14, 15), strict=True):
        m.add(v, ts)
    m.add_watermark(20)
    assert lis.all_events == expected


def test_event_time_lag_places_out_of_order_tuples(lis):
    m = event_time(lis, WatermarkTimeEvictionPolicy(20, 5), lambda m, ev: WatermarkTimeTriggerPolicy(10, m, ev, m))
    for v, ts in ((1, 603), (2, 605), (3, 607), (4, 618), (5, 626), (6, 632), (7, 629), (8, 636)):
        m.add(v, ts)
    m.add_watermark(631)
    # 7 (ts 629) arrived after 6 (ts 632) yet is in the window ending at 630; 6 is not.
    assert lis.all_events == [seq(1, 3), seq(1, 4), [4, 5, 7]]


def test_scan_stops_past_the_lag(lis):
    scanned = set()

    class Spy(WatermarkTimeEvictionPolicy):
        def evict(self, event):
            scanned.add(event.value)
            return super().evict(event)

    m = event_time(lis, Spy(20, 5), lambda m, ev: WatermarkTimeTriggerPolicy(10, m, ev, m))
    for v, ts in zip(seq(1, 10), (603, 605, 607, 618, 626, 629, 636, 637, 638, 639), strict=True):
        m.add(v, ts)
    m.add_watermark(631)
    assert lis.all_events == [seq(1, 3), seq(1, 4), [4, 5, 6]]
    assert scanned == set(seq(1, 7))


def test_processing_time_trigger_fires_from_explicit_now(lis):
    m = build_manager(Duration(1), Duration(0.5), False, 0, lis.on_activation, lis.on_expiry, now=10_000)
    m.add("a", 10_100)
    m.advance(10_400)
    assert lis.all_events == []
    m.advance(10_500)
    assert lis.all_events == [["a"]] and lis.refs == [10_499]
    m.add("b", 10_700)
    m.advance(11_000)
    assert lis.all_events[-1] == ["a", "b"]
    m.advance(11_520)  # a late tick: the window widens by the lateness (drift) instead of losing tuples
    assert lis.all_events[-1] == ["b"] and lis.all_expiry == [["a"]]
    m.advance(12_000)
    assert lis.all_expiry[-1] == ["b"]


def test_tumbling_duration_window_evaluates_each_tuple_once(lis):
    m = build_manager(Duration(0.2), Duration(0.2), False, 0, lis.on_activation, lis.on_expiry, now=0)
    seen = []
    t = 0
    for i in range(100):
        t += 7
        m.add(i, t)
        if t % 20 < 7:
            m.advance(t)
    m.advance(t + 400)
    for w in lis.all_events:
        seen.extend(w)
    assert sorted(seen) == list(range(100))


def test_build_manager_picks_storms_policies():
    m = build_manager(Count(3), Count(1), True, 5, lambda *a: None, lambda v: None)
    assert isinstance(m.eviction, WatermarkCountEvictionPolicy) and isinstance(m.trigger, WatermarkCountTriggerPolicy)
    m = build_manager(Duration(2), Count(2), False, 0, lambda *a: None, lambda v: None)
    assert isinstance(m.eviction, TimeEvictionPolicy) and isinstance(m.trigger, CountTriggerPolicy)


def test_discard_drops_failed_values(lis):
    ev = CountEvictionPolicy(4)
    m = manager(lis, ev, lambda m: CountTriggerPolicy(2, m, ev))
    for i in seq(1, 4):
        m.add(i, i)
    m.discard([3, 4])
    m.add(5, 5)
    m.add(6, 6)
    assert lis.events == [1, 2, 5, 6] and lis.new == [5, 6]


# --- WaterMarkEventGeneratorTest --------------------------------------------------------------


def test_watermark_single_task():
    g = WatermarkGenerator(5, [1], idle_ms=1000)
    g.track(1, 100)
    g.track(1, 110)
    assert g.compute(0) == 105


def test_watermark_single_task_out_of_order():
    g = WatermarkGenerator(5, [1], idle_ms=1000)
    for ts in (100, 110, 104):
        g.track(1, ts)
    assert g.compute(0) == 105


def test_watermark_is_the_minimum_over_upstream_tasks():
    g = WatermarkGenerator(5, [1, 2], idle_ms=1000)
    g.track(1, 100)
    g.track(1, 110)
    assert g.compute(0) is None  # task 2 has said nothing yet
    g.track(2, 95)
    g.track(2, 98)
    assert g.compute(10) == 93


def test_a_fast_task_cannot_make_its_slower_siblings_tuples_late():
    # Two tasks of one upstream bolt on one stream: the fast one is 3 s of event time ahead.
    g = WatermarkGenerator(100, [1, 2], idle_ms=10_000)
    for ts in range(0, 5000, 10):
        g.track(1, ts)
    for ts in range(0, 2000, 10):
        g.track(2, ts)
    assert g.compute(0) == 1990 - 100  # the slow task's progress, not the fast one's
    assert all(g.track(2, ts) for ts in range(2000, 5000, 10))  # none of the slow task's rest is late


def test_an_idle_task_stops_holding_the_watermark_back():
    g = WatermarkGenerator(0, [1, 2], idle_ms=1000, now=0)
    g.track(1, 500)
    assert g.compute(100) is None  # task 2 may still send anything
    g.track(1, 800)
    assert g.compute(1100) == 800  # task 2 idle for 1 s: left out
    g.track(2, 700)  # it speaks again: behind the watermark, late
    assert g.compute(1200) is None  # back in the minimum (700 < 800: no progress)
    g.track(1, 900)
    g.track(2, 950)
    assert g.compute(1300) == 900


def test_all_tasks_idle_keeps_the_watermark():
    g = WatermarkGenerator(0, [1], idle_ms=100, now=0)
    g.track(1, 50)
    assert g.compute(10) == 50
    assert g.compute(500) is None and g.last_watermark == 50


def test_watermark_no_events():
    assert WatermarkGenerator(5, [1], idle_ms=1000).compute(0) is None


def test_watermark_late_event():
    g = WatermarkGenerator(5, [1], idle_ms=1000)
    assert g.track(1, 100) and g.track(1, 110)
    assert g.compute(0) == 105
    for ts in (106, 115):
        assert g.track(1, ts)
    # At or before the watermark: its window (which ends at or before it) may have been evaluated.
    assert not g.track(1, 105) and not g.track(1, 104)
    assert g.compute(0) == 110
    assert g.compute(0) is None  # no progress, no new watermark


def test_watermark_state_round_trips():
    g = WatermarkGenerator(5, [1, 2], idle_ms=1000)
    g.track(1, 100)
    g.track(2, 100)
    g.compute(0)
    h = WatermarkGenerator(5, [1, 3], idle_ms=1000)  # upstream task 2 is gone in the new plan
    h.restore_state(g.get_state())
    assert h.last_watermark == 95 and not h.track(1, 90) and h.latest == {1: 100}


# --- what Storm's arrival-ordered queue lost ----------------------------------------------------


def test_interleaved_upstream_tasks_every_event_in_its_window(lis):
    """Two upstream tasks 10 ms of event time apart per event, the second a little behind: their
    tuples arrive interleaved and out of order. Every event lands in its tumbling window (an
    arrival-ordered queue stopped its scan at a fast task's tuple and expired the slow one's
    later, unevaluated)."""
    m = build_manager(Duration(5), Duration(5), True, 1000, lis.on_activation, lis.on_expiry)
    gen = WatermarkGenerator(1000, [1, 2], idle_ms=10_000)
    events = [(i, i * 10) for i in range(3000)]
    fast = [e for e in events if e[0] % 2 == 0]
    slow = [e for e in events if e[0] % 2 == 1]
    now = 0
    while fast or slow:
        for _ in range(30):  # the fast task sends 30 for the slow one's 20
            if fast:
                v, ts = fast.pop(0)
                assert gen.track(1, ts)
                m.add(v, ts)
        for _ in range(20):
            if slow:
                v, ts = slow.pop(0)
                assert gen.track(2, ts), "a slow task's tuple became late"
                m.add(v, ts)
        now += 10
        mark = gen.compute(now)
        if mark is not None:
            m.add_watermark(mark)
    m.add_watermark(1 << 62)
    counted = sorted(v for w in lis.all_events for v in w)
    assert counted == list(range(3000))
    # Windows cover (end - 5000, end]: each holds exactly the events of its span.
    assert [len(w) for w in lis.all_events] == [
        sum(1 for _, ts in events if end - 5000 < ts <= end) for end in lis.refs]
    assert lis.refs == list(range(0, 30_001, 5000))


def test_ordered_queue_inserts_by_timestamp_stably():
    m = build_manager(Duration(1), Duration(1), True, 0, lambda *a: None, lambda v: None)
    for v, ts in (("a", 10), ("b", 30), ("c", 20), ("d", 30), ("e", 5), ("f", 20)):
        m.add(v, ts)
    assert [(e.value, e.ts) for e in m.queue] == [("e", 5), ("a", 10), ("c", 20), ("f", 20), ("b", 30), ("d", 30)]


def test_drain_separates_evaluated_from_never_evaluated(lis):
    ev = CountEvictionPolicy(5)
    m = manager(lis, ev, lambda m: CountTriggerPolicy(5, m, ev))
    for i in range(23):
        m.add(i, i)
    seen, never = m.drain()
    assert seen == seq(15, 19) and never == [20, 21, 22]
    assert list(m.queue) == [] and lis.all_expiry[-1] == seen + never


# --- the supervisor's explanations of windows that wait -----------------------------------------


def _reply(held=None, at_cap=None, counters=(0, 0, 0, 0)):
    from topology_runtime.transport.messages import ProbeReply

    return ProbeReply(0, 0, 1, idle=True, finished=False, input_done=False, pending=5, counters=list(counters),
                      held=held or {}, at_cap=at_cap or {})


def test_stall_check_reports_a_capped_spout_once_and_hints_at_finish_input():
    from topology_runtime.supervisor.window_end import WINDOW_QUIET_SECS, WINDOW_STALL_SECS, WindowStallCheck

    c = WindowStallCheck()
    capped = [_reply(held={"win": 1000}, at_cap={"src": 1000})]
    assert c.update(capped, 0.0) is None
    assert c.update(capped, WINDOW_STALL_SECS - 0.1) is None
    is_error, component, text = c.update(capped, WINDOW_STALL_SECS)
    assert is_error and component == "src" and "src (1000 pending)" in text and "win (1000 tuple(s))" in text
    assert c.update(capped, WINDOW_STALL_SECS + 1) is None  # once
    # Something moved (another execute): the clock starts again.
    moving = [_reply(held={"win": 3}, counters=(0, 0, 1, 0))]
    assert c.update(moving, 100.0) is None
    assert c.update(moving, 100.0 + WINDOW_QUIET_SECS - 1) is None
    assert c.update([_reply(held={"win": 3}, counters=(0, 0, 2, 0))], 100.0 + WINDOW_QUIET_SECS) is None
    quiet = [_reply(held={"win": 3}, counters=(0, 0, 2, 0))]
    is_error, component, text = c.update(quiet, 100.0 + 2 * WINDOW_QUIET_SECS)
    assert not is_error and component == "win" and "finish_input()" in text
    assert c.update(quiet, 500.0) is None
