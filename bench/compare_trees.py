"""The word count of bench/throughput.py in two trees side by side, rounds interleaved: an
earlier commit (a temporary ``git worktree``) and the working tree, same machine, same venv.
For a change that must not slow the hot path (the figures go to bench/README.md).

    .venv/bin/python bench/compare_trees.py --base REV [--rounds 3] [--sentences 100000]

Each round runs, in each tree, the acked and the unacked word count on 2 workers (LocalCluster);
the table gives the best of the rounds and the ratio after/before. Run it on a quiet machine.
Beside the words per second it gives the CPU seconds the whole run spent per million words (the
bench process and every process it waited for: supervisor, workers, Redis), the lowest of the
rounds: on 2 cores the wall figure swings with scheduling by more than the cost of a small change,
the CPU per word much less.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VARIANTS = {"acked": {"acking": True}, "unacked": {"acking": False}}
# One variant in one tree: the tree's own bench/throughput.py, its own packages first on the path.
_RUN = """
import json, resource, sys
sys.path.insert(0, "bench")
from throughput import make_sentences, run_variant
r = run_variant("local", make_sentences({n}), {workers}, acking={acking})
assert r["counted_ok"], r
ru = [resource.getrusage(w) for w in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)]
r["cpu_s_per_mwords"] = sum(u.ru_utime + u.ru_stime for u in ru) / ({n} * 10 / 1e6)
print("RESULT " + json.dumps(r))
"""


def run(tree: Path, variant: str, sentences: int, workers: int) -> dict:
    code = _RUN.format(n=sentences, workers=workers, **VARIANTS[variant])
    out = subprocess.run([sys.executable, "-c", code], cwd=tree, capture_output=True, text=True, timeout=1800,
                         env={**_env(), "PYTHONPATH": f"{tree}:{tree / 'plugins'}"})
    line = next((x for x in out.stdout.splitlines() if x.startswith("RESULT ")), None)
    if line is None:
        raise SystemExit(f"{tree}: {variant} failed:\n{out.stdout[-2000:]}\n{out.stderr[-3000:]}")
    return json.loads(line[len("RESULT "):])


def _env() -> dict:
    import os

    return {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--base", required=True, help="the earlier commit")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--sentences", type=int, default=100_000)
    p.add_argument("--workers", type=int, default=2)
    args = p.parse_args(argv)
    base = subprocess.run(["git", "rev-parse", "--short", args.base], cwd=ROOT, capture_output=True, text=True,
                          check=True).stdout.strip()
    with tempfile.TemporaryDirectory(prefix="bench-base-") as tmp:
        old = Path(tmp) / "tree"
        subprocess.run(["git", "worktree", "add", "--detach", str(old), base], cwd=ROOT, check=True,
                       capture_output=True)
        try:
            best: dict[tuple[str, str], dict] = {}
            for i in range(args.rounds):
                for variant in VARIANTS:
                    for label, tree in (("before", old), ("after", ROOT)):
                        r = run(tree, variant, args.sentences, args.workers)
                        key = (label, variant)
                        if key not in best or r["words_per_sec"] > best[key]["words_per_sec"]:
                            best[key] = {**r, "cpu_s_per_mwords": best.get(key, r)["cpu_s_per_mwords"]}
                        best[key]["cpu_s_per_mwords"] = min(best[key]["cpu_s_per_mwords"], r["cpu_s_per_mwords"])
                        print(f"round {i + 1}: {label:6} {variant:8} {r['words_per_sec']:>10,} words/s "
                              f"{r['cpu_s_per_mwords']:6.2f} CPU s per M words", flush=True)
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(old)], cwd=ROOT, capture_output=True)
    print(f"\n| word count, {args.workers} workers | before ({base}) | after | after / before |\n|---|---:|---:|---:|")
    for variant in VARIANTS:
        b, a = best[("before", variant)]["words_per_sec"], best[("after", variant)]["words_per_sec"]
        print(f"| {variant}, words/s (best of {args.rounds}) | {b:,} | {a:,} | {a / b:.3f} |")
    for variant in VARIANTS:
        b, a = best[("before", variant)]["cpu_s_per_mwords"], best[("after", variant)]["cpu_s_per_mwords"]
        print(f"| {variant}, CPU s per M words (lowest of {args.rounds}) | {b:.2f} | {a:.2f} | {a / b:.3f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
