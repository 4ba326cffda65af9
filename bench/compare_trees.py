"""The word count of bench/throughput.py in two trees side by side, rounds interleaved: an
earlier commit (a temporary ``git worktree``) and the working tree, same machine, same venv.
For a change that must not slow the hot path (the figures go to bench/README.md).

    .venv/bin/python bench/compare_trees.py --base REV [--rounds 3] [--sentences 100000]

Each round runs, in each tree, the acked and the unacked word count on 2 workers (LocalCluster);
the table gives the best of the rounds and the ratio after/before. Run it on a quiet machine.
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
import json, sys
sys.path.insert(0, "bench")
from throughput import make_sentences, run_variant
r = run_variant("local", make_sentences({n}), {workers}, acking={acking})
assert r["counted_ok"], r
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
                            best[key] = r
                        print(f"round {i + 1}: {label:6} {variant:8} {r['words_per_sec']:>10,} words/s", flush=True)
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(old)], cwd=ROOT, capture_output=True)
    print(f"\n| word count, {args.workers} workers | before ({base}) | after | after / before |\n|---|---:|---:|---:|")
    for variant in VARIANTS:
        b, a = best[("before", variant)]["words_per_sec"], best[("after", variant)]["words_per_sec"]
        print(f"| {variant} (best of {args.rounds}) | {b:,} | {a:,} | {a / b:.3f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
