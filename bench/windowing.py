"""Windowed word count: a tumbling 1 s window counting words, ours beside Bytewax and Pathway.

Workload (bench/throughput.py's): N sentences (default 100,000) of 10 words drawn with
random.Random(42) from w0..w9999. Each system splits the sentences into words and counts every
word per 1 s tumbling window of processing time, emitting the counts when a window closes:

* ours: spout -> split (local-or-shuffle) -> a ``WindowedBolt`` with ``with_window(Duration(1))``
  (fields grouping on "word") on LocalCluster, 1 and 2 workers, acking on (the spout emits with
  message ids; a word is acked when it leaves its window). ``--batch K`` adds rows whose spout
  emits K sentences per tuple (one tree per K sentences; the split bolt still emits one tuple per
  word, so windows hold the same 1,000,000 word tuples).
* Bytewax 0.21.1: input (its partitions: the sentences dealt over the workers, read
  ``--bytewax-batch`` sentences per ``next_batch``) -> ``flat_map`` split ->
  ``windowing.count_window`` (``SystemClock``, ``TumblingWindower(1 s)``) -> a sink; 1 worker:
  ``run_main``, 2 workers: two processes (``cluster_main``), as two of our workers are.
* Pathway 0.33: ``pw.io.python`` subject (one row per sentence, stamped with the wall clock) ->
  split UDF -> flatten -> ``windowby(ts, pw.temporal.tumbling(duration=1), instance=word)``
  ``.reduce(count)`` -> CSV; streaming mode, ``PATHWAY_THREADS`` = workers.

Bytewax and Pathway run as subprocesses of a bench-only venv (``bench/.venv-compare``, created
on first use, ignored by git), never the project's. Every system's window counts must sum to
N x 10 (the ``counts`` column), so nobody is measured doing less work.

words/s: N x 10 words over first emitted sentence -> the end of the evaluation of the window
holding the last word. For ours that is the last word's arrival in its window plus how long
that window's evaluation took, not the wait for the 1 s boundary (Bytewax and Pathway close
their windows at end of input; a processing-time window here closes only on the clock);
``to last window`` gives ours including that wait.

    python bench/windowing.py [--sentences N] [--workers 1,2] [--repeat K] [--only ours,bytewax,pathway]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.throughput import WORDS_PER_SENTENCE, SentenceSpout, SplitBolt, make_sentences  # noqa: E402
from topology_runtime import BasicBolt, LocalCluster, TopologyBuilder  # noqa: E402
from topology_runtime.windowing import Duration, WindowedBolt  # noqa: E402

HERE = Path(__file__).resolve().parent
COMPARE_VENV = HERE / ".venv-compare"
COMPARE_PACKAGES = ["bytewax==0.21.1", "pathway==0.33.*"]
WINDOW_SECS = 1


# --- ours ------------------------------------------------------------------------------------------


class BatchSentenceSpout(SentenceSpout):
    """SentenceSpout emitting ``batch`` sentences per tuple (one tree each)."""

    def __init__(self, sentences: list[str], batch: int) -> None:
        super().__init__([sentences[i:i + batch] for i in range(0, len(sentences), batch)])


class SplitBatchBolt(BasicBolt):
    outputs = ["word"]

    def execute(self, tup):
        emit = self.emit
        for s in tup.values[0]:
            for w in s.split():
                emit([w])


class WindowCount(WindowedBolt):
    """Counts each word per window and emits one summary per window (anchored to the window's
    tuples: window end, distinct words, words). Records the words counted, and per window the
    last word's arrival and how long the evaluation took."""

    outputs = ["end_ts", "distinct", "words"]

    def prepare(self, conf, context):
        self.out = Path(conf["bench.outdir"], f"count-{context.task_index}")
        self.total = 0
        self.windows = 0
        self.last_in = self.last_in_eval = self.last_eval = None

    def execute(self, window):
        t0 = time.time()
        counts: dict[str, int] = {}
        for t in window.get():
            w = t.values[0]
            counts[w] = counts.get(w, 0) + 1
        n = len(window)
        self.emit([window.end_ts, len(counts), n])
        t1 = time.time()
        self.total += n
        self.windows += 1
        # The window's events are still queued (they expire at the next evaluation), stamped with
        # their arrival (ms): the newest one at or before the window's end is its last word in.
        end = window.end_ts
        for ev in reversed(self._wm.queue):
            if ev.ts <= end:
                if self.last_in is None or ev.ts / 1000 >= self.last_in:
                    self.last_in, self.last_in_eval = ev.ts / 1000, t1 - t0
                break
        self.last_eval = t1

    def cleanup(self):
        self.out.write_text(json.dumps({"total": self.total, "windows": self.windows, "last_in": self.last_in,
                                        "last_in_eval": self.last_in_eval, "last_eval": self.last_eval}))


def build(sentences: list[str], workers: int, batch: int):
    b = TopologyBuilder()
    if batch > 1:
        b.set_spout("sentences", BatchSentenceSpout(sentences, batch), workers)
        b.set_bolt("split", SplitBatchBolt(), workers).local_or_shuffle_grouping("sentences")
    else:
        b.set_spout("sentences", SentenceSpout(sentences), workers)
        b.set_bolt("split", SplitBolt(), workers).local_or_shuffle_grouping("sentences")
    b.set_bolt("count", WindowCount().with_window(Duration(WINDOW_SECS)), workers).fields_grouping("split", ["word"])
    return b.create_topology()


def run_ours(sentences: list[str], workers: int, batch: int = 1) -> dict:
    outdir = tempfile.mkdtemp(prefix="bench-window-")
    conf = {"bench.outdir": outdir,
            # Above the window: a word is acked only when it leaves its window (checked at submit).
            "topology.message.timeout.secs": 60,
            # Every word waits ~1 s in its window, so the trees in flight are ~1 s of input:
            # the default 1000 per spout task would cap the run at ~1000 trees/s. No cap here.
            "topology.max.spout.pending": len(sentences)}
    name = f"bench-window-{workers}w-b{batch}-{os.getpid()}"
    t0 = time.time()
    with LocalCluster(workers=workers) as cluster:
        status = cluster.run(name, build(sentences, workers, batch), conf, timeout=1800)
    wall = time.time() - t0
    marks = [json.loads(p.read_text()) for p in Path(outdir).glob("spout-*")]
    counts = [json.loads(p.read_text()) for p in Path(outdir).glob("count-*")]
    words = len(sentences) * WORDS_PER_SENTENCE
    first = min(m["first_emit"] for m in marks if m["first_emit"])
    last_in = max((c["last_in"] + c["last_in_eval"] for c in counts if c["last_in"]), default=first)
    last_eval = max((c["last_eval"] for c in counts if c["last_eval"]), default=first)
    last_ack = max(m["last_ack"] or first for m in marks)
    counted = sum(c["total"] for c in counts)
    return {"system": "ours", "workers": workers, "acking": True, "batch": batch,
            "words_per_sec": round(words / max(1e-9, last_in - first)),
            "words_per_sec_last_window": round(words / max(1e-9, last_eval - first)),
            "words_per_sec_last_ack": round(words / max(1e-9, last_ack - first)),
            "wall_secs": round(wall, 3), "windows": sum(c["windows"] for c in counts),
            "counted": counted, "counted_ok": counted == words, "state": status.state,
            "complete_p50_ms": status.components["sentences"].complete_latency_p50_ms}


# --- competitors -----------------------------------------------------------------------------------

WORKLOAD_SRC = textwrap.dedent('''
    import json, os, random, sys, time
    N, WORKERS = int(sys.argv[1]), int(sys.argv[2])
    OUT = sys.argv[3]

    def make_sentences(n):
        rng = random.Random(42)
        vocab = [f"w{i}" for i in range(10000)]
        return [" ".join(rng.choice(vocab) for _ in range(10)) for _ in range(n)]

    sentences = make_sentences(N)
''')

BYTEWAX_SRC = WORKLOAD_SRC + textwrap.dedent('''
    PROC, BATCH, ADDRS = int(sys.argv[4]), int(sys.argv[5]), sys.argv[6].split(",")
    from datetime import datetime, timedelta, timezone
    import bytewax.operators as op
    from bytewax.dataflow import Dataflow
    from bytewax.inputs import DynamicSource, StatelessSourcePartition
    from bytewax.outputs import DynamicSink, StatelessSinkPartition
    from bytewax.operators.windowing import SystemClock, TumblingWindower, count_window
    from bytewax.testing import cluster_main, run_main

    rec = {"first": None, "last": None, "total": 0, "rows": 0, "windows": set()}

    class Part(StatelessSourcePartition):
        def __init__(self, todo):
            self.todo, self.i = todo, 0
        def next_batch(self):
            if self.i >= len(self.todo):
                raise StopIteration()
            if rec["first"] is None:
                rec["first"] = time.time()
            batch = self.todo[self.i:self.i + BATCH]
            self.i += BATCH
            return batch

    class Source(DynamicSource):
        def build(self, step_id, worker_index, worker_count):
            return Part(sentences[worker_index::worker_count])

    class SinkPart(StatelessSinkPartition):
        def write_batch(self, items):
            for _word, (window_id, count) in items:
                rec["total"] += count
                rec["windows"].add(window_id)
            rec["rows"] += len(items)
            rec["last"] = time.time()

    class Sink(DynamicSink):
        def build(self, step_id, worker_index, worker_count):
            return SinkPart()

    flow = Dataflow("window_count")
    lines = op.input("sentences", flow, Source())
    words = op.flat_map("split", lines, str.split)
    windower = TumblingWindower(length=timedelta(seconds=1), align_to=datetime(2026, 1, 1, tzinfo=timezone.utc))
    counted = count_window("count", words, SystemClock(), windower, lambda w: w)
    op.output("out", counted.down, Sink())
    if WORKERS == 1:
        run_main(flow)
    else:
        cluster_main(flow, ADDRS, PROC)
    rec["windows"] = len(rec["windows"])
    with open(OUT, "w") as f:
        json.dump(rec, f)
''')

PATHWAY_SRC = WORKLOAD_SRC + textwrap.dedent('''
    import pathway as pw

    rec = {"first": None}

    class Sentences(pw.Schema):
        sentence: str
        ts: float

    class Subject(pw.io.python.ConnectorSubject):
        def run(self):
            rec["first"] = time.time()
            nxt = self.next
            for s in sentences:
                nxt(sentence=s, ts=time.time())

    @pw.udf(deterministic=True)
    def split(s: str) -> list[str]:
        return s.split()

    lines = pw.io.python.read(Subject(), schema=Sentences)
    words = lines.select(word=split(pw.this.sentence), ts=pw.this.ts).flatten(pw.this.word)
    counts = words.windowby(pw.this.ts, window=pw.temporal.tumbling(duration=1.0), instance=pw.this.word).reduce(
        word=pw.this._pw_instance, start=pw.this._pw_window_start, count=pw.reducers.count())
    csv_path = OUT + ".csv"
    pw.io.csv.write(counts, csv_path)
    done = {}
    pw.io.subscribe(counts, on_change=lambda **kw: None, on_end=lambda: done.setdefault("t", time.time()))
    pw.run(monitoring_level=pw.MonitoringLevel.NONE)
    last = done.get("t", time.time())
    import csv
    final = {}
    with open(csv_path) as f:
        for row in csv.DictReader(f):
            key = (row["word"], row["start"])
            final[key] = final.get(key, 0) + int(row["count"]) * int(row["diff"])
    os.unlink(csv_path)
    json.dump({"first": rec["first"], "last": last, "total": sum(final.values()),
               "rows": sum(1 for v in final.values() if v),
               "windows": len({k[1] for k, v in final.items() if v})}, open(OUT, "w"))
''')


def compare_python() -> Path:
    """The bench-only venv's python, created (once) with Bytewax and Pathway."""
    py = COMPARE_VENV / "bin" / "python"
    if not py.exists():
        print(f"  creating {COMPARE_VENV} ({', '.join(COMPARE_PACKAGES)})", file=sys.stderr, flush=True)
        subprocess.run([shutil.which("python3") or sys.executable, "-m", "venv", str(COMPARE_VENV)], check=True)
        subprocess.run([str(py), "-m", "pip", "install", "-q", *COMPARE_PACKAGES], check=True)
    return py


def _free_ports(n: int) -> list[int]:
    import socket

    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _finish(system: str, workers: int, outs: list[Path], n: int, wall: float, extra: dict) -> dict:
    recs = [json.loads(p.read_text()) for p in outs]
    words = n * WORDS_PER_SENTENCE
    first = min(r["first"] for r in recs if r["first"])
    last = max(r["last"] for r in recs if r["last"])
    counted = sum(r["total"] for r in recs)
    return {"system": system, "workers": workers, "acking": None, "batch": extra.pop("batch", None),
            "words_per_sec": round(words / max(1e-9, last - first)), "wall_secs": round(wall, 3),
            "windows": max(r["windows"] for r in recs), "counted": counted, "counted_ok": counted == words,
            "state": "completed", **extra}


def run_bytewax(n: int, workers: int, batch: int) -> dict:
    py = compare_python()
    with tempfile.TemporaryDirectory(prefix="bench-bytewax-") as tmp:
        script = Path(tmp, "flow.py")
        script.write_text(BYTEWAX_SRC)
        addrs = ",".join(f"127.0.0.1:{p}" for p in _free_ports(workers))
        outs = [Path(tmp, f"out-{i}.json") for i in range(workers)]
        t0 = time.time()
        procs = [subprocess.Popen([str(py), str(script), str(n), str(workers), str(outs[i]), str(i), str(batch),
                                   addrs], cwd=tmp) for i in range(workers)]
        codes = [p.wait(timeout=1800) for p in procs]
        wall = time.time() - t0
        if any(codes):
            raise RuntimeError(f"bytewax exited {codes}")
        return _finish("bytewax 0.21.1", workers, outs, n, wall, {"batch": batch})


def run_pathway(n: int, workers: int) -> dict:
    py = compare_python()
    with tempfile.TemporaryDirectory(prefix="bench-pathway-") as tmp:
        script = Path(tmp, "flow.py")
        script.write_text(PATHWAY_SRC)
        out = Path(tmp, "out.json")
        env = {**os.environ, "PATHWAY_THREADS": str(workers), "PATHWAY_PROCESSES": "1"}
        t0 = time.time()
        subprocess.run([str(py), str(script), str(n), str(workers), str(out)], cwd=tmp, env=env, check=True,
                       timeout=1800)
        wall = time.time() - t0
        version = subprocess.run([str(py), "-c", "import pathway; print(pathway.__version__)"], capture_output=True,
                                 text=True).stdout.strip()
        return _finish(f"pathway {version}", workers, [out], n, wall, {})


# --- report ----------------------------------------------------------------------------------------


def table(rows: list[dict], best_competitor: float | None) -> str:
    lines = ["| system | workers | acking | input batch | words/s | words/s to last window | words/s to last ack "
             "| x best competitor | windows | counts |",
             "|---|---|---|---|---:|---:|---:|---:|---:|---|"]
    for r in rows:
        acking = {True: "on", False: "off", None: "n/a"}[r["acking"]]
        ratio = f"{r['words_per_sec'] / best_competitor:.2f}" if best_competitor else "-"
        batch = (f"{r['batch']} sentence" + "s" * (r["batch"] > 1)) if r.get("batch") else "-"
        extra = [f"{r[k]:,}" if k in r else "-" for k in ("words_per_sec_last_window", "words_per_sec_last_ack")]
        lines.append(f"| {r['system']} | {r['workers']} | {acking} | {batch} | {r['words_per_sec']:,} | "
                     f"{extra[0]} | {extra[1]} | {ratio} | {r['windows']} | "
                     f"{'OK' if r['counted_ok'] else 'MISMATCH'} {r['counted']:,} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sentences", type=int, default=100_000)
    p.add_argument("--workers", default="1,2")
    p.add_argument("--repeat", type=int, default=1, help="best of K for each variant")
    p.add_argument("--only", default="ours,bytewax,pathway", help="comma-separated: ours, bytewax, pathway")
    p.add_argument("--batch", default="1", help="ours: sentences per spout tuple, comma-separated (1: one each)")
    p.add_argument("--bytewax-batch", type=int, default=1000, help="Bytewax: sentences per next_batch")
    args = p.parse_args(argv)
    only = args.only.split(",")
    if not set(only) <= {"ours", "bytewax", "pathway"}:
        raise SystemExit(f"--only: expected ours, bytewax and/or pathway, got {args.only!r}")
    workers = [int(w) for w in args.workers.split(",")]
    batches = [int(b) for b in args.batch.split(",")]
    sentences = make_sentences(args.sentences)
    if {"bytewax", "pathway"} & set(only):
        compare_python()
    variants: list[tuple] = []
    for w in workers:
        if "ours" in only:
            variants += [("ours", w, b) for b in batches]
        if "bytewax" in only:
            variants.append(("bytewax", w, args.bytewax_batch))
        if "pathway" in only:
            variants.append(("pathway", w, None))
    runs: dict[tuple, list[dict]] = {v: [] for v in variants}
    for _ in range(args.repeat):  # rounds interleave the systems: each sees the same load
        for v in variants:
            system, w, b = v
            if system == "ours":
                r = run_ours(sentences, w, b)
            elif system == "bytewax":
                r = run_bytewax(args.sentences, w, b)
            else:
                r = run_pathway(args.sentences, w)
            runs[v].append(r)
            print(f"  {r['system']} {w} worker(s){f' batch {b}' if b and b > 1 else ''}: "
                  f"{r['words_per_sec']:,} words/s, {r['counted']:,} words counted, wall {r['wall_secs']}s",
                  file=sys.stderr, flush=True)
    rows = []
    for v in variants:
        top = dict(max(runs[v], key=lambda r: r["words_per_sec"]))
        top["words_per_sec_all"] = [r["words_per_sec"] for r in runs[v]]
        rows.append(top)
    rows.sort(key=lambda r: (r["workers"], r["system"] != "ours", r["system"], r.get("batch") or 0))
    competitors = [r["words_per_sec"] for r in rows if r["system"] != "ours"]
    best = max(competitors) if competitors else None
    try:
        load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        load = "?"
    print(f"\n{args.sentences:,} sentences x {WORDS_PER_SENTENCE} words, tumbling {WINDOW_SECS} s window, "
          f"{os.cpu_count()} cores, Python {platform.python_version()}, best of {args.repeat}, load average {load}\n")
    print(table(rows, best))
    out = HERE / "results"
    out.mkdir(exist_ok=True)
    (out / "windowing.json").write_text(json.dumps(
        {"sentences": args.sentences, "repeat": args.repeat, "load_average": load, "rows": rows}, indent=2))
    return 0 if all(r["counted_ok"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
