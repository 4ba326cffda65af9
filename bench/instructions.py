"""Machine instructions per tuple on the worker's hot paths, at several commits, side by side:
counted by valgrind (cachegrind), so the figure does not move with the machine's speed.

    .venv/bin/python bench/instructions.py --revs BASE[,REV...] [--tuples N]

On a shared 2-core machine the words/s of a run swing by 2x within minutes, and a change worth 5%
cannot be told from noise without many rounds. Instructions executed are nearly deterministic
(±2%: the words, hash seeds), so a per-tuple change shows in one run. Each path runs in one
process, in the commit's own tree (a ``git worktree``), without workers or sockets:

* emit: a BasicBolt's ``emit([word])`` while executing an anchored input, fields grouping onto 2
  tasks (the split bolt of the word count); ``deliver`` is a no-op;
* count: ``BoltExecutor.process`` of a bolt that reads and writes a Redis-backed state (the
  view loaded once) and acks (the count bolt of the word count);
* pipeline: a word's whole way through worker 0 of the 2-worker word count, figures a word:
  the sentence delivered to the split, split, emit, local delivery and the queue drain, the
  batch to worker 1 (packed) and as many words back (unpacked, queued), the count (a dict)
  and its automatic ack; acked, also the acker (a real one, local) and the spout's outcomes.

Each is run in ``eo`` (exactly-once: lineage, an ack only counts) and ``acked`` mode. The figure
is (instructions at 3 rounds - at 1 round) / (2 x N): start-up cancels out. Needs valgrind. The
working tree is the last column, as ``HEAD`` is: commit first (``--revs`` names commits).
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # the project's packages, ahead of bench/'s own modules

CHILD = r'''
import random, sys
from topology_runtime import BasicBolt, Bolt, Spout, TopologyBuilder, TopologyContext
from topology_runtime.api.components import Tuple
from topology_runtime.plan.planner import build_plan
from topology_runtime.worker import routing
from topology_runtime.worker.bolt_executor import BoltExecutor
from topology_runtime.worker.port import WorkerPort

path, mode, rounds, n, url = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]


class Src(Spout):
    outputs = ["line"]


class Split(BasicBolt):
    outputs = ["word"]


class Count(Bolt):
    outputs = {}

    def execute(self, tup):
        w = tup.values[0]
        self.counts.put(w, self.counts.get(w, 0) + 1)
        self.ack(tup)


b = TopologyBuilder()
b.set_spout("src", Src())
b.set_bolt("split", Split()).shuffle_grouping("src")
b.set_bolt("count", Count(), 2).fields_grouping("split", ["word"])
plan = build_plan(b.create_topology(), {"topology.acker.executors": 1}, workers=1)
port = WorkerPort(deliver=lambda *m: None, enqueue=None, record_error=None, run_off_loop=None, barrier_done=None,
                  exactly_once_failure=None, preferred_acker_slot=lambda: 0, n_ackers=1, streams=plan.streams,
                  exactly_once=mode == "eo")
rng = random.Random(42)
words = [f"w{rng.randrange(10000)}" for _ in range(n)]
component = "split" if path == "emit" else "count"
task = plan.component_tasks[component][0]
ctx = TopologyContext(task, component, 0, plan.component_tasks, topology=plan.topology)
routes = routing.build_routes(plan, component, task, set(plan.task_component), ctx)
info = next(s for s in plan.streams if s.component == "split" and s.stream == "default")
if path == "emit":
    bolt = Split()
    ex = BoltExecutor(port, task, component, bolt, routes, basic=True)
    ex.current = Tuple(["a line"], info, 1, {12345: 0})
    emit = bolt.emit
    for _ in range(rounds):
        for w in words:
            emit([w])
elif path == "pipeline":
    # The word count's worker 0 of 2: the split and one count task here, the other count task on
    # worker 1. Its tuples leave in batches; worker 1's split sends as many back for the count
    # here, through the same unpack and queueing as a real batch (the words of this worker's
    # own batches, readdressed). Acked: the acker messages go to a real acker here (this
    # worker's spout's roots), its outcomes to a spout stand-in.
    import collections, gc, types
    from topology_runtime.transport.sockets import pack, unpack
    from topology_runtime.worker import delivery
    from topology_runtime.worker.acker_executor import AckerExecutor
    from topology_runtime.worker.acker_routing import AckerRouting
    from topology_runtime.worker.worker import Worker

    class Counting(BasicBolt):
        outputs = ["word", "count"]

        def __init__(self):
            self.counts = {}

        def execute(self, tup):
            w = tup.values[0]
            self.counts[w] = self.counts.get(w, 0) + 1

    class Stand:  # what the send path, the batch path and the drain read of a worker; a spout
        pass

    plan2 = build_plan(b.create_topology(), {"topology.acker.executors": 1}, workers=2)
    split_task = plan2.component_tasks["split"][0]
    here = plan2.task_worker[split_task]
    local = set(plan2.tasks_of_worker(here))
    (count_here,) = [t for t in plan2.component_tasks["count"] if t in local]
    src_task = plan2.component_tasks["src"][0]
    fw = Stand()
    fw.queue, fw.completed_calls = collections.deque(), collections.deque()
    fw.local_bolts, fw.outbox, fw.task_worker, fw.streams = {}, {}, plan2.task_worker, plan2.streams
    fw.priority_sids = fw.checkpoint_sids = fw.chunk_sids = fw.send_now_sids = fw.special_sids = frozenset()
    fw.batch_size, fw.dequeued, fw.recv_batches, fw.misrouted = 100, 0, 0, 0
    fw.outbox_tuples = {}  # per peer: tuples in its next batch (where the code counts them)
    spout = Stand()
    spout.done = 0

    def on_outcome(kind, root):
        spout.done += 1
    spout.on_outcome = on_outcome
    acker = AckerExecutor(1000)
    fw.acking = AckerRouting([1000], {1000: acker}, {src_task: spout}, plan2.task_worker, fw.outbox)
    sent = []

    def send_peer(w):
        ob = fw.outbox.pop(w, None)
        fw.outbox_tuples.pop(w, None)
        if ob:
            sent.append(pack([here, *ob]))
    fw._send_peer, fw._run_completions = send_peer, lambda: None

    def flush(*_):  # the worker's acker flush (Worker._flush), without the sockets
        port = fw.port
        inits, port.inits = port.inits, []
        acks, port.acks = port.acks, {}
        fw.acking.apply(inits, [(r, v) for r, v in acks.items() if v], [], [])
    fw._stay_responsive = flush
    deliver = delivery.make_deliver(fw)
    fw.port = port = WorkerPort(deliver=deliver, enqueue=None, record_error=None, run_off_loop=None, barrier_done=None,
                                exactly_once_failure=None, preferred_acker_slot=lambda: 0, n_ackers=1,
                                streams=plan2.streams, exactly_once=mode == "eo")
    for t in sorted(local):
        comp = plan2.task_component[t]
        if comp not in ("split", "count"):
            continue
        c = TopologyContext(t, comp, plan2.task_index(t), plan2.component_tasks, topology=plan2.topology)
        bolt = Counting() if comp == "count" else Split()
        if comp == "split":
            bolt.execute = lambda tup, b=bolt: [b.emit([w]) for w in tup.values[0].split()]
        fw.local_bolts[t] = BoltExecutor(port, t, comp, bolt, routing.build_routes(plan2, comp, t, local, c),
                                         basic=True)
    drain = types.MethodType(Worker._drain_queue, fw)
    handle_batch = types.MethodType(Worker._handle_batch, fw)
    src_info = next(s for s in plan2.streams if s.component == "src" and s.stream == "default")
    sentences = [" ".join(words[i:i + 10]) for i in range(0, n, 10)]
    gc.collect()
    gc.freeze()
    gc.set_threshold(50_000, 50, 100)  # as a worker runs (worker.py)
    acked = mode == "acked"
    root = 0
    for _ in range(rounds):
        back = []
        for i, s in enumerate(sentences):
            root += 1
            edge = root * 2654435761 & 0xFFFFFFFFFFFF
            if acked:
                port.inits.append((root, edge, src_task))
            deliver(split_task, [s], src_info, src_task, {root: 0 if mode == "eo" else edge})
            if not i % 64 or i == len(sentences) - 1:
                while fw.queue:
                    drain()
                flush()
                send_peer(1 - here)
                # worker 1's words for the count here: this worker's own, readdressed; their
                # acks XOR the same edges, so each tree completes once both halves are acked
                back += [pack([1 - here, [[count_here, *d[1:]] for d in unpack(p)[1]], [], {}, [], [], []])
                         for p in sent]
                sent.clear()
        for p in back:
            handle_batch(p)
            drain()
        flush()
else:
    import redis
    from state import RedisKeyValueState

    bolt = Count()
    ex = BoltExecutor(port, task, component, bolt, routes, basic=False)
    client = redis.Redis.from_url(url)
    client.delete(*client.keys("{bench-instructions:*") or ["-"])
    bolt.counts = RedisKeyValueState(client, "bench-instructions", "count", 0)
    bolt.counts.get("w0")  # the view loaded: the per-tuple path only from here
    tuples = [Tuple([w], info, 1, {12345: 0}) for w in words]
    process = ex.process
    for _ in range(rounds):
        for t in tuples:
            process(t)
'''


def instructions(tree: Path, path: str, mode: str, rounds: int, n: int, url: str) -> int:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "cg.out"
        r = subprocess.run(["valgrind", "--tool=cachegrind", "--cache-sim=no", f"--cachegrind-out-file={out}",
                            sys.executable, "-c", CHILD, path, mode, str(rounds), str(n), url],
                           cwd=tree, capture_output=True, text=True, timeout=1800,
                           env={**os.environ, "PYTHONPATH": str(tree)})
        m = re.search(r"I\s+refs:\s+([\d,]+)", r.stderr)
        if r.returncode or not m:
            raise SystemExit(f"{tree} {path} {mode}: failed\n{r.stderr[-3000:]}")
        return int(m.group(1).replace(",", ""))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--revs", required=True, help="commits, comma-separated (the first is the base of the ratios)")
    p.add_argument("--tuples", type=int, default=50_000, help="tuples a round")
    p.add_argument("--paths", default="emit,count,pipeline", help="which paths (default: all three)")
    p.add_argument("--redis", default=None, help="a Redis for the count path (default: the project's)")
    args = p.parse_args(argv)
    url = args.redis
    if not url:
        from topology_runtime.control.redis_server import resolve_redis_url

        url = resolve_redis_url(None)[0]
    revs = args.revs.split(",")
    names = [subprocess.run(["git", "rev-parse", "--short", r], cwd=ROOT, capture_output=True, text=True,
                            check=True).stdout.strip() for r in revs]
    table: dict[tuple[str, str], list[float]] = {}
    with tempfile.TemporaryDirectory(prefix="bench-instr-") as tmp:
        trees = []
        for name in names:
            tree = Path(tmp) / name
            subprocess.run(["git", "worktree", "add", "--detach", str(tree), name], cwd=ROOT, check=True,
                           capture_output=True)
            trees.append(tree)
        try:
            for path in args.paths.split(","):
                for mode in ("eo", "acked"):
                    row = table[(path, mode)] = []
                    for name, tree in zip(names, trees):
                        one = instructions(tree, path, mode, 1, args.tuples, url)
                        three = instructions(tree, path, mode, 3, args.tuples, url)
                        row.append((three - one) / (2 * args.tuples))
                        print(f"  {name} {path} {mode}: {row[-1]:,.0f} instructions a tuple", file=sys.stderr, flush=True)
        finally:
            for tree in trees:
                subprocess.run(["git", "worktree", "remove", "--force", str(tree)], cwd=ROOT, check=False)
    print(f"\ninstructions a tuple (cachegrind), {args.tuples:,} tuples a round\n")
    heads = names + [f"{n} / {names[0]}" for n in names[1:]]
    print("| path | mode | " + " | ".join(heads) + " |")
    print("|---|---|" + "---:|" * len(heads))
    for (path, mode), row in table.items():
        cells = [f"{x:,.0f}" for x in row] + [f"{x / row[0]:.2f}" for x in row[1:]]
        print(f"| {path} | {mode} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
