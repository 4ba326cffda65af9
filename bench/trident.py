"""The Trident word count beside the hand-written transactional and exactly-once stateful word
counts, side by side in one run.

    python bench/trident.py [--words N] [--rounds R] [--batch S] [--pending P] [--profile DIR]

Data: bench/throughput.py's sentences (10 words drawn with random.Random(42) from w0..w9999),
N words in all, dealt round-robin into 2 partitions of a ``MemoryTransactionalSpout`` (one
emitter task each), S sentences per partition per batch. All three run on LocalCluster with 2
workers, parallelism 2, against a private redis-server started for the run (the exactly-once
run flushes its Redis):

* trident: ``new_stream(txid, spout).each(["sentence"], Split(), ["word"]).group_by(["word"])
  .persistent_aggregate(RedisMapState.opaque(key_prefix=...), Count(), ["count"])``: the split
  and a partial count per batch in one segment, the opaque map state's update in the other;
* transactional: bench/transactional.py's topology (``KeyedCount`` x2, one committer adding
  the batch's counts with ``ValueMap.multi_add``) over the same partitions, one row per word
  (its spout emits words: it has no split stage) and 10 x S rows per batch, so its batches hold
  the same words;
* exactly-once: bench/rescale.py's exactly-once stateful word count (sentences, split, a
  ``StatefulBolt`` counting into Redis state, checkpoints every second).

words/s: for the two transactional topologies, the words of batches 2..last over the time from
the end of the first commit to the end of the last (the commit that makes them durable; the
first batch's pipeline fill left out); for the exactly-once one, first sentence emitted -> last
word counted (as bench/rescale.py measures it). ``wall`` is submit -> run completed, start-up
and shutdown included, the same for all three. Rounds interleave the three (their order
rotating), best of R, ratios Trident / the others; every run's counts are checked word by word.
CPU: the workers' and Redis's per word inside the timed window (bench/cpu_window.py, medians
over the rounds: steadier than words/s on a shared machine), and the workers' per run (start-up
included: each emitter and coordinator task copies the in-memory spout's rows).

``--profile DIR``: one more Trident run (not timed in the table) with each worker sampled:
a stack sampler of all its threads every 2 ms (the loop and the committer's off-loop thread;
DIR/worker-N-threads.txt, folded stacks in .folded); ``--profiler pyinstrument`` (or
``sampler,pyinstrument``) adds pyinstrument on its loop thread (DIR/worker-N.txt, .html), whose
per-call hook slows the worker down (the profiled run's words/s is printed).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import sys
import threading
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import redis  # noqa: E402

from bench.cpu_window import CpuSampler  # noqa: E402
from bench.rescale import redis_cpu, run_exactly_once, start_redis  # noqa: E402
from bench.throughput import WORDS_PER_SENTENCE, make_sentences  # noqa: E402
from bench.transactional import build as build_transactional  # noqa: E402
from examples.stateful_wordcount import counts_in_state  # noqa: E402
from state.map_state import StateType  # noqa: E402
from state.values import ValueMap  # noqa: E402
from topology_runtime import LocalCluster  # noqa: E402
from topology_runtime.transactional import MemoryTransactionalSpout  # noqa: E402
from topology_runtime.trident import Count, Function, RedisMapState, TridentTopology  # noqa: E402

PARTITIONS = 2
WORKERS = 2
NAMES = {"trident": "Trident", "transactional": "hand-written transactional", "eo": "exactly-once stateful"}


class Split(Function):
    """bench/throughput.py's SplitBolt as a Trident function."""

    def execute(self, tup, collector):
        for w in tup[0].split():
            collector.emit([w])


class ClockedOpaqueState(RedisMapState):
    """``RedisMapState.opaque``, whose partitions also stamp when their commit of a txid in
    ``window`` ended (two SETs a run): the ends of the timed window, as bench/transactional.py's
    SlowSink stamps them for the hand-written committer."""

    def __init__(self, key_prefix: str, clock: str, window: list[int]) -> None:
        super().__init__(StateType.OPAQUE, None, key_prefix)
        self.clock, self.window = clock, window

    def make_state(self, conf, partition_index, num_partitions):
        state = super().make_state(conf, partition_index, num_partitions)
        commit, client, window, clock = state.commit, state.backing.client, set(self.window), self.clock

        def timed_commit(txid):
            commit(txid)
            if txid in window:
                client.set(f"{clock}:{txid}:{partition_index}", time.time())
        state.commit = timed_commit
        return state


def trident_topology(data: dict[int, list[tuple]], batch: int, txid: str, state: RedisMapState):
    t = TridentTopology()
    (t.new_stream(txid, MemoryTransactionalSpout(data, ["sentence"], batch)).parallelism_hint(WORKERS)
     .each(["sentence"], Split(), ["word"])
     .group_by(["word"])
     .persistent_aggregate(state, Count(), ["count"]).parallelism_hint(WORKERS))
    return t.build()


def process_tree(redis_pid: int):
    """name -> pid of this process's children (the run's workers) and of Redis, for CpuSampler."""
    me = os.getpid()

    def pids() -> dict[str, int]:
        out = {"redis": redis_pid}
        for task in Path(f"/proc/{me}/task").iterdir():
            try:
                kids = (task / "children").read_text().split()
            except OSError:
                continue
            out.update((f"worker {k}", int(k)) for k in kids if int(k) != redis_pid)
        return out
    return pids


def children_cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)  # LocalCluster's forked workers, once reaped
    return ru.ru_utime + ru.ru_stime


def loadavg() -> float:
    return float(Path("/proc/loadavg").read_text().split()[0])


class Workload:
    def __init__(self, words: int, batch: int) -> None:
        self.sentences = make_sentences(words // WORDS_PER_SENTENCE)
        self.words = len(self.sentences) * WORDS_PER_SENTENCE
        parts = {q: self.sentences[q::PARTITIONS] for q in range(PARTITIONS)}
        # Rows as tuples: the in-memory spout keeps a tuple row instead of copying it (a million
        # list copies: ~0.8 s inside the clock), and a tuple of strings leaves the GC's tracking,
        # so each forked worker's start-up collection does not walk a million lists (~0.2 s).
        self.sentence_rows = {q: [(s,) for s in part] for q, part in parts.items()}
        self.word_rows = {q: [(w,) for s in part for w in s.split()] for q, part in parts.items()}
        self.batch = batch
        self.batches = max(-(-len(part) // batch) for part in parts.values())
        # The words the timed window covers: every batch's but the first's.
        first = sum(len(s.split()) for part in parts.values() for s in part[:batch])
        self.window_words = self.words - first
        self.truth = Counter(w for s in self.sentences for w in s.split())


def run_trident(w: Workload, url: str, pending: int, tag: str) -> dict:
    client = redis.Redis.from_url(url)
    client.flushall()
    name, clock = f"bench-trident-{tag}", f"bench:trident-{tag}:clock"
    window = [1, w.batches]
    state = ClockedOpaqueState(f"bench-trident-{tag}", clock, window)
    conf = {"redis.url": url, "topology.max.spout.pending": pending}
    t0 = time.time()
    with LocalCluster(workers=WORKERS) as cluster:
        status = cluster.run(name, trident_topology(w.sentence_rows, w.batch, name, state), conf, timeout=1800)
    wall = time.time() - t0
    got: dict[str, int] = {}
    for i in range(WORKERS):
        s = state.make_state({"redis.url": url}, i, WORKERS)
        for word, n in s.get_tuples():
            got[word] = got.get(word, 0) + n
        s.close()
    ends = {}
    for txid in window:
        stamps = [client.get(f"{clock}:{txid}:{i}") for i in range(WORKERS)]
        ends[txid] = max(float(x) for x in stamps if x is not None)
    return {"words_per_sec": round(w.window_words / (ends[w.batches] - ends[1])), "wall_secs": round(wall, 2),
            "state": status.state, "counted_ok": got == w.truth, "window": [ends[1], ends[w.batches]],
            "window_words": w.window_words}


def run_transactional(w: Workload, url: str, pending: int, tag: str, committers: int = 1) -> dict:
    client = redis.Redis.from_url(url)
    client.flushall()
    name, clock = f"bench-tx-{tag}", f"bench:tx-{tag}:clock"
    take = w.batch * WORDS_PER_SENTENCE
    conf = {"redis.url": url, "topology.max.spout.pending": pending, "bench.commit.delay.ms": 0,
            "bench.clock.key": clock, "bench.window": [1, w.batches]}
    t0 = time.time()
    with LocalCluster(workers=WORKERS) as cluster:
        status = cluster.run(name, build_transactional(w.word_rows, take, name, PARTITIONS, committers), conf, timeout=1800)
    end = time.time()
    wall = end - t0
    got = ValueMap(client, "word-counts").get(list(w.truth))
    w0, w1 = float(client.get(f"{clock}:1")), float(client.get(f"{clock}:{w.batches}"))
    return {"words_per_sec": round(w.window_words / (w1 - w0)), "wall_secs": round(wall, 2), "end": end,
            "state": status.state, "counted_ok": {k: v.value for k, v in got.items()} == w.truth,
            "window": [w0, w1], "window_words": w.window_words}


def run_eo(w: Workload, url: str, pending: int, tag: str) -> dict:
    t0 = time.time()
    r = run_exactly_once(w.sentences, url)  # flushes the Redis first; topology id "bench-eo"
    wall = r["startup_secs"] + w.words / r["words_per_sec_to_end"]
    first = t0 + r["startup_secs"]  # its t0 is taken a few ms after ours: the window to ~10 ms
    return {"words_per_sec": r["words_per_sec"], "wall_secs": round(wall, 2), "state": r["state"],
            "counted_ok": r["counted_ok"] and counts_in_state(url, "bench-eo", "count") == w.truth,
            "window": [first, first + w.words / r["words_per_sec"]], "window_words": w.words}


RUNS = {"trident": run_trident, "transactional": run_transactional, "eo": run_eo}


# --- profiling a worker --------------------------------------------------------------------------
class ThreadSampler:
    """Samples the stacks of every thread of this process but its own every ``interval`` s
    (``sys._current_frames``, no per-call hook): where the loop thread's and an off-loop
    committer thread's time goes, by innermost frame and by frame on the stack."""

    def __init__(self, interval: float = 0.002) -> None:
        self.interval = interval
        self.stacks: Counter = Counter()
        self.samples: Counter = Counter()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="bench-sampler", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def _loop(self) -> None:
        me = threading.get_ident()
        while not self._stop.wait(self.interval):
            names = {t.ident: t.name for t in threading.enumerate()}
            for ident, frame in sys._current_frames().items():
                if ident == me:
                    continue
                stack = []
                f = frame
                while f is not None:
                    stack.append(f"{f.f_code.co_name} ({Path(f.f_code.co_filename).name}:{f.f_lineno})")
                    f = f.f_back
                name = names.get(ident, str(ident))
                self.samples[name] += 1
                self.stacks[(name, ";".join(reversed(stack)))] += 1

    def report(self) -> str:
        lines = [f"sampled every {self.interval * 1000:g} ms; a thread blocked in C (zmq poll, a socket read, "
                 "a queue wait) shows its innermost Python frame"]
        for name, n in self.samples.most_common():
            lines.append(f"\nthread {name}: {n} samples")
            leaves: Counter = Counter()
            inclusive: Counter = Counter()
            for (t, stack), c in self.stacks.items():
                if t != name:
                    continue
                frames = stack.split(";")
                leaves[frames[-1]] += c
                for fr in set(frames):
                    inclusive[fr] += c
            lines.append("  innermost Python frame:")
            lines += [f"    {c / n:6.1%}  {fr}" for fr, c in leaves.most_common(25)]
            lines.append("  on the stack:")
            lines += [f"    {c / n:6.1%}  {fr}" for fr, c in inclusive.most_common(40)]
        return "\n".join(lines) + "\n"

    def collapsed(self) -> str:
        """Brendan Gregg's folded stacks (flamegraph.pl, speedscope), thread name first."""
        return "".join(f"{t};{stack} {c}\n" for (t, stack), c in self.stacks.most_common())


def profiled_run_worker(outdir: Path, profilers: set[str]):
    from topology_runtime.launchers import local

    run_worker = local.run_worker

    def wrapper(spec, *args, **kwargs):
        profiler = None
        if "pyinstrument" in profilers:
            from pyinstrument import Profiler

            profiler = Profiler(interval=0.001)
        sampler = ThreadSampler() if "sampler" in profilers else None
        if sampler is not None:
            sampler.start()
        if profiler is not None:
            profiler.start()
        try:
            return run_worker(spec, *args, **kwargs)
        finally:
            # Quick files first: the launcher kills a worker still alive 5 s after the run ended.
            base = outdir / f"worker-{spec.index}"
            if profiler is not None:
                profiler.stop()
            if sampler is not None:
                sampler.stop()
                Path(f"{base}-threads.txt").write_text(sampler.report())
                Path(f"{base}-threads.folded").write_text(sampler.collapsed())
            if profiler is not None:
                Path(f"{base}.txt").write_text(profiler.output_text(unicode=False, show_all=False))
                Path(f"{base}.html").write_text(profiler.output_html())
    return local, run_worker, wrapper


def profile(w: Workload, url: str, pending: int, outdir: Path, profilers: set[str]) -> dict:
    outdir.mkdir(parents=True, exist_ok=True)
    local, original, wrapper = profiled_run_worker(outdir, profilers)
    local.run_worker = wrapper  # the workers are forked from here: they run the wrapper
    try:
        return run_trident(w, url, pending, "profile")
    finally:
        local.run_worker = original


# --- main ------------------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--words", type=int, default=500_000, help="words in all (sentences of 10)")
    p.add_argument("--rounds", type=int, default=3, help="interleaved rounds; words/s is the best of them")
    p.add_argument("--batch", type=int, default=900,
                   help="sentences per partition per batch (x 2 partitions x 10 words: 18,000 words a batch)")
    p.add_argument("--pending", type=int, default=4, help="topology.max.spout.pending of the transactional two")
    p.add_argument("--only", default="trident,transactional,eo")
    p.add_argument("--profile", default=None, metavar="DIR", help="then profile one Trident run's workers into DIR")
    p.add_argument("--profiler", default="sampler",
                   help="with --profile: sampler (every thread, no per-call hook: the run keeps its speed), "
                        "pyinstrument (the loop thread's call tree; its per-call hook slows the worker ~1.6x) or both")
    args = p.parse_args(argv)
    variants = [v for v in args.only.split(",") if v]
    if not set(variants) <= set(RUNS):
        p.error(f"--only: expected some of {', '.join(RUNS)}")
    w = Workload(args.words, args.batch)
    if w.batches < 3:
        p.error(f"--words {args.words} with --batch {args.batch} makes {w.batches} batches: need at least 3")
    server = start_redis()
    url = server.url
    pids = process_tree(int(redis.Redis.from_url(url).info("server")["process_id"]))
    runs: dict[str, list[dict]] = {v: [] for v in variants}
    loads = [loadavg()]
    try:
        for rnd in range(args.rounds):
            order = variants[rnd % len(variants):] + variants[:rnd % len(variants)]
            for v in order:
                cpu0, rcpu0 = children_cpu(), redis_cpu(url)
                with CpuSampler(pids) as sampler:
                    r = RUNS[v](w, url, args.pending, f"{os.getpid()}-{rnd}")
                r["cpu_secs"] = round(children_cpu() - cpu0, 2)
                r["redis_cpu_secs"] = round(redis_cpu(url) - rcpu0, 2)
                # In the timed window only: the workers' and Redis's CPU per word counted.
                used = sampler.between(*r["window"])
                r["worker_us_per_word"] = round(1e6 * sum(c for k, c in used.items() if k != "redis")
                                                / r["window_words"], 2)
                r["redis_us_per_word"] = round(1e6 * used.get("redis", 0.0) / r["window_words"], 2)
                r["loadavg"] = loadavg()
                loads.append(r["loadavg"])
                runs[v].append(r)
                print(f"  round {rnd + 1} {v}: {r['words_per_sec']:,} words/s, wall {r['wall_secs']}s, "
                      f"CPU {r['cpu_secs']}s + Redis {r['redis_cpu_secs']}s (timed window: "
                      f"{r['worker_us_per_word']} + {r['redis_us_per_word']} us a word), counts "
                      f"{'OK' if r['counted_ok'] else 'WRONG'}, load {r['loadavg']}", file=sys.stderr, flush=True)
        prof = None
        if args.profile:
            prof = profile(w, url, args.pending, Path(args.profile), set(args.profiler.split(",")))
            print(f"  profiled trident run: {prof['words_per_sec']:,} words/s, counts "
                  f"{'OK' if prof['counted_ok'] else 'WRONG'}; profiles in {args.profile}", file=sys.stderr)
    finally:
        server.stop()
    if runs and all(runs.values()):
        report(args, w, variants, runs, loads)
    out = ROOT / "bench" / "results"
    out.mkdir(exist_ok=True)
    (out / "trident.json").write_text(json.dumps({"args": vars(args), "runs": runs}, indent=2))
    ok = all(r["counted_ok"] and r["state"] == "completed" for rs in runs.values() for r in rs)
    return 0 if ok and (prof is None or prof["counted_ok"]) else 1


def code_version() -> str:
    """HEAD, and the runtime's and states' files with uncommitted changes (the tree that ran)."""
    import subprocess

    def git(*a: str) -> str:
        return subprocess.run(["git", "-C", str(ROOT), *a], capture_output=True, text=True).stdout
    dirty = git("status", "--porcelain", "--", "topology_runtime", "state", "bench").splitlines()
    edits = [line[3:] for line in dirty if not line.startswith("??")]
    head = git("rev-parse", "--short", "HEAD").strip()
    return head + (f" with uncommitted changes to {', '.join(edits)}" if edits else "")


def report(args, w: Workload, variants: list[str], runs: dict[str, list[dict]], loads: list[float]) -> None:
    best = {v: max(r["words_per_sec"] for r in rs) for v, rs in runs.items()}
    print(f"\n{w.words:,} words ({len(w.sentences):,} sentences x {WORDS_PER_SENTENCE}), {PARTITIONS} partitions, "
          f"{w.batches} batches of {PARTITIONS * args.batch * WORDS_PER_SENTENCE:,} words, max.spout.pending "
          f"{args.pending}; LocalCluster {WORKERS} workers, parallelism {WORKERS}; best of {args.rounds} interleaved "
          f"rounds; {os.cpu_count()} cores, load average {min(loads):.2f}-{max(loads):.2f}; code {code_version()}\n")
    print("| word count | words/s (best) | rounds | x transactional | x exactly-once | workers' CPU us a word "
          "| Redis CPU us a word | wall s (best) | CPU s a run | counts |")
    print("|---|---:|---|---:|---:|---:|---:|---:|---:|---|")
    for v in variants:
        rs = runs[v]
        x_tx = f"{best[v] / best['transactional']:.2f}" if "transactional" in best else "-"
        x_eo = f"{best[v] / best['eo']:.2f}" if "eo" in best else "-"
        ok = all(r["counted_ok"] and r["state"] == "completed" for r in rs)
        print(f"| {NAMES[v]} | {best[v]:,} | {', '.join(format(r['words_per_sec'], ',') for r in rs)} | "
              f"{x_tx} | {x_eo} | {statistics.median(r['worker_us_per_word'] for r in rs):.2f} | "
              f"{statistics.median(r['redis_us_per_word'] for r in rs):.2f} | {min(r['wall_secs'] for r in rs)} | "
              f"{statistics.median(r['cpu_secs'] for r in rs):.1f} | {'exact' if ok else 'WRONG'} |")
    if "trident" in runs:
        print()
        for other in ("transactional", "eo"):
            if other not in runs:
                continue
            paired = sorted(a["words_per_sec"] / b["words_per_sec"] for a, b in zip(runs["trident"], runs[other]))
            print(f"Trident / {NAMES[other]}: {best['trident'] / best[other]:.2f} best against best; per round "
                  f"median {statistics.median(paired):.2f} ({paired[0]:.2f}-{paired[-1]:.2f})")


if __name__ == "__main__":
    sys.exit(main())
