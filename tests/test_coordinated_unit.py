"""CoordinatedBolt tracking against reference §2 and DRPCIntegrationTest's scenarios."""

from __future__ import annotations

from topology_runtime.coordination.tracker import CoordinatedTracker


def test_finishes_when_all_reports_arrived_and_counts_match():
    t = CoordinatedTracker(num_source_reports=2, out_tasks=[7, 8])
    t.emitted("b1", [7])
    assert not t.regular_acked("b1").finished
    assert not t.coord("b1", 1, "c1").finished  # 1 of 2 upstream reports
    f = t.coord("b1", 0, "c2")  # the other upstream task sent this task nothing
    assert f.finished and f.counts == {7: 1, 8: 0} and f.ack == ["c1", "c2"]


def test_waits_for_a_late_tuple_after_the_reports():
    t = CoordinatedTracker(1, [5])
    assert not t.coord("b", 3, "c").finished
    t.regular_acked("b")
    t.regular_acked("b")
    f = t.regular_acked("b")
    assert f.finished and f.ack == ["c"]


def test_upstream_that_emitted_zero_tuples():
    t = CoordinatedTracker(num_source_reports=1, out_tasks=[9])
    f = t.coord("empty", 0, "c")
    assert f.finished and f.counts == {9: 0}


def test_three_stage_cascade_counts_flow_downstream():
    a = CoordinatedTracker(0, [2, 3])  # first stage: no sources (fed by the request)
    b2, b3 = CoordinatedTracker(1, [4]), CoordinatedTracker(1, [4])
    c = CoordinatedTracker(2, [])
    a.emitted("r", [2])
    a.emitted("r", [2])
    a.emitted("r", [3])
    fa = a.regular_acked("r")
    assert fa.finished and fa.counts == {2: 2, 3: 1}
    for _ in range(2):
        b2.emitted("r", [4])
        b2.regular_acked("r")
    f2 = b2.coord("r", fa.counts[2], "coord-a")
    assert f2.finished and f2.counts == {4: 2}
    f3 = b3.coord("r", fa.counts[3], "coord-a")
    assert not f3.finished  # the one tuple a sent to 3 has not been received
    f3 = b3.regular_acked("r")
    assert f3.finished and f3.counts == {4: 0}
    assert not c.coord("r", f2.counts[4], "x2").finished
    c.regular_acked("r")
    f = c.regular_acked("r")
    assert not f.finished  # 2 received, but only 1 of 2 upstream reports so far
    assert c.coord("r", f3.counts[4], "x3").finished


def test_id_stream_is_required_before_finishing():
    t = CoordinatedTracker(1, [], has_id_stream=True)
    f = t.coord("b", 0, "c")
    assert not f.finished and f.ack == ["c"]  # with an id stream, coord tuples are acked at once
    f = t.id_tuple("b", "commit")
    assert f.finished and f.ack == ["commit"]


def test_failed_tuple_and_failed_finish_and_timeout_fail_held_tuples():
    t = CoordinatedTracker(1, [])
    assert t.coord("b", 2, "c").fail == []
    f = t.regular_failed("b")
    assert f.fail == ["c"] and not f.finished
    t2 = CoordinatedTracker(2, [])
    t2.coord("x", 0, "c1")
    assert t2.finish_failed("x").fail == ["c1"]
    t3 = CoordinatedTracker(2, [], timeout_buckets=2)
    t3.coord("y", 0, "c1")
    t3.tick()
    assert [(f.id, f.fail) for f in t3.tick()] == [("y", ["c1"])]


def test_emitted_counts_sums_like_one_emitted_per_tuple():
    one, many = CoordinatedTracker(0, [2, 3]), CoordinatedTracker(0, [2, 3])
    for task in (2, 2, 3):
        one.emitted("r", [task])
    many.emitted_counts("r", {2: 2, 3: 1})
    many.emitted_counts("r", {})
    assert one.regular_acked("r").counts == many.regular_acked("r").counts == {2: 2, 3: 1}
