#!/usr/bin/env python3
"""time_unchecked.py - times tsattn.batch_prefill without checking its output.

For upper bounds that are wrong by design (a variant library that skips work, e.g. never stores
O), which tools/bench.py would report as WRONG and not time. Never use it for a figure that claims
speed: every such figure comes from tools/bench.py or tools/power_probe.py, which check first.

D128 dense bf16, B1, 32/8 heads at S = 1K, 2K, 4K, 8K; 4 input sets rotated; CUDA events around
each call, 6 batches of 40 calls each behind a 20 ms GPU sleep (as tools/bench.py queues them);
prints the median as TFLOP/s (SPEC.md convention). The library is $TSATTN_LIBRARY.

usage: TSATTN_LIBRARY=build-x/libtsattn.so.0.1.0 PYTHONPATH=python python3 tools/time_unchecked.py LABEL
"""
import sys

import torch

import tsattn

HEADS_Q, HEADS_KV, HEAD_DIM, SETS, BATCHES, CALLS = 32, 8, 128, 4, 6, 40


def median_ms(seq_len: int) -> float:
    def randn(heads):
        return (0.2 * torch.randn(1, seq_len, heads, HEAD_DIM, device="cuda")).bfloat16()

    inputs = [(randn(HEADS_Q), randn(HEADS_KV), randn(HEADS_KV)) for _ in range(SETS)]
    out = torch.empty_like(inputs[0][0])
    for i in range(10):
        tsattn.batch_prefill(*inputs[i % SETS], out=out)
    times = []
    for _ in range(BATCHES):
        torch.cuda._sleep(20_000_000)
        events = [torch.cuda.Event(enable_timing=True) for _ in range(CALLS + 1)]
        events[0].record()
        for i in range(CALLS):
            tsattn.batch_prefill(*inputs[i % SETS], out=out)
            events[i + 1].record()
        torch.cuda.synchronize()
        times += [events[i].elapsed_time(events[i + 1]) for i in range(CALLS)]
    return sorted(times)[len(times) // 2]


def main() -> None:
    label = sys.argv[1] if len(sys.argv) > 1 else "tsattn"
    torch.manual_seed(0)
    for seq_len in (1024, 2048, 4096, 8192):
        ms = median_ms(seq_len)
        flop = 4 * HEADS_Q * HEAD_DIM * seq_len * seq_len
        print(f"S{seq_len} {label} {flop / ms / 1e9:7.1f} TFLOP/s ({ms:.4f} ms)")


if __name__ == "__main__":
    main()
