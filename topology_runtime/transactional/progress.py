"""Progress of a transactional coordinator, for its periodic log line (no I/O).

What an operator needs to tune ``topology.max.spout.pending`` and to see a stuck or slow sink:
how far commits got, the commit rate, how long a batch takes to be processed (batch emitted ->
its tuple tree completed) and how long a commit takes (commit emitted -> acked). With pending 1
the period is processing + commit; pipelined, it tends to the larger of the two.
"""

from __future__ import annotations

import statistics


class TxProgress:
    def __init__(self, tx_id: str, every_secs: float | None, now: float) -> None:
        self.tx_id = tx_id
        self.every = every_secs
        self._next = now + every_secs if every_secs else float("inf")
        self._since = now
        self._batch_started: dict[int, float] = {}
        self._commit_started: dict[int, float] = {}
        self._processing: list[float] = []
        self._commit: list[float] = []
        self.commits = 0
        self.last_committed: int | None = None

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

    def report(self, now: float, in_flight: int, force: bool = False) -> str | None:
        """The progress line when one is due (or ``force``, at the end) and something was
        committed since the last one."""
        if not self.every or (now < self._next and not force):
            return None
        self._next = now + self.every
        if not self.commits:
            return None
        secs = now - self._since
        proc = f"{statistics.median(self._processing):.1f} ms" if self._processing else "-"
        commit = f"{statistics.median(self._commit):.1f} ms" if self._commit else "-"
        line = (f"transactional {self.tx_id}: committed through txid {self.last_committed} "
                f"({self.commits} in {secs:.1f} s, {self.commits / secs:.1f} commits/s); median batch "
                f"processing {proc}, commit {commit}; {in_flight} batch(es) in flight")
        self._since, self.commits = now, 0
        self._processing, self._commit = [], []
        return line
