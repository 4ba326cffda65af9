"""The transactional coordinator's progress line (TxProgress: pure bookkeeping, no I/O)."""

from __future__ import annotations

from topology_runtime.transactional.progress import TxProgress, tuning_hint


def test_progress_line_reports_commits_and_median_stage_times():
    p = TxProgress("wc", 10.0, now=0.0)
    for txid, t in ((1, 0.0), (2, 0.1), (3, 0.2)):
        p.batch_started(txid, t)
        p.batch_processed(txid, t + 0.030)  # 30 ms processing
        p.commit_started(txid, t + 0.030)
        p.committed(txid, t + 0.055)  # 25 ms commit
    assert p.report(5.0, in_flight=2) is None  # not due yet
    line = p.report(10.0, in_flight=2)
    assert line == ("transactional wc: committed through txid 3 (3 in 10.0 s, 0.3 commits/s); median batch "
                    "processing 30.0 ms, commit 25.0 ms; 2 batch(es) in flight")
    assert p.report(20.0, in_flight=0) is None  # nothing committed since: no line


def test_a_replayed_batch_is_timed_from_its_own_attempt_and_the_end_line_can_be_forced():
    p = TxProgress("wc", 10.0, now=0.0)
    p.batch_started(1, 0.0)
    p.batch_started(1, 2.0)  # failed and replayed
    p.batch_processed(1, 2.010)
    p.committed(1, 2.5)  # its commit start was not seen (e.g. a restarted coordinator): no time
    line = p.report(3.0, in_flight=0, force=True)
    assert "committed through txid 1" in line and "processing 10.0 ms, commit -" in line


def test_progress_off():
    p = TxProgress("wc", None, now=0.0)
    p.committed(1, 1.0)
    assert p.report(1e9, in_flight=0, force=True) is None


def _drive(p: TxProgress, n: int, processing: float, commit: float, period: float) -> None:
    for txid in range(1, n + 1):
        t = txid * period
        p.batch_started(txid, t)
        p.batch_processed(txid, t + processing)
        p.commit_started(txid, t + processing)
        p.committed(txid, t + processing + commit)


def test_pending_1_line_says_what_overlapping_could_buy():
    p = TxProgress("wc", 10.0, now=0.0, pending=1)
    _drive(p, 20, processing=0.030, commit=0.025, period=0.055)
    line = p.report(10.0, in_flight=1)
    assert line.endswith("; pending 1: processing and commit take turns; topology.max.spout.pending 2-4 "
                         "overlaps them (at most 1.8x here, less if the workers are already busy)")


def test_pending_1_with_a_negligible_commit_gives_no_hint():
    p = TxProgress("wc", 10.0, now=0.0, pending=1)
    _drive(p, 20, processing=0.050, commit=0.002, period=0.052)
    assert p.report(10.0, in_flight=1).endswith("batch(es) in flight")


def test_pipelined_line_tells_commit_bound_from_processing_bound():
    # 200 commits in 5 s: a 25 ms period, the commit's own time: the sink sets the rate.
    p = TxProgress("wc", 5.0, now=0.0, pending=4)
    _drive(p, 200, processing=0.040, commit=0.024, period=0.025)
    assert "; commit-bound: the sink sets the rate" in p.report(5.0, in_flight=4)
    # 100 commits in 5 s with 10 ms commits: batches wait for processing, not for the sink.
    p = TxProgress("wc", 5.0, now=0.0, pending=4)
    _drive(p, 100, processing=0.060, commit=0.010, period=0.050)
    assert "; not commit-bound: processing or the source sets the rate" in p.report(5.0, in_flight=4)


def test_tuning_hint_boundaries():
    assert tuning_hint(1, 100.0, 50.0, 50.0).startswith("pending 1:") and "2.0x" in tuning_hint(1, 100.0, 50.0, 50.0)
    assert tuning_hint(1, 100.0, 90.0, 10.0) is None  # at most 1.1x: not worth a line
    assert tuning_hint(2, 24.0, 20.0, 20.0).startswith("commit-bound")  # within 1.2x of the commit
    assert tuning_hint(2, 25.0, 20.0, 20.0).startswith("not commit-bound")


def test_start_up_before_the_first_commit_does_not_read_as_a_slow_pipeline():
    # Workers took 8 s to start; then a commit every 25 ms, each taking 24 ms: commit-bound.
    p = TxProgress("wc", 10.0, now=0.0, pending=4)
    for txid in range(1, 61):
        t = 8.0 + txid * 0.025
        p.batch_started(txid, t - 0.050)
        p.batch_processed(txid, t - 0.024)
        p.commit_started(txid, t - 0.024)
        p.committed(txid, t)
    line = p.report(10.0, in_flight=4)
    assert "60 in 10.0 s" in line and "; commit-bound:" in line
