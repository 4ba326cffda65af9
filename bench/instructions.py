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
  view loaded once) and acks (the count bolt of the word count).

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
            for path in ("emit", "count"):
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
