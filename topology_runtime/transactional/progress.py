"""Progress of a transactional coordinator, for its periodic log line (no I/O).

What an operator needs to tune ``topology.max.spout.pending`` and to see a stuck or slow sink:
how far commits got, the commit rate, how long a batch takes to be processed (batch emitted ->
its tuple tree completed) and how long a commit takes (commit emitted -> acked). With pending 1
the period is processing + commit; pipelined, it tends to the larger of the two. The line ends
with what bounds the rate when that is clear from these figures (``tuning_hint``).
"""

from __future__ import annotations

import statistics

# Pipelined, a period within this factor of the median commit means the sink sets the rate.
COMMIT_BOUND = 1.2
# With pending 1, below this possible gain from overlapping processing and commit, say nothing.
WORTH_PIPELINING = 1.2


def tuning_hint(pending: int, period_ms: float, processing_ms: float, commit_ms: float) -> str | None:
    """What bounds the commit rate, from the medians and the mean period between commits."""
    if pending <= 1:
        gain = (processing_ms + commit_ms) / max(processing_ms, commit_ms, 1e-9)
        if gain < WORTH_PIPELINING:
            return None
        return (f"pending 1: processing and commit take turns; topology.max.spout.pending 2-4 overlaps "
                f"them (at most {gain:.1f}x here, less if the workers are already busy)")
    if period_ms <= COMMIT_BOUND * commit_ms:
        return ("commit-bound: the sink sets the rate (a faster sink raises it, and bigger batches the tuples a commit; "
                "more pending does not)")
    return ("not commit-bound: processing or the source sets the rate (more workers or lighter bolts raise it, "
            "more pending does not)")


class TxProgress:
    def __init__(self, tx_id: str, every_secs: float | None, now: float, pending: int = 1) -> None:
        self.tx_id = tx_id
        self.pending = pending
        self.every = every_secs
        self._next = now + every_secs if every_secs else float("inf")
        self._since = now
        self._batch_started: dict[int, float] = {}
        self._commit_started: dict[int, float] = {}
        self._processing: list[float] = []
        self._commit: list[float] = []
        self.commits = 0
        self.last_committed: int | None = None
        # The period between commits is timed from commit to commit, not over the interval, so
        # start-up (or an idle spell before the first commit) does not read as a slow pipeline.
        self._span_from: float | None = None  # the commit the span starts at
        self._span_last: float | None = None
        self._span_commits = 0  # commits after _span_from
        self.failure: tuple[int, int, str] | None = None  # (txid, failures, why) until it commits

    def failed(self, txid: int, failures: int, reason: str) -> None:
        """A batch attempt failed: the next line says so, and why, until that txid commits."""
        self.failure = (txid, failures, reason)

    def batch_started(self, txid: int, now: float) -> None:
        self._batch_started[txid] = now  # a replay restarts the clock: its own attempt is timed

    def batch_processed(self, txid: int, now: float) -> None:
        t = self._batch_started.pop(txid, None)
        if t is not None:
            self._processing.append((now - t) * 1000.0)

    def commit_started(self, txid: int, now: float) -> None:
        self._commit_started[txid] = now

    def committed(self, txid: int, now: float) -> None:
        t = self._commit_started.pop(txid, None)
        if t is not None:
            self._commit.append((now - t) * 1000.0)
        self.commits += 1
        self.last_committed = txid
        if self.failure is not None and txid >= self.failure[0]:
            self.failure = None
        if self._span_from is None:
            self._span_from = now
        else:
            self._span_commits += 1
        self._span_last = now

    def report(self, now: float, in_flight: int, force: bool = False) -> str | None:
        """The progress line when one is due (or ``force``, at the end) and something was
        committed since the last one."""
        if not self.every or (now < self._next and not force):
            return None
        self._next = now + self.every
        failing = ""
        if self.failure is not None:
            txid, n, why = self.failure
            failing = f"; batch txid {txid} failed {n} time(s), last: {why}"
        if not self.commits:
            if not failing:
                return None
            # Nothing committed: the line says which batch holds the run back, and why.
            self._since = now
            return (f"transactional {self.tx_id}: no commit since the last line (committed through txid "
                    f"{self.last_committed if self.last_committed is not None else '-'}){failing}")
        secs = now - self._since
        p_ms = statistics.median(self._processing) if self._processing else None
        c_ms = statistics.median(self._commit) if self._commit else None
        proc = f"{p_ms:.1f} ms" if p_ms is not None else "-"
        commit = f"{c_ms:.1f} ms" if c_ms is not None else "-"
        line = (f"transactional {self.tx_id}: committed through txid {self.last_committed} "
                f"({self.commits} in {secs:.1f} s, {self.commits / secs:.1f} commits/s); median batch "
                f"processing {proc}, commit {commit}; {in_flight} batch(es) in flight{failing}")
        # A hint needs a few commits' figures: a handful of batches at the end of a run says little.
        if p_ms is not None and c_ms is not None and self._span_commits >= 5:
            period_ms = (self._span_last - self._span_from) * 1000.0 / self._span_commits
            hint = tuning_hint(self.pending, period_ms, p_ms, c_ms)
            if hint:
                line += f"; {hint}"
        self._span_from, self._span_commits = self._span_last, 0  # the next span starts at this last commit
        self._since, self.commits = now, 0
        self._processing, self._commit = [], []
        return line
