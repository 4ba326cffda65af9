"""The cost of CurveZMQ on the acked word count: encryption on and off side by side, interleaved,
best of N, same data, 2 workers on LocalCluster (docs/security.md; bench/README.md "Encryption").

    .venv/bin/python bench/encryption.py [--sentences 100000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from throughput import make_sentences, run_variant  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sentences", type=int, default=100_000)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--repeat", type=int, default=3)
    args = p.parse_args(argv)
    sentences = make_sentences(args.sentences)
    best: dict[bool, dict] = {}
    rounds = []
    for i in range(args.repeat):
        row = {}
        for encrypted in (True, False):
            r = run_variant("local", sentences, args.workers, acking=True,
                            extra_conf={"topology.transport.encryption": encrypted})
            assert r["counted_ok"], r
            row[encrypted] = r["words_per_sec"]
            if encrypted not in best or r["words_per_sec"] > best[encrypted]["words_per_sec"]:
                best[encrypted] = r
        rounds.append(row[True] / row[False])
        print(f"round {i + 1}: CURVE {row[True]:,} words/s, MAC {row[False]:,} words/s, "
              f"ratio {row[True] / row[False]:.3f}", flush=True)
    on, off = best[True]["words_per_sec"], best[False]["words_per_sec"]
    print(f"\n| transport | words/s (best of {args.repeat}) | complete p99 ms |\n|---|---:|---:|")
    print(f"| CurveZMQ (default) | {on:,} | {best[True]['p99_ms']} |")
    print(f"| plaintext + MAC | {off:,} | {best[False]['p99_ms']} |")
    rounds.sort()
    print(f"\nbest CURVE / best MAC: {on / off:.3f}; per-round ratios median {rounds[len(rounds) // 2]:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
