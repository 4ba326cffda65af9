"""The driver's progress lines never show a negative count or rate, and a tick tuple held by a
bolt (a stateful bolt before its state arrives) is not taken out of a count it never entered."""

from __future__ import annotations

from topology_runtime.api.status import ComponentStats, RunStatus
from topology_runtime.control.reporter import progress_line


def test_a_rate_after_a_worker_lost_unreported_figures_is_zero_not_negative():
    prev = {"count": 500}
    status = RunStatus("wc", "running", components={"count": ComponentStats(executed=480)})
    line = progress_line(status, prev, 1.0)
    assert "count 480 executed 0/s" in line and "-" not in line.split("]", 1)[1]


def test_a_held_tick_is_not_taken_out_of_the_executed_count():
    from topology_runtime.worker.bolt_executor import _TickCall

    class Held:  # a bolt executor that holds what it is given (counts nothing)
        def __init__(self):
            self.stats = ComponentStats()
            self.task = 1

        def process(self, tup):
            pass

    class Counting(Held):
        def process(self, tup):
            self.stats.executed += 1

    held, counting = Held(), Counting()
    _TickCall(held).process(None)
    _TickCall(counting).process(None)
    assert held.stats.executed == 0 and counting.stats.executed == 0
