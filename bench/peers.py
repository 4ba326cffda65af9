"""The same 1M-word word count in Pathway, Bytewax and ours, side by side in one run.

    python bench/peers.py [--sentences N] [--rounds R] [--only ROW,ROW...]

Workload: bench/throughput.py's, N sentences (default 100,000) of 10 words drawn with
random.Random(42) from w0..w9999, split into words and every word counted. Rows:

* pathway: Pathway 0.33, ``PATHWAY_THREADS=2``, static mode (its fastest here): the sentences
  as a plaintext file, ``pw.io.plaintext.read(mode="static")`` -> split UDF -> flatten ->
  ``groupby(word).reduce(count)`` -> ``pw.io.subscribe``;
* pathway-stream: the same through a ``pw.io.python`` subject (one row per sentence), streaming.
  The ``x pathway`` ratios are against whichever of the two had the higher best words/s wall;
* bytewax-1, bytewax-2: Bytewax 0.21.1, input (2 partitions, 1,000 sentences a batch) ->
  ``flat_map`` split -> ``count_final`` -> a sink; 1 worker (``run_main``) or 2 processes
  (``cluster_main``); ``-rec``: with recovery (a fresh SQLite recovery db, 1 s epochs);
* unacked, acked: bench/throughput.py's word count, ``run_variant("local", ...)``, 2 workers;
* eo: bench/rescale.py's exactly-once stateful word count (checkpoints every 1 s), 2 workers;
* transactional: the hand-written transactional word count as bench/trident.py runs it
  (bench/transactional.py's topology; its spout emits the same words, no split stage; batches
  of 2 x 900 sentences' words, max.spout.pending 4), 2 workers; a committer task per count task
  (grouped on the word, as the count is: each count task's rows stay in its worker);
  transactional-1c: the same with one committer task (every count row crosses to it);
  transactional-b3000: batches of 2 x 3,000 sentences' words (17 commits a run instead of 56);
  transactional-tw: no count bolt, two committer tasks grouped on the word count the spout's
  words themselves and commit (Storm's TransactionalWords shape: one hop and no count rows).

Every row is one child process (Pathway and Bytewax: bench/windowing.py's bench-only venv;
ours: this venv) and is timed the same way: ``wall`` = child spawned -> the system's run done
(before the counts are checked), minus the time the child spends making its input (the
sentences; Pathway's file; the transactional partitions), measured inside it. So interpreter
start, imports, the system's start-up and shutdown are in; Redis (for eo and transactional)
is started once for the whole run and emptied before each of our runs, outside the clock. Our tree
is byte-compiled before the first round (installing does the same for the peers' code).
``steady`` is each system's own processing window: Pathway
static, ``pw.run`` called -> returned; Pathway streaming, first row pushed -> returned; Bytewax,
first batch read -> last batch written; ours as bench/throughput.py, rescale.py and trident.py
measure it. Every run's counts are checked word by word against the generator's.
Rounds interleave the rows (order rotating); best of R. Results: bench/results/peers.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.throughput import WORDS_PER_SENTENCE, CountBolt, make_sentences  # noqa: E402
from bench.windowing import WORKLOAD_SRC, _free_ports, compare_python  # noqa: E402

ROWS = ["pathway", "pathway-stream", "bytewax-1", "bytewax-2", "bytewax-1-rec", "bytewax-2-rec", "unacked",
        "acked", "eo", "transactional", "transactional-1c", "transactional-b3000", "transactional-tw"]
NAMES = {"pathway": "Pathway 0.33, static", "pathway-stream": "Pathway 0.33, streaming",
         "bytewax-1": "Bytewax 0.21.1", "bytewax-2": "Bytewax 0.21.1", "bytewax-1-rec": "Bytewax 0.21.1, recovery",
         "bytewax-2-rec": "Bytewax 0.21.1, recovery", "unacked": "ours, acking off", "acked": "ours, acking on",
         "eo": "ours, exactly-once stateful", "transactional": "ours, hand-written transactional",
         "transactional-1c": "ours, hand-written transactional, one committer task",
         "transactional-b3000": "ours, hand-written transactional, 2 x 3,000-sentence batches",
         "transactional-tw": "ours, hand-written transactional, the committer counts"}
WORKERS = {"pathway": "2 threads", "pathway-stream": "2 threads", "bytewax-1": "1", "bytewax-2": "2 processes",
           "bytewax-1-rec": "1", "bytewax-2-rec": "2 processes"}
OURS = ("unacked", "acked", "eo", "transactional", "transactional-1c", "transactional-b3000", "transactional-tw")
TIMEOUT = 600  # s a run (--timeout)
TX_BATCH = 900  # sentences per partition per batch (bench/trident.py's default)

# --- the peers' programs (bench/windowing.py's workload: argv N, WORKERS, OUT) ----------------------
HEAD = "import time\nT0 = time.time()\n"

PATHWAY_SRC = HEAD + WORKLOAD_SRC + textwrap.dedent('''
    MODE = sys.argv[4]
    if MODE == "static":
        path = OUT + ".txt"
        with open(path, "w") as f:
            f.write("\\n".join(sentences) + "\\n")
    GEN = time.time() - T0
    import pathway as pw

    rec = {"first": None}

    class Lines(pw.Schema):
        sentence: str

    class Subject(pw.io.python.ConnectorSubject):
        def run(self):
            rec["first"] = time.time()
            nxt = self.next
            for s in sentences:
                nxt(sentence=s)

    @pw.udf(deterministic=True)
    def split(s: str) -> list[str]:
        return s.split()

    if MODE == "static":
        lines = pw.io.plaintext.read(path, mode="static").select(sentence=pw.this.data)
    else:
        lines = pw.io.python.read(Subject(), schema=Lines)
    counts = lines.select(word=split(pw.this.sentence)).flatten(pw.this.word).groupby(pw.this.word).reduce(
        pw.this.word, count=pw.reducers.count())
    rows = {}

    def on_change(key, row, time, is_addition):
        if is_addition:
            rows[key] = (row["word"], row["count"])
        elif rows.get(key) == (row["word"], row["count"]):
            del rows[key]

    pw.io.subscribe(counts, on_change=on_change)
    start = time.time()
    pw.run(monitoring_level=pw.MonitoringLevel.NONE)
    done = time.time()
    final = {}
    for w, c in rows.values():
        final[w] = final.get(w, 0) + c
    json.dump({"gen": GEN, "first": rec["first"] or start, "last": done, "done": done, "counts": final,
               "version": pw.__version__}, open(OUT, "w"))
''')

BYTEWAX_SRC = HEAD + WORKLOAD_SRC + textwrap.dedent('''
    GEN = time.time() - T0
    PROC, BATCH, ADDRS, RECOVERY = int(sys.argv[4]), int(sys.argv[5]), sys.argv[6].split(","), sys.argv[7]
    from datetime import timedelta
    import bytewax.operators as op
    from bytewax.dataflow import Dataflow
    from bytewax.inputs import FixedPartitionedSource, StatefulSourcePartition
    from bytewax.outputs import DynamicSink, StatelessSinkPartition
    from bytewax.testing import cluster_main, run_main

    PARTS = 2
    rec = {"gen": GEN, "first": None, "last": None, "counts": {}}

    class Part(StatefulSourcePartition):
        def __init__(self, todo, pos):
            self.todo, self.i = todo, pos or 0
        def next_batch(self):
            if self.i >= len(self.todo):
                raise StopIteration()
            if rec["first"] is None:
                rec["first"] = time.time()
            batch = self.todo[self.i:self.i + BATCH]
            self.i += BATCH
            return batch
        def snapshot(self):
            return self.i

    class Source(FixedPartitionedSource):
        def list_parts(self):
            return [str(p) for p in range(PARTS)]
        def build_part(self, step_id, for_part, resume_state):
            return Part(sentences[int(for_part)::PARTS], resume_state)

    class SinkPart(StatelessSinkPartition):
        def write_batch(self, items):
            c = rec["counts"]
            for w, n in items:
                c[w] = c.get(w, 0) + n
            rec["last"] = time.time()

    class Sink(DynamicSink):
        def build(self, step_id, worker_index, worker_count):
            return SinkPart()

    flow = Dataflow("word_count")
    words = op.flat_map("split", op.input("sentences", flow, Source()), str.split)
    op.output("out", op.count_final("count", words, lambda w: w), Sink())
    kw = {}
    if RECOVERY:
        from bytewax.recovery import RecoveryConfig
        kw = {"recovery_config": RecoveryConfig(RECOVERY), "epoch_interval": timedelta(seconds=1)}
    if WORKERS == 1:
        run_main(flow, **kw)
    else:
        cluster_main(flow, ADDRS, PROC, **kw)
    rec["done"] = time.time()
    json.dump(rec, open(OUT, "w"))
''')


def _spawn(cmds: list[list[str]], tmp: str, env: dict | None = None) -> float:
    """Starts the processes together, waits for all; returns the spawn time. Raises on a failure
    or after TIMEOUT s (the process groups killed), with the end of their output."""
    logs = [Path(tmp, f"log-{i}.txt") for i in range(len(cmds))]
    t0 = time.time()
    procs = [subprocess.Popen(c, cwd=tmp, env=env, stdout=open(log, "w"), stderr=subprocess.STDOUT,
                              start_new_session=True) for c, log in zip(cmds, logs)]
    try:
        codes = [p.wait(timeout=max(1.0, t0 + TIMEOUT - time.time())) for p in procs]
    except subprocess.TimeoutExpired:
        for p in procs:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        for p in procs:
            p.wait()
        raise RuntimeError(f"timeout {TIMEOUT:g} s:\n" + "\n".join(log.read_text()[-1500:] for log in logs)) from None
    if any(codes):
        raise RuntimeError(f"exited {codes}:\n" + "\n".join(log.read_text()[-1500:] for log in logs))
    return t0


def run_peer(row: str, n: int, bytewax_batch: int) -> dict:
    py = str(compare_python())
    with tempfile.TemporaryDirectory(prefix=f"bench-peers-{row}-") as tmp:
        script = Path(tmp, "flow.py")
        if row.startswith("pathway"):
            script.write_text(PATHWAY_SRC)
            outs = [Path(tmp, "out.json")]
            env = {**os.environ, "PATHWAY_THREADS": "2", "PATHWAY_PROCESSES": "1"}
            mode = "static" if row == "pathway" else "stream"
            t0 = _spawn([[py, str(script), str(n), "2", str(outs[0]), mode]], tmp, env)
        else:
            workers = int(row.split("-")[1])
            script.write_text(BYTEWAX_SRC)
            recovery = ""
            if row.endswith("-rec"):  # a fresh recovery db each run (set up before the clock, as Redis is)
                recovery = str(Path(tmp, "recovery"))
                os.mkdir(recovery)
                subprocess.run([py, "-m", "bytewax.recovery", recovery, "1"], check=True, capture_output=True)
            addrs = ",".join(f"127.0.0.1:{p}" for p in _free_ports(workers))
            outs = [Path(tmp, f"out-{i}.json") for i in range(workers)]
            t0 = _spawn([[py, str(script), str(n), str(workers), str(outs[i]), str(i), str(bytewax_batch), addrs,
                          recovery] for i in range(workers)], tmp)
        recs = [json.loads(p.read_text()) for p in outs]
    counts: Counter = Counter()
    for r in recs:
        counts.update(r["counts"])
    first = min(r["first"] for r in recs if r["first"])
    last = max(r["last"] for r in recs if r["last"])
    # Processes making their input side by side: the slowest one's time is taken off.
    return {"spawned": t0, "done": max(r["done"] for r in recs), "gen_secs": max(r["gen"] for r in recs),
            "steady_secs": last - first, "counts": dict(counts), "state": "completed"}


# --- ours: one child process per run (``peers.py _run ROW``) ----------------------------------------
class ExactCountBolt(CountBolt):
    """bench/throughput.py's count bolt, also writing its per-word counts (to check them word by word)."""

    def prepare(self, conf, context):
        super().prepare(conf, context)
        self.words_to = Path(conf["bench.words.dir"], f"words-{context.task_index}")

    def cleanup(self):
        super().cleanup()
        self.words_to.write_text(json.dumps(self.counts))


def child_main(row: str, n: int, url: str, out: str) -> int:
    # Only making the input is taken off the wall; every import the run needs (redis-py with it)
    # and everything after it, up to the run's end, is in.
    if row.startswith("transactional"):
        from bench.trident import Workload, run_transactional

        batch = 3000 if row == "transactional-b3000" else TX_BATCH
        t = time.time()
        w = Workload(n * WORDS_PER_SENTENCE, min(batch, max(1, n // 6 // 2)))
    else:
        t = time.time()
        sentences = make_sentences(n)
    gen = time.time() - t
    words = n * WORDS_PER_SENTENCE
    if row in ("unacked", "acked"):
        from bench.throughput import run_variant

        outdir = tempfile.mkdtemp(prefix="bench-peers-")
        r = run_variant("local", sentences, workers=2, acking=row == "acked", extra_conf={"bench.words.dir": outdir},
                        count_bolt=ExactCountBolt)
        steady = words / r["words_per_sec"]
        counts: Counter = Counter()
        for p in Path(outdir).glob("words-*"):
            counts.update(json.loads(p.read_text()))
        shutil.rmtree(outdir, ignore_errors=True)
    elif row == "eo":
        from bench.rescale import run_exactly_once
        from examples.stateful_wordcount import counts_in_state

        r = run_exactly_once(sentences, url)
        steady = words / r["words_per_sec"]
        counts = Counter(counts_in_state(url, "bench-eo", "count"))
    else:
        import redis

        from state.values import ValueMap

        r = run_transactional(w, url, 4, str(os.getpid()), {"transactional-1c": 1, "transactional-tw": 0}.get(row, 2))
        steady = w.window_words / r["words_per_sec"]
        got = ValueMap(redis.Redis.from_url(url), "word-counts").get(list(w.truth))
        counts = Counter({k: v.value for k, v in got.items() if v is not None})
    Path(out).write_text(json.dumps({"gen_secs": gen, "done": r["end"], "steady_secs": steady, "counts": counts,
                                     "state": r["state"], "steady_words": w.window_words if row.startswith("transactional")
                                     else words}))
    return 0


def run_ours(row: str, n: int, url: str | None) -> dict:
    if url:  # the last run's keys, emptied before the clock starts (the run's own flush is then instant)
        import redis

        redis.Redis.from_url(url).flushall()
    with tempfile.TemporaryDirectory(prefix=f"bench-peers-{row}-") as tmp:
        out = Path(tmp, "out.json")
        t0 = _spawn([[sys.executable, str(Path(__file__).resolve()), "_run", row, "--sentences", str(n),
                      "--redis", url or "", "--out", str(out)]], tmp)
        r = json.loads(out.read_text())
    return {"spawned": t0, **r}


# --- the run -----------------------------------------------------------------------------------------
def run_row(row: str, n: int, url: str | None, truth: Counter, bytewax_batch: int) -> dict:
    try:
        r = run_ours(row, n, url) if row in OURS else run_peer(row, n, bytewax_batch)
    except (RuntimeError, OSError, ValueError) as e:  # recorded (counts MISMATCH), the other rows go on
        print(f"  {row} failed: {e}", file=sys.stderr, flush=True)
        return {"row": row, "wall_secs": None, "gen_secs": None, "words_per_sec_wall": 0, "words_per_sec_steady": 0,
                "steady_secs": None, "counted": 0, "counted_ok": False, "state": "failed", "error": str(e)[-2000:]}
    words = n * WORDS_PER_SENTENCE
    wall = r["done"] - r["spawned"] - r["gen_secs"]
    counts = Counter({k: v for k, v in r.pop("counts").items() if v})
    return {"row": row, "wall_secs": round(wall, 3), "gen_secs": round(r["gen_secs"], 3),
            "words_per_sec_wall": round(words / wall),
            "words_per_sec_steady": round(r.get("steady_words", words) / r["steady_secs"]),
            "steady_secs": round(r["steady_secs"], 3), "counted": sum(counts.values()),
            "counted_ok": counts == truth, "state": r["state"]}


def compile_ours() -> None:
    """Byte-compile this tree, as installing a package does for the peers' code in their venv.

    Without it, an environment with PYTHONDONTWRITEBYTECODE set (this machine's) compiles every
    module of ours from source in every run: ~0.1 s of each of our rows' wall that no installed
    copy pays."""
    import compileall

    for pkg in ("topology_runtime", "state", "bench", "examples"):
        if not compileall.compile_dir(str(ROOT / pkg), quiet=1):
            raise SystemExit(f"byte-compiling {pkg} failed")


def loadavg() -> float:
    return float(Path("/proc/loadavg").read_text().split()[0])


def fmt_ratio(a: float | None, b: float | None) -> str:
    return f"{a / b:.2f}" if a and b else "-"


def report(args, rows: list[str], runs: dict[str, list[dict]], loads: list[float]) -> tuple[str, dict]:
    best = {}
    for row in rows:
        rs = runs[row]
        top = dict(max(rs, key=lambda r: r["words_per_sec_wall"]))
        top["steady_best"] = max(r["words_per_sec_steady"] for r in rs)
        top["wall_rounds"] = [r["words_per_sec_wall"] for r in rs]
        top["all_ok"] = all(r["counted_ok"] and r["state"] == "completed" for r in rs)
        best[row] = top
    # The Pathway baseline: its faster mode in this run (static or streaming), by words/s wall.
    base = max((r for r in ("pathway", "pathway-stream") if r in best), default=None,
               key=lambda r: best[r]["words_per_sec_wall"])
    pw = best[base] if base else None
    lines = [f"{args.sentences:,} sentences x {WORDS_PER_SENTENCE} words = {args.sentences * WORDS_PER_SENTENCE:,} "
             f"words; best of {args.rounds} interleaved rounds; {os.cpu_count()} cores, Python "
             f"{platform.python_version()}, load average {min(loads):.2f}-{max(loads):.2f}", "",
             "| row | system | workers | words/s wall | rounds (wall) | wall s | words/s steady "
             f"| x {base or 'Pathway'} wall | x {base or 'Pathway'} steady | counts |",
             "|---|---|---|---:|---|---:|---:|---:|---:|---|"]
    for row in rows:
        top = best[row]
        counts = "exact" if top["all_ok"] else "MISMATCH " + ", ".join(
            f"{r['counted']:,}{'' if r['state'] == 'completed' else ' ' + r['state']}" for r in runs[row])
        lines.append(f"| {row} | {NAMES[row]} | {WORKERS.get(row, '2')} | {top['words_per_sec_wall']:,} | "
                     f"{', '.join(format(x, ',') for x in top['wall_rounds'])} | {top['wall_secs']} | "
                     f"{top['steady_best']:,} | "
                     f"{fmt_ratio(top['words_per_sec_wall'], pw['words_per_sec_wall'] if pw else None)} | "
                     f"{fmt_ratio(top['steady_best'], pw['steady_best'] if pw else None)} | {counts} |")
    lines.append("")
    for a, b in (("eo", "acked"), ("transactional", "eo"), ("transactional-1c", "eo"), ("transactional-b3000", "eo"), ("transactional-tw", "eo"),
                 ("unacked", base), ("acked", base), ("eo", base),
                 ("transactional", base)):
        if a in best and b in best and best[b]["steady_best"]:
            paired = sorted(x["words_per_sec_wall"] / y["words_per_sec_wall"] for x, y in zip(runs[a], runs[b])
                            if y["words_per_sec_wall"]) or [0.0]
            lines.append(f"{a} / {b}: wall {best[a]['words_per_sec_wall'] / best[b]['words_per_sec_wall']:.2f} best "
                         f"against best (per round median {statistics.median(paired):.2f}, "
                         f"{paired[0]:.2f}-{paired[-1]:.2f}); steady "
                         f"{best[a]['steady_best'] / best[b]['steady_best']:.2f}")
    return "\n".join(lines), best


def main(argv: list[str] | None = None) -> int:
    if argv is None:
        argv = sys.argv[1:]
    if argv[:1] == ["_run"]:
        c = argparse.ArgumentParser()
        c.add_argument("row")
        c.add_argument("--sentences", type=int, required=True)
        c.add_argument("--redis", default="")
        c.add_argument("--out", required=True)
        a = c.parse_args(argv[1:])
        return child_main(a.row, a.sentences, a.redis, a.out)
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sentences", type=int, default=100_000)
    p.add_argument("--rounds", type=int, default=3, help="interleaved rounds; best of them")
    p.add_argument("--only", default=",".join(ROWS), help=f"comma-separated rows: {', '.join(ROWS)}")
    p.add_argument("--bytewax-batch", type=int, default=1000, help="Bytewax: sentences per next_batch")
    p.add_argument("--timeout", type=float, default=TIMEOUT, help="s a run before it is killed (recorded as failed)")
    args = p.parse_args(argv)
    globals()["TIMEOUT"] = args.timeout
    rows = [r for r in args.only.split(",") if r]
    if not rows or not set(rows) <= set(ROWS):
        p.error(f"--only: expected some of {', '.join(ROWS)}")
    truth = Counter(w for s in make_sentences(args.sentences) for w in s.split())
    compile_ours()
    if any(r.startswith(("pathway", "bytewax")) for r in rows):
        compare_python()
    server = None
    if {"eo", *(r for r in ROWS if r.startswith("transactional"))} & set(rows):
        from bench.rescale import start_redis

        server = start_redis()
    runs: dict[str, list[dict]] = {r: [] for r in rows}
    loads = [loadavg()]
    try:
        for rnd in range(args.rounds):
            for row in rows[rnd % len(rows):] + rows[:rnd % len(rows)]:
                r = run_row(row, args.sentences, server.url if server else None, truth, args.bytewax_batch)
                r["loadavg"] = loadavg()
                loads.append(r["loadavg"])
                runs[row].append(r)
                print(f"  round {rnd + 1} {row}: {r['words_per_sec_wall']:,} words/s wall ({r['wall_secs']} s), "
                      f"{r['words_per_sec_steady']:,} steady, counts {'exact' if r['counted_ok'] else 'MISMATCH'}"
                      f" {r['counted']:,}, load {r['loadavg']}", file=sys.stderr, flush=True)
    finally:
        if server is not None:
            server.stop()
            shutil.rmtree(server.data_dir, ignore_errors=True)
    text, best = report(args, rows, runs, loads)
    print("\n" + text)
    out = ROOT / "bench" / "results"
    out.mkdir(exist_ok=True)
    (out / "peers.json").write_text(json.dumps({"args": vars(args), "load_average": [min(loads), max(loads)],
                                                "best": best, "runs": runs, "table": text}, indent=2))
    return 0 if all(b["all_ok"] for b in best.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
