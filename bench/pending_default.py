"""What the bounded default of ``topology.max.spout.pending`` costs: the acked word count
(bench/throughput.py's workload) with the defaults (1000 trees and 64 MiB of tuple values per
spout task) against unbounded pending, interleaved in one run, best of K each.

    python bench/pending_default.py [--sentences 100000] [--workers 1,2] [--repeat 3]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.throughput import make_sentences, run_variant  # noqa: E402

VARIANTS = {
    "default (1000, 64 MiB)": {},
    # None means "the default" for the count: a bound no run reaches stands for unbounded.
    "unbounded": {"topology.max.spout.pending": 10**9, "topology.max.spout.pending.bytes": None},
}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sentences", type=int, default=100_000)
    p.add_argument("--workers", default="1,2")
    p.add_argument("--repeat", type=int, default=3)
    args = p.parse_args(argv)
    sentences = make_sentences(args.sentences)
    workers = [int(w) for w in args.workers.split(",")]
    best: dict[tuple, dict] = {}
    for _ in range(args.repeat):
        for w in workers:
            for name, conf in VARIANTS.items():
                r = run_variant("local", sentences, workers=w, acking=True, extra_conf=conf)
                if (w, name) not in best or r["words_per_sec"] > best[(w, name)]["words_per_sec"]:
                    best[(w, name)] = r
                print(f"  {w}w {name}: {r['words_per_sec']:,} words/s p50 {r['p50_ms']} ms p99 {r['p99_ms']} ms "
                      f"{'OK' if r['counted_ok'] else 'MISMATCH'}", file=sys.stderr, flush=True)
    print("| workers | pending | words/s (best) | complete p50 ms | complete p99 ms | x unbounded |")
    print("|---|---|---:|---:|---:|---:|")
    for w in workers:
        base = best[(w, "unbounded")]["words_per_sec"]
        for name in VARIANTS:
            r = best[(w, name)]
            print(f"| {w} | {name} | {r['words_per_sec']:,} | {r['p50_ms']} | {r['p99_ms']} | "
                  f"{r['words_per_sec'] / base:.3f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
