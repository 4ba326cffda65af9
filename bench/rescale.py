"""What rescaling a keyed component costs, and what key groups cost the word count.

``python bench/rescale.py [--keys N] [--key-groups G] [--changed N] [--repeat R] [--redis URL]``

A keyed component's state (state/keyed_state.py: one slot per key group) holding N keys
(default 1,000,000: msgpack str keys "k0".."k{N-1}", int values) is written by 2 tasks and
committed, then rescaled 2 -> 4 and 4 -> 2 as a launcher does it, phase by phase, on a real
Redis: (a) the launch check ``state.namespaces.check`` (plus recording the new shape), (b) every
new task's ``KeyGroupedState.open`` (claim + txid reads, one pipeline) and its first ``get``
(every group's hashes in one pipeline, then decoded), (c) one checkpoint (prepare_commit then
commit on every task) with nothing changed and with ``--changed`` keys changed. What moved is
checked by comparing every key of the id (``DEBUG DIGEST-VALUE``, else a hash of ``DUMP``)
before and after. The contrast: the same keys in the earlier layout (one hash per task, routed
by hash % tasks as at 4ceeba2), moved by hand (HGETALL, HSET to the new owner, HDEL).

``python bench/rescale.py wordcount [--before REV] [--after REV | --trees DIR DIR] [--repeat 3] [--sentences N] [--profile DIR]``

The exactly-once stateful word count and the plain acked word count (bench/throughput.py's
workload and count bolt; 2 workers) at two commits (default 4ceeba2 and HEAD: ``git worktree``s in a
temporary directory, removed after; or ``--trees``: two checkouts made beforehand, left in
place), rounds interleaved, best of ``--repeat`` and the median of the per-round ratios. Each run
is a child process with the tree first on ``sys.path`` and as its cwd (the same venv).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# A child run (``_run --tree DIR``) imports the runtime from DIR, not from this tree.
TREE = sys.argv[sys.argv.index("--tree") + 1] if "--tree" in sys.argv else str(ROOT)
sys.path.insert(0, TREE)

from topology_runtime import ReplayableSpout, StatefulBolt  # noqa: E402

TOPOLOGY = "bench-rescale"
PER_TASK = "bench-rescale-pertask"
COMPONENT = "count"


# --- the rescale -------------------------------------------------------------------------------
def start_redis():
    """A private redis-server (the project's defaults: AOF, fsync every second) with DEBUG
    allowed from localhost (DIGEST-VALUE) and no automatic AOF rewrite (a fork mid-phase)."""
    from topology_runtime.control.redis_server import RedisServer

    class DebugRedis(RedisServer):
        def args(self) -> list[str]:
            return super().args() + ["--enable-debug-command", "local", "--auto-aof-rewrite-percentage", "0"]

    return DebugRedis(tempfile.mkdtemp(prefix="bench-rescale-")).start()


def ms(secs: float) -> float:
    return round(secs * 1000, 1)


def net_in(client) -> int:
    return int(client.info("stats")["total_net_input_bytes"])


def net_out(client) -> int:
    return int(client.info("stats")["total_net_output_bytes"])


def snapshot(client, topology_id: str) -> dict[bytes, tuple]:
    """Every key of the id -> (type, length, digest of its value)."""
    keys = sorted(client.scan_iter(match=f"topology:{{{topology_id}:*", count=1000))
    out = {}
    for k in keys:
        kind = client.type(k).decode()
        n = client.hlen(k) if kind == "hash" else None
        try:
            d = client.execute_command("DEBUG", "DIGEST-VALUE", k)[0]
        except Exception:  # noqa: BLE001 - DEBUG refused (--redis): a hash of the serialized value
            d = hashlib.sha256(client.dump(k) or b"").hexdigest()
        out[k] = (kind, n, d)
    return out


def compare(before: dict, after: dict) -> dict:
    def kind(k: bytes) -> str:
        return k.decode().rsplit(":", 1)[1]

    changed = [k for k in before.keys() & after.keys() if before[k] != after[k]]
    state = [k for k in before if kind(k) == "state"]
    return {"state_hashes": len(state), "state_changed": sum(1 for k in changed if kind(k) == "state"),
            "state_entries": sum(before[k][1] for k in state),
            "state_entries_after": sum(after[k][1] for k in after if kind(k) == "state"),
            "changed": sorted({kind(k) for k in changed}), "n_changed": len(changed),
            "created": sorted({kind(k) for k in after.keys() - before.keys()}),
            "n_created": len(after.keys() - before.keys()),
            "deleted": sorted({kind(k) for k in before.keys() - after.keys()}),
            "n_deleted": len(before.keys() - after.keys())}


def key_names(n: int) -> list[str]:
    return [f"k{i}" for i in range(n)]


def write_keyed(client, keys: list[str], tasks: int, groups: int, token: int, txid: int) -> dict:
    from state import namespaces
    from state.keyed_state import KeyGroupedState
    from state.keygroups import group_range, key_hash, task_of_group

    for c in namespaces.check(client, TOPOLOGY, namespaces.StateComponents({COMPONENT: tasks},
                                                                          key_groups={COMPONENT: groups})):
        client.execute_command(*c)
    t0 = time.perf_counter()
    states = [KeyGroupedState.open(client, TOPOLOGY, COMPONENT, i, group_range(i, tasks, groups), groups, 1, token=token)
              for i in range(tasks)]
    for i, k in enumerate(keys):
        states[task_of_group(key_hash(k, 1) % groups, tasks, groups)].put(k, i)
    t1 = time.perf_counter()
    for st in states:
        st.prepare_commit(txid)
    for st in states:
        st.commit(txid)
    return {"put_ms": ms(t1 - t0), "checkpoint_ms": ms(time.perf_counter() - t1)}


def rescale_keyed(client, keys: list[str], old: int, new: int, groups: int, token: int, txid: int,
                  changed: int) -> tuple[dict, int]:
    """One rescale, phase by phase; returns the figures and the next txid."""
    from state import namespaces
    from state.keyed_state import KeyGroupedState
    from state.keygroups import group_range, key_hash, task_of_group

    r: dict = {"rescale": f"{old} -> {new}"}
    before = snapshot(client, TOPOLOGY)
    b_in, b_out = net_in(client), net_out(client)
    # (a) the launch check, then the new shape recorded (a launcher's record_components)
    t = time.perf_counter()
    commands = namespaces.check(client, TOPOLOGY, namespaces.StateComponents({COMPONENT: new},
                                                                             key_groups={COMPONENT: groups}))
    r["check_ms"] = ms(time.perf_counter() - t)
    t = time.perf_counter()
    for c in commands:
        client.execute_command(*c)
    r["record_ms"] = ms(time.perf_counter() - t)
    # (b) every new task opens its state, then loads it (its first get)
    states, opens, loads = [], [], []
    for i in range(new):
        t = time.perf_counter()
        st = KeyGroupedState.open(client, TOPOLOGY, COMPONENT, i, group_range(i, new, groups), groups, 1, token=token)
        opens.append(time.perf_counter() - t)
        t = time.perf_counter()
        st.get("absent")
        loads.append(time.perf_counter() - t)
        states.append(st)
    r.update(open_ms=ms(sum(opens)), open_max_ms=ms(max(opens)), load_ms=ms(sum(loads)), load_max_ms=ms(max(loads)),
             parts=sum(len(st.parts) for st in states))
    r["read_mb"] = round((net_out(client) - b_out) / 1e6, 1)
    r["sent_kb"] = round((net_in(client) - b_in) / 1e3, 1)
    # (c) one checkpoint, nothing changed
    c_in = net_in(client)
    t = time.perf_counter()
    for st in states:
        st.prepare_commit(txid)
    t1 = time.perf_counter()
    for st in states:
        st.commit(txid)
    r.update(prepare_ms=ms(t1 - t), commit_ms=ms(time.perf_counter() - t1))
    r["checkpoint_sent_kb"] = round((net_in(client) - c_in) / 1e3, 1)
    r["total_ms"] = round(r["check_ms"] + r["record_ms"] + r["open_ms"] + r["load_ms"] + r["prepare_ms"]
                          + r["commit_ms"], 1)
    r.update(compare(before, snapshot(client, TOPOLOGY)))
    # every key found by its new owner, with its value
    owner = [task_of_group(key_hash(k, 1) % groups, new, groups) for k in keys]
    r["found_ok"] = all(states[o].get(k) == i for i, (k, o) in enumerate(zip(keys, owner)))
    # (c') one checkpoint with ``changed`` keys changed (spread over the key space)
    txid += 1
    step = max(1, len(keys) // max(1, changed))
    for i in range(0, len(keys), step)[:changed]:
        states[owner[i]].put(keys[i], i)
    t = time.perf_counter()
    for st in states:
        st.prepare_commit(txid)
    t1 = time.perf_counter()
    for st in states:
        st.commit(txid)
    r.update(changed_prepare_ms=ms(t1 - t), changed_commit_ms=ms(time.perf_counter() - t1))
    return r, txid + 1


def per_task_layout(client, keys: list[str], tasks: int) -> dict:
    """The same keys in 4ceeba2's layout: one hash per task, a key at hash % tasks."""
    from state.keygroups import key_hash
    from state.redis_kv import RedisKeyValueState

    states = [RedisKeyValueState(client, PER_TASK, COMPONENT, i) for i in range(tasks)]
    for i, k in enumerate(keys):
        states[key_hash(k, 1) % tasks].put(k, i)
    for st in states:
        st.prepare_commit(1)
        st.commit(1)
    return {"tasks": tasks}


def per_task_checkpoint(client, keys: list[str], tasks: int, changed: int, txid: int) -> dict:
    """One checkpoint of the per-task layout's tasks (after their load), for comparison."""
    from state.keygroups import key_hash
    from state.redis_kv import RedisKeyValueState

    states = [RedisKeyValueState(client, PER_TASK, COMPONENT, i) for i in range(tasks)]
    t = time.perf_counter()
    for st in states:
        st.get("absent")
    load = time.perf_counter() - t
    out = {"load_ms": ms(load)}
    for label, n in (("", 0), ("changed_", changed)):
        step = max(1, len(keys) // max(1, n)) if n else len(keys) + 1
        for i in range(0, len(keys), step)[:n]:
            states[key_hash(keys[i], 1) % tasks].put(keys[i], i)
        t = time.perf_counter()
        for st in states:
            st.prepare_commit(txid)
        t1 = time.perf_counter()
        for st in states:
            st.commit(txid)
        out.update({f"{label}prepare_ms": ms(t1 - t), f"{label}commit_ms": ms(time.perf_counter() - t1)})
        txid += 1
    return out


def hand_move(client, old: int, new: int) -> dict:
    """What a rescale of the per-task layout would have to do: every entry whose task changes
    (hash % old != hash % new) read, written to its new task's hash, deleted from the old one
    (not atomic, not fenced: a lower bound)."""
    from state.keygroups import key_hash
    from state.layout import state_key
    from state.serializer import loads

    t0 = time.perf_counter()
    b_in = net_in(client)
    moved = moved_bytes = 0
    olds = {i: client.hgetall(state_key(PER_TASK, COMPONENT, i, "state")) for i in range(old)}
    pipe = client.pipeline(transaction=False)
    for i, raw in olds.items():
        to: dict[int, list] = defaultdict(list)
        gone = []
        for k, v in raw.items():
            j = key_hash(loads(k), 1) % new
            if j != i:
                to[j] += (k, v)
                gone.append(k)
                moved += 1
                moved_bytes += len(k) + len(v)
        for j, kv in to.items():
            for c in range(0, len(kv), 2000):
                pipe.execute_command("HSET", state_key(PER_TASK, COMPONENT, j, "state"), *kv[c:c + 2000])
        for c in range(0, len(gone), 1000):
            pipe.execute_command("HDEL", state_key(PER_TASK, COMPONENT, i, "state"), *gone[c:c + 1000])
    pipe.execute()
    return {"moved": moved, "moved_mb": round(moved_bytes / 1e6, 1), "secs": round(time.perf_counter() - t0, 2),
            "sent_mb": round((net_in(client) - b_in) / 1e6, 1)}


def would_move(keys: list[str], old: int, new: int, groups: int) -> dict:
    """Entries whose task changes if each task kept one hash: under key-group ranges, and under
    4ceeba2's routing (hash % tasks)."""
    from state.keygroups import key_hash, moved_groups, task_of_group
    from state.serializer import dumps

    ranges = modulo = mbytes = 0
    for i, k in enumerate(keys):
        h = key_hash(k, 1)
        g = h % groups
        if task_of_group(g, old, groups) != task_of_group(g, new, groups):
            ranges += 1
        if h % old != h % new:
            modulo += 1
            mbytes += len(dumps(k, "key", k)) + len(dumps(i, "value", k))
    return {"ranges": ranges, "modulo": modulo, "modulo_mb": round(mbytes / 1e6, 1),
            "groups_moved": moved_groups(groups, old, new)}


def merged(rs: list[dict]) -> dict:
    """Rounds of one rescale: the median of each time (its range beside it), the worst of the
    checks."""
    out = dict(rs[0])
    for k in rs[0]:
        if k.endswith("_ms"):
            vals = sorted(r[k] for r in rs)
            out[k] = vals[len(vals) // 2]
            out[k + "_range"] = (vals[0], vals[-1])
    out["found_ok"] = all(r["found_ok"] for r in rs)
    out["state_changed"] = max(r["state_changed"] for r in rs)
    return out


def rescale_main(args) -> int:
    import redis

    from state import reset

    server = None
    url = args.redis
    if url is None:
        server = start_redis()
        url = server.url
    try:
        client = redis.Redis.from_url(url)
        client.config_set("auto-aof-rewrite-percentage", 0)
        for tid in (TOPOLOGY, PER_TASK):
            reset(tid, url)
        keys = key_names(args.keys)
        G = args.key_groups
        print(f"{args.keys:,} keys, {G} key groups, Redis {client.info('server')['redis_version']}, "
              f"{os.cpu_count()} cores", file=sys.stderr)
        w = write_keyed(client, keys, 2, G, token=1, txid=1)
        print(f"  written by 2 tasks: puts {w['put_ms']} ms, first checkpoint {w['checkpoint_ms']} ms; "
              f"used_memory {client.info('memory')['used_memory_human']}", file=sys.stderr)
        rounds: dict[tuple, list[dict]] = {(2, 4): [], (4, 2): []}
        txid, token = 2, 2
        for _ in range(args.repeat):
            for old, new in rounds:
                r, txid = rescale_keyed(client, keys, old, new, G, token, txid, args.changed)
                rounds[(old, new)].append(r)
                token += 1
                print(f"  {old} -> {new}: {json.dumps(r)}", file=sys.stderr, flush=True)
        rows = []
        for (old, new), rs in rounds.items():
            r = merged(rs)
            r.update(would_move(keys, old, new, G))
            rows.append(r)
        per_task_layout(client, keys, 2)
        pt = {}
        for old, new, first_txid in ((2, 4, 100), (4, 2, 200)):
            pt[(old, new)] = hand_move(client, old, new)
            pt[(old, new)].update(per_task_checkpoint(client, keys, new, args.changed, first_txid))
            print(f"  per-task layout {old} -> {new}: {json.dumps(pt[(old, new)])}", file=sys.stderr)
        for tid in (TOPOLOGY, PER_TASK):
            reset(tid, url)
    finally:
        if server is not None:
            server.stop()
            shutil.rmtree(server.data_dir, ignore_errors=True)  # its AOF
    print(f"\n{args.keys:,} keys (msgpack str keys, int values), {G} key groups, "
          f"written by 2 tasks; one process, tasks one after another; median of {args.repeat} (range)\n")
    print("| phase | 2 -> 4 ms | 4 -> 2 ms |")
    print("|---|---:|---:|")
    a, b = rows

    def cell(r, key, fmt):
        rng = r.get(key + "_range")
        if rng is None or args.repeat == 1:
            return fmt.format(r[key])
        return f"{r[key]:,} ({rng[0]:,}-{rng[1]:,})"

    def line(label, key, fmt="{:,}"):
        print(f"| {label} | {cell(a, key, fmt)} | {cell(b, key, fmt)} |")

    line("(a) launch check `namespaces.check`", "check_ms")
    line("(a) record the new shape (HSET registry)", "record_ms")
    line("(b) open: claim + txids, all new tasks", "open_ms")
    line("(b) open, slowest task", "open_max_ms")
    line(f"(b) load: first `get`, all new tasks ({args.keys:,} keys)", "load_ms")
    line("(b) load, slowest task", "load_max_ms")
    line("(c) checkpoint, nothing changed: prepare_commit, all tasks", "prepare_ms")
    line("(c) checkpoint, nothing changed: commit, all tasks", "commit_ms")
    line("**(a) + (b) + (c), tasks one after another**", "total_ms")
    line(f"(c') checkpoint, {args.changed:,} keys changed: prepare_commit", "changed_prepare_ms")
    line(f"(c') checkpoint, {args.changed:,} keys changed: commit", "changed_commit_ms")
    print("\n| what | 2 -> 4 | 4 -> 2 |")
    print("|---|---:|---:|")
    line("slots opened (own + groups)", "parts")
    line("group state hashes / entries before", "state_hashes")
    line("group state hashes changed (DIGEST-VALUE)", "state_changed")
    print(f"| state entries before / after | {a['state_entries']:,} / {a['state_entries_after']:,} | "
          f"{b['state_entries']:,} / {b['state_entries_after']:,} |")
    print(f"| other keys changed | {a['n_changed']} ({', '.join(a['changed'])}) | "
          f"{b['n_changed']} ({', '.join(b['changed'])}) |")
    print(f"| keys created / deleted | {a['n_created']} ({', '.join(a['created'])}) / {a['n_deleted']} | "
          f"{b['n_created']} ({', '.join(b['created'])}) / {b['n_deleted']} |")
    line("MB read from Redis in (a) + (b)", "read_mb")
    line("kB sent to Redis in (a) + (b)", "sent_kb")
    line("kB sent to Redis by (c), a checkpoint with nothing changed", "checkpoint_sent_kb")
    line("every key found by its new owner", "found_ok", "{}")
    line("key groups changing task", "groups_moved")
    line("per-task hash, key-group ranges: entries to move", "ranges")
    line("per-task hash, hash % tasks (4ceeba2): entries to move", "modulo")
    line("  the same, MB (msgpack key + value)", "modulo_mb")
    c, d = pt[(2, 4)], pt[(4, 2)]
    print(f"| per-task hash, hash % tasks: moved by hand (HGETALL, HSET, HDEL) s | {c['secs']} | {d['secs']} |")
    print(f"|   entries moved / MB sent to Redis | {c['moved']:,} / {c['sent_mb']} | {d['moved']:,} / {d['sent_mb']} |")
    print(f"| per-task hash: load, all tasks ms | {c['load_ms']:,} | {d['load_ms']:,} |")
    print(f"| per-task hash: checkpoint, nothing changed ms | {c['prepare_ms'] + c['commit_ms']:.1f} | "
          f"{d['prepare_ms'] + d['commit_ms']:.1f} |")
    print(f"| per-task hash: checkpoint, {args.changed:,} keys changed ms | "
          f"{c['changed_prepare_ms'] + c['changed_commit_ms']:.1f} | {d['changed_prepare_ms'] + d['changed_commit_ms']:.1f} |")
    print(f"| key groups: checkpoint, {args.changed:,} keys changed ms | "
          f"{a['changed_prepare_ms'] + a['changed_commit_ms']:.1f} | {b['changed_prepare_ms'] + b['changed_commit_ms']:.1f} |")
    out = ROOT / "bench" / "results"
    out.mkdir(exist_ok=True)
    (out / "rescale.json").write_text(json.dumps({"keyed": rows, "rounds": [rounds[(2, 4)], rounds[(4, 2)]], "per_task": {f"{k[0]}->{k[1]}": v for k, v in pt.items()}},
                                                 indent=2))
    return 0 if all(r["found_ok"] and r["state_changed"] == 0 for r in rows) else 1


# --- the word count, before and after ----------------------------------------------------------
class SentenceReplaySpout(ReplayableSpout):
    """bench/throughput.py's sentences for exactly-once mode: its slice of them, by position."""

    outputs = ["sentence"]

    def __init__(self, sentences: list[str]) -> None:
        self.sentences = sentences

    def open(self, conf, context):
        self.mine = self.sentences[context.task_index::context.parallelism]
        self.position = 0
        self.outdir = conf["bench.outdir"]
        self.name = f"spout-{context.task_index}"
        self.first_emit = None

    def snapshot(self):
        return self.position

    def restore(self, snapshot):
        self.position = snapshot

    def next_tuple(self):
        if self.position < len(self.mine):
            if self.first_emit is None:
                self.first_emit = time.time()
                Path(self.outdir, self.name).write_text(json.dumps({"first_emit": self.first_emit, "last_ack": None}))
            i = self.position
            self.position += 1
            self.emit([self.mine[i]], msg_id=i)
        else:
            self.finish()


class ExactlyOnceCount(StatefulBolt):
    outputs = ["word", "count"]

    def prepare(self, conf, context):
        self.out = Path(conf["bench.outdir"], f"count-{context.task_index}")
        self.n = 0
        self.last = time.time()
        self.profiler = None
        if os.environ.get("BENCH_PROFILE"):  # the whole worker process, sampled (wordcount --profile)
            from pyinstrument import Profiler

            self.profiler = Profiler(interval=0.0005)
            self.profiler.start()
            self.profile_to = Path(os.environ["BENCH_PROFILE"], f"count-{context.task_index}.txt")

    def init_state(self, state):
        self.counts = state

    def execute(self, tup):
        w = tup.values[0]
        self.counts.put(w, self.counts.get(w, 0) + 1)
        self.ack(tup)
        self.n += 1
        if not self.n & 255:
            self.last = time.time()

    def cleanup(self):
        self.out.write_text(json.dumps({"total": self.n, "last": self.last}))
        if self.profiler is not None:
            self.profiler.stop()
            self.profile_to.write_text(self.profiler.output_text(unicode=False, show_all=False))


def run_exactly_once(sentences: list[str], url: str) -> dict:
    import redis

    from bench.throughput import SplitBolt
    from topology_runtime import LocalCluster, TopologyBuilder

    redis.Redis.from_url(url).flushall()
    outdir = tempfile.mkdtemp(prefix="bench-eo-")
    b = TopologyBuilder()
    b.set_spout("sentences", SentenceReplaySpout(sentences), 2)
    b.set_bolt("split", SplitBolt(), 2).local_or_shuffle_grouping("sentences")
    b.set_bolt("count", ExactlyOnceCount(), 2).fields_grouping("split", ["word"])
    conf = {"bench.outdir": outdir, "redis.url": url, "topology.message.timeout.secs": 60,
            "topology.state.provider": "redis", "topology.state.exactly.once": True,
            "topology.state.checkpoint.interval.ms": 1000}
    t0 = time.time()
    with LocalCluster(workers=2) as cluster:
        status = cluster.run("bench-eo", b.create_topology(), conf, timeout=1800)
    end = time.time()
    first = min(json.loads(p.read_text())["first_emit"] for p in Path(outdir).glob("spout-*"))
    counts = [json.loads(p.read_text()) for p in Path(outdir).glob("count-*")]
    last = max(c["last"] for c in counts)
    words = len(sentences) * 10
    from examples.stateful_wordcount import counts_in_state  # both trees: the committed counts

    committed = sum(counts_in_state(url, "bench-eo", "count").values())
    return {"words_per_sec": round(words / (last - first)), "words_per_sec_to_end": round(words / (end - first)),
            "startup_secs": round(first - t0, 2), "end": end, "restarts": status.restarts, "state": status.state,
            "counted_ok": committed == words}


def child_main(args) -> int:
    """One run, in this process (the tree's code first on sys.path)."""
    from bench.throughput import make_sentences, run_variant

    sentences = make_sentences(args.sentences)
    if args.mode == "eo":
        r = run_exactly_once(sentences, args.redis)
    else:
        r = run_variant("local", sentences, workers=2, acking=True)
        r = {k: r[k] for k in ("words_per_sec", "words_per_sec_wall", "startup_secs", "p50_ms", "p99_ms",
                               "counted_ok", "state")}
    import topology_runtime

    r["code"] = str(Path(topology_runtime.__file__).resolve().parent)
    print(json.dumps(r))
    return 0


def children_cpu() -> float:
    import resource

    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def redis_cpu(url: str) -> float:
    import redis

    info = redis.Redis.from_url(url).info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


def wordcount_main(args) -> int:
    def short(rev: str) -> str:
        return subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", rev], check=True,
                              capture_output=True, text=True).stdout.strip()

    # Both trees are worktrees of their commits: the run never sees uncommitted edits of this tree.
    # --trees: checkouts made beforehand (``git worktree add``), run as they are and left in place.
    base = None
    trees = {}
    if args.trees:
        for label, tree in zip(("before", "after"), args.trees):
            rev = subprocess.run(["git", "-C", tree, "rev-parse", "--short", "HEAD"], check=True,
                                 capture_output=True, text=True).stdout.strip()
            trees[f"{label} ({rev})"] = Path(tree).resolve()
    else:
        base = Path(tempfile.mkdtemp(prefix="bench-wordcount-"))
        for label, rev in (("before", args.before), ("after", args.after)):
            tree = base / label
            subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(tree), rev], check=True,
                           capture_output=True)
            trees[f"{label} ({short(rev)})"] = tree
    server = start_redis()
    modes = [m for m in ("eo", "acked") if m in args.modes.split(",")]
    runs: dict[tuple, list[dict]] = defaultdict(list)
    try:
        for rnd in range(args.repeat):
            for mode in modes:
                for label, tree in trees.items():
                    env = {**os.environ, "PYTHONPATH": str(tree)}
                    if args.profile:
                        prof = Path(args.profile, f"{mode}-{label.split()[0]}-{rnd + 1}")
                        prof.mkdir(parents=True, exist_ok=True)
                        env["BENCH_PROFILE"] = str(prof)
                    cpu0, rcpu0 = children_cpu(), redis_cpu(server.url)
                    done = subprocess.run([sys.executable, str(Path(__file__).resolve()), "_run", "--tree", str(tree),
                                           "--mode", mode, "--sentences", str(args.sentences), "--redis", server.url],
                                          cwd=tree, env=env, capture_output=True, text=True)
                    if done.returncode != 0:
                        raise SystemExit(f"{label} {mode}: exit {done.returncode}\n{done.stderr[-3000:]}")
                    r = json.loads(done.stdout.strip().splitlines()[-1])
                    # CPU: the run's process and its workers (waited for), and Redis's: steadier than
                    # words/s on a shared machine (start-up and the sentences' making included, the
                    # same for both trees)
                    r["cpu_secs"] = round(children_cpu() - cpu0, 2)
                    r["redis_cpu_secs"] = round(redis_cpu(server.url) - rcpu0, 2)
                    if not r["code"].startswith(str(tree)):
                        raise SystemExit(f"{label}: ran the code in {r['code']}, not {tree}")
                    runs[(mode, label)].append(r)
                    print(f"  round {rnd + 1} {mode} {label}: {json.dumps(r)}", file=sys.stderr, flush=True)
    finally:
        server.stop()
        shutil.rmtree(server.data_dir, ignore_errors=True)
        if base is not None:
            for tree in trees.values():
                subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)], check=False)
            shutil.rmtree(base, ignore_errors=True)
    names = {"eo": "exactly-once stateful word count", "acked": "plain word count, acking on"}
    print(f"\n{args.sentences:,} sentences x 10 words, LocalCluster 2 workers, parallelism 2, best of {args.repeat} "
          f"interleaved rounds, {os.cpu_count()} cores\n")
    print("| topology | before words/s | after words/s | after / before | rounds before | rounds after |")
    print("|---|---:|---:|---:|---|---|")
    (bl, al) = trees

    def med(rs: list[dict], key: str) -> float:
        vals = sorted(r[key] for r in rs)
        return vals[len(vals) // 2] if len(vals) % 2 else (vals[len(vals) // 2 - 1] + vals[len(vals) // 2]) / 2

    for mode in modes:
        b, a = runs[(mode, bl)], runs[(mode, al)]
        bb, ab = max(r["words_per_sec"] for r in b), max(r["words_per_sec"] for r in a)
        ok = all(r["counted_ok"] for r in b + a)
        rb = ", ".join(f"{r['words_per_sec']:,}" for r in b)
        ra = ", ".join(f"{r['words_per_sec']:,}" for r in a)
        print(f"| {names[mode]}{'' if ok else ' (COUNT MISMATCH)'} | {bb:,} | {ab:,} | {ab / bb:.2f} | {rb} | {ra} |")
    print("\n| topology | after / before, round by round | median (range) |")
    print("|---|---|---:|")
    for mode in modes:
        b, a = runs[(mode, bl)], runs[(mode, al)]
        ratios = [ra["words_per_sec"] / rb["words_per_sec"] for rb, ra in zip(b, a)]
        rs = sorted(ratios)
        m = rs[len(rs) // 2] if len(rs) % 2 else (rs[len(rs) // 2 - 1] + rs[len(rs) // 2]) / 2
        print(f"| {names[mode]} | {', '.join(f'{x:.2f}' for x in ratios)} | {m:.2f} ({rs[0]:.2f}-{rs[-1]:.2f}) |")
    print("\n| topology | median words/s before / after | median CPU s a run before / after | after / before "
          "| Redis CPU s before / after |")
    print("|---|---|---|---:|---|")
    for mode in modes:
        b, a = runs[(mode, bl)], runs[(mode, al)]
        print(f"| {names[mode]} | {med(b, 'words_per_sec'):,.0f} / {med(a, 'words_per_sec'):,.0f} | "
              f"{med(b, 'cpu_secs'):.2f} / {med(a, 'cpu_secs'):.2f} | {med(a, 'cpu_secs') / med(b, 'cpu_secs'):.2f} | "
              f"{med(b, 'redis_cpu_secs'):.2f} / {med(a, 'redis_cpu_secs'):.2f} |")
    out = ROOT / "bench" / "results"
    out.mkdir(exist_ok=True)
    (out / "rescale-wordcount.json").write_text(json.dumps({f"{m} {t}": v for (m, t), v in runs.items()}, indent=2))
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd")
    p.add_argument("--keys", type=int, default=1_000_000)
    p.add_argument("--key-groups", type=int, default=128)
    p.add_argument("--changed", type=int, default=10_000, help="keys changed in the second checkpoint")
    p.add_argument("--redis", default=None, help="a Redis to use (default: a private redis-server)")
    p.add_argument("--repeat", type=int, default=3, help="rounds of 2 -> 4 -> 2 (median reported)")
    w = sub.add_parser("wordcount", help="the word count at --before and at this tree, side by side")
    w.add_argument("--before", default="4ceeba2")
    w.add_argument("--after", default="HEAD")
    w.add_argument("--repeat", type=int, default=3)
    w.add_argument("--sentences", type=int, default=100_000)
    w.add_argument("--modes", default="eo,acked")
    w.add_argument("--trees", nargs=2, metavar=("BEFORE", "AFTER"), default=None,
                   help="existing checkouts to compare (e.g. git worktrees), instead of --before/--after")
    w.add_argument("--profile", default=None, metavar="DIR",
                   help="sample each exactly-once run's count workers with pyinstrument into DIR")
    c = sub.add_parser("_run")
    c.add_argument("--tree", required=True)
    c.add_argument("--mode", choices=("eo", "acked"), required=True)
    c.add_argument("--sentences", type=int, required=True)
    c.add_argument("--redis", required=True)
    args = p.parse_args(argv)
    if args.cmd == "wordcount":
        return wordcount_main(args)
    if args.cmd == "_run":
        return child_main(args)
    return rescale_main(args)


if __name__ == "__main__":
    sys.exit(main())
