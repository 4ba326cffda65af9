"""Where a transactional commit's time goes: a per-commit timeline of the benchmark's word count.

    python bench/trace_commits.py [bench/transactional.py options, e.g. --take 1000 --delays 20 --pending 1,4]

Runs ``bench/transactional.py`` with timestamps added (by wrapping, the runtime is unchanged) at:
the coordinator emitting a batch and a commit, the committer's ``finish_batch`` start and end,
``ValueMap.multi_add`` start and end, and the coordinator's acks. One line per event is appended
to a file (a syscall per event: a few per batch, so the trace barely adds to what it measures),
then each run's steady-state commits (the middle two thirds) are summarised: median and p90 of
every stage of the commit chain and the period between commits.
"""

from __future__ import annotations

import collections
import importlib.util
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from state import values as _values  # noqa: E402
from topology_runtime.reliability.transactional import BATCH  # noqa: E402
from topology_runtime.transactional.batch_executor import attempt_of  # noqa: E402
from topology_runtime.transactional.coordinator import CoordinatorSpout  # noqa: E402

TRACE = os.path.join(tempfile.gettempdir(), f"trace-commits-{os.getpid()}.log")


def _stamp(event: str, txid: int) -> None:
    fd = os.open(TRACE, os.O_WRONLY | os.O_APPEND | os.O_CREAT)  # forked workers append too
    try:
        os.write(fd, f"{time.time():.6f} {event} {txid}\n".encode())
    finally:
        os.close(fd)


def _wrap(cls, name, before, after=None):
    orig = getattr(cls, name)

    def wrapped(self, *args):
        before(self, *args)
        out = orig(self, *args)
        if after:
            after(self, *args)
        return out
    setattr(cls, name, wrapped)


def _instrument(bench) -> None:
    def on_emit(self, out):
        for e in out:
            _stamp("B_EMIT" if e[0] == BATCH else "C_EMIT", e[1].txid)
    _wrap(CoordinatorSpout, "_emit", on_emit)
    _wrap(CoordinatorSpout, "ack", lambda self, m: _stamp("ACK", attempt_of(m).txid))
    _wrap(_values.ValueMap, "multi_add", lambda self, t, d: _stamp("MA0", t), lambda self, t, d: _stamp("MA1", t))
    _wrap(bench.SlowSink, "finish_batch", lambda self: _stamp("FB0", self.id.txid),
          lambda self: _stamp("FB1", self.id.txid))


STAGES = {  # name: (from event, to event); "next" is the next txid's commit emit
    "batch emitted -> processed (its tree acked)": ("B_EMIT", "BACK"),
    "processed -> its commit emitted": ("BACK", "C_EMIT"),
    "commit emitted -> finish_batch starts": ("C_EMIT", "FB0"),
    "finish_batch start -> multi_add (the sink's delay)": ("FB0", "MA0"),
    "multi_add": ("MA0", "MA1"),
    "multi_add -> finish_batch ends": ("MA1", "FB1"),
    "finish_batch ends -> coordinator acked": ("FB1", "CACK"),
    "coordinator acked -> next commit emitted": ("CACK", "NEXT"),
    "period (commit to commit)": ("C_EMIT", "NEXT"),
}


def summarise(path: str) -> None:
    runs, cur = [], []
    for line in open(path):
        t, ev, tx = line.split()
        if ev == "B_EMIT" and tx == "1" and cur:
            runs.append(cur)
            cur = []
        cur.append((float(t), ev, int(tx)))
    runs.append(cur)
    for i, run in enumerate(runs):
        first: dict[int, dict] = collections.defaultdict(dict)
        for t, ev, tx in run:
            if ev == "ACK":
                first[tx].setdefault("BACK", t)  # the first ack of a txid is its batch's
                first[tx]["CACK"] = t  # the last ack of a txid is its commit's
            else:
                first[tx].setdefault(ev, t)
        txs = sorted(tx for tx, d in first.items() if "C_EMIT" in d)
        lo, hi = len(txs) // 6, len(txs) - len(txs) // 6
        rows = []
        for tx in txs[lo:hi]:
            d = dict(first[tx], NEXT=first.get(tx + 1, {}).get("C_EMIT"))
            if all(d.get(a) and d.get(b) for a, b in STAGES.values()):
                rows.append({k: (d[b] - d[a]) * 1000 for k, (a, b) in STAGES.items()})
        if not rows:
            continue
        print(f"\nrun {i + 1}: {len(rows)} steady-state commits, ms (median / p90)")
        for k in STAGES:
            v = sorted(r[k] for r in rows)
            print(f"  {k:52s} {statistics.median(v):7.2f} / {v[9 * len(v) // 10]:7.2f}")


def main(argv: list[str]) -> int:
    spec = importlib.util.spec_from_file_location("bench_transactional", ROOT / "bench" / "transactional.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    _instrument(bench)
    try:
        rc = bench.main(argv)
        print(f"\ncommit chain per run, in the order the runs went ({TRACE}):")
        summarise(TRACE)
        return rc
    finally:
        if os.path.exists(TRACE):
            os.unlink(TRACE)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
