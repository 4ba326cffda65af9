"""The transactional coordinator's progress line (TxProgress: pure bookkeeping, no I/O)."""

from __future__ import annotations

from topology_runtime.transactional.progress import TxProgress


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
