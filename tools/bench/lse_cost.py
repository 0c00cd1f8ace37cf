#!/usr/bin/env python3
"""The cost of the log-sum-exp output: one-shot calls with and without lse, same library, same run.

For each case (B1, S8K, 32/8 heads, bf16; D128 and D256, dense and causal) the two variants
alternate for several rounds, which of them goes first alternating too; each round times `--reps`
calls of each with CUDA events (median) after a warm-up, queued behind a GPU sleep so that host
time stays out. Prints TFLOP/s (4 * Hq * D * visible pairs, medians over the rounds) and the ratio
with/without: the median of the rounds' own ratios, with their range (the clocks drift between
rounds more than within one). Needs a GPU.

    python3 tools/bench/lse_cost.py [--reps 30] [--rounds 3]
"""

import argparse
import statistics

import torch

from tsattn import _call
from timing import median_event_ms

CASES = [(128, "dense"), (128, "causal"), (256, "dense"), (256, "causal")]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=30)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seq", type=int, default=8192)
    args = parser.parse_args()
    s, hq, hkv = args.seq, 32, 8
    for d, mask in CASES:
        q = torch.randn(1, s, hq, d, device="cuda", dtype=torch.bfloat16) * 0.2
        k = torch.randn(1, s, hkv, d, device="cuda", dtype=torch.bfloat16) * 0.2
        v = torch.randn(1, s, hkv, d, device="cuda", dtype=torch.bfloat16) * 0.2
        out = torch.empty_like(q)
        lse = torch.empty(1, s, hq, device="cuda", dtype=torch.float32)
        pairs = s * s if mask == "dense" else s * (s + 1) // 2
        flop = 4.0 * hq * d * pairs

        def call(with_lse):
            return lambda: _call.run(
                q, k, v, None, None, mask, -1, None, None, None, 1.0, 0, out, lse if with_lse else None
            )

        plain, with_lse = [], []
        for r in range(args.rounds):
            for lse_on in (r % 2 == 1, r % 2 == 0):
                (with_lse if lse_on else plain).append(median_event_ms(call(lse_on), args.reps))
        a, b = statistics.median(plain), statistics.median(with_lse)
        ratios = [x / y for x, y in zip(plain, with_lse)]
        print(
            f"d{d} {mask:6s} S{s}: without lse {flop / a / 1e9:6.1f} TFLOP/s ({a:.3f} ms), "
            f"with lse {flop / b / 1e9:6.1f} TFLOP/s ({b:.3f} ms): with/without {statistics.median(ratios):.4f} "
            f"(rounds {min(ratios):.4f}-{max(ratios):.4f}; without {['%.3f' % x for x in plain]}, "
            f"with {['%.3f' % x for x in with_lse]})"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
