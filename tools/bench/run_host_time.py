#!/usr/bin/env python3
"""run_host_time.py - the host time of one call from Python: batch_prefill, BatchPrefillTSWrapper.run
and torch's scaled_dot_product_attention on the same causal problem (docs/contract.md, "Plan once,
run every layer": the target is 15 us per run).

Each variant is called in batches of --batch calls; the GPU is synchronized between batches,
outside the timed span, so the launch queue never fills and the time is the host's alone. The
variants take turns for --rounds rounds (the host's speed drifts over a run, so each round compares
them at one time). Printed per call: the median over the rounds of each round's median over
--batches batches, of the wall time and of the thread's CPU time, and each variant's CPU time over
torch SDPA's in the same round (median and range over the rounds). No variant's time is asserted
anywhere; tsattn_bench_host (tools/bench/host_time.cpp) is the C figure.

usage: TSATTN_LIBRARY=build/libtsattn.so PYTHONPATH=python python3 tools/bench/run_host_time.py \\
           [--batches 200] [--batch 50] [--rounds 3] [--seq 256] [--requests 2] [--heads 32 8] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

import torch
import torch.nn.functional as F

import tsattn


def measure(call, batches: int, batch: int):
    """(wall us, cpu us) per call: medians over batches of `batch` calls."""
    for i in range(batch):  # warm-up: loads, caches, first-use paths
        call(i)
    torch.cuda.synchronize()
    wall, cpu = [], []
    for _ in range(batches):
        w0, c0 = time.perf_counter_ns(), time.thread_time_ns()
        for i in range(batch):
            call(i)
        c1, w1 = time.thread_time_ns(), time.perf_counter_ns()
        wall.append((w1 - w0) / batch / 1000)
        cpu.append((c1 - c0) / batch / 1000)
        torch.cuda.synchronize()
    return statistics.median(wall), statistics.median(cpu)


def profile(name: str, call, batch: int) -> None:
    """cProfile's view of 20 batches of `call`: where the host time goes, by function."""
    import cProfile
    import pstats

    profiler = cProfile.Profile()
    for _ in range(20):
        profiler.enable()
        for i in range(batch):
            call(i)
        profiler.disable()
        torch.cuda.synchronize()
    print(f"\n== cProfile: {name} ({20 * batch} calls)")
    pstats.Stats(profiler).sort_stats("tottime").print_stats(12)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=200)
    parser.add_argument("--batch", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seq", type=int, default=256, help="Sq = Sk of every request")
    parser.add_argument("--requests", type=int, default=2)
    parser.add_argument("--heads", type=int, nargs=2, default=(32, 8), metavar=("HQ", "HKV"))
    parser.add_argument("--json", help="also write the figures to this file")
    parser.add_argument("--profile", action="store_true", help="also print cProfile's top functions per variant")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("run_host_time: no CUDA device", file=sys.stderr)
        return 3

    b, s, (hq, hkv), d, dtype = args.requests, args.seq, args.heads, 128, torch.bfloat16
    torch.manual_seed(0)
    q = 0.2 * torch.randn(b, s, hq, d, device="cuda", dtype=dtype)
    k = 0.2 * torch.randn(b, s, hkv, d, device="cuda", dtype=dtype)
    v = 0.2 * torch.randn(b, s, hkv, d, device="cuda", dtype=dtype)
    out = torch.empty_like(q)
    pq, pk, pv, pout = (t.view(b * s, t.shape[2], d) for t in (q, k, v, out))
    even = [i * s for i in range(b + 1)]
    shifted = list(even)
    if b > 1:
        shifted[1] -= 1  # same totals, one request one row shorter: a new upload each time
    host = torch.tensor(even, dtype=torch.int32)
    host_shifted = torch.tensor(shifted, dtype=torch.int32)
    gpu = host.cuda()
    alternating = [(host, host), (host_shifted, host_shifted)]

    settings = dict(
        device="cuda",
        batch_size=b,
        max_seq_len_q=s + 1,
        max_kv_len=s + 1,
        num_qo_heads=hq,
        num_kv_heads=hkv,
        head_dim=d,
        q_dtype=dtype,
        kv_dtype=dtype,
        mask_type="causal",
    )
    fixed = tsattn.BatchPrefillTSWrapper()
    fixed.plan(**settings)
    packed = tsattn.BatchPrefillTSWrapper()
    packed.plan(packed=True, **settings)

    # SDPA reads [B, H, S, D]: the transposed views of the same tensors (GQA through enable_gqa,
    # torch >= 2.5; else k and v repeated once, outside the timing).
    sq_, sk_, sv_ = (t.transpose(1, 2) for t in (q, k, v))
    sdpa_kwargs = dict(is_causal=True)
    try:
        F.scaled_dot_product_attention(sq_, sk_, sv_, enable_gqa=True, **sdpa_kwargs)
        sdpa_kwargs["enable_gqa"] = True
    except TypeError:
        sk_, sv_ = (t.repeat_interleave(hq // hkv, dim=1) for t in (sk_, sv_))

    variants = [
        ("batch_prefill fixed causal", lambda i: tsattn.batch_prefill(q, k, v, mask_type="causal", out=out)),
        ("batch_prefill fixed causal, out allocated", lambda i: tsattn.batch_prefill(q, k, v, mask_type="causal")),
        (
            "batch_prefill packed, CPU indptrs",
            lambda i: tsattn.batch_prefill(pq, pk, pv, qo_indptr=host, kv_indptr=host, mask_type="causal", out=pout),
        ),
        (
            "batch_prefill packed, GPU indptrs (reads them back)",
            lambda i: tsattn.batch_prefill(pq, pk, pv, qo_indptr=gpu, kv_indptr=gpu, mask_type="causal", out=pout),
        ),
        ("wrapper.run fixed", lambda i: fixed.run(q, k, v, out=out)),
        ("wrapper.run fixed, validate=False", lambda i: fixed.run(q, k, v, out=out, validate=False)),
        ("wrapper.run fixed, out allocated", lambda i: fixed.run(q, k, v)),
        ("wrapper.run packed, CPU indptrs (unchanged)", lambda i: packed.run(pq, pk, pv, host, host, out=pout)),
        (
            "wrapper.run packed, CPU indptrs (new each run)",
            lambda i: packed.run(pq, pk, pv, *alternating[i % 2], out=pout),
        ),
        ("wrapper.run packed, GPU indptrs", lambda i: packed.run(pq, pk, pv, gpu, gpu, out=pout)),
        (
            "wrapper.run packed, GPU indptrs, validate=False",
            lambda i: packed.run(pq, pk, pv, gpu, gpu, out=pout, validate=False),
        ),
        ("torch SDPA (same fixed problem)", lambda i: F.scaled_dot_product_attention(sq_, sk_, sv_, **sdpa_kwargs)),
    ]
    print(
        f"run_host_time: B={b} S={s} Hq={hq} Hkv={hkv} D={d} bf16 causal; {args.rounds} rounds of "
        f"{args.batches} batches of {args.batch}"
    )
    rounds = {name: [] for name, _ in variants}
    for _ in range(args.rounds):
        for name, call in variants:
            rounds[name].append(measure(call, args.batches, args.batch))
    sdpa = rounds[variants[-1][0]]
    print(f"{'variant':56s} {'wall us/call':>12s} {'cpu us/call':>12s} {'cpu / SDPA (range)':>22s}")
    results = {}
    for name, _ in variants:
        wall = statistics.median(w for w, _ in rounds[name])
        cpu = statistics.median(c for _, c in rounds[name])
        ratios = [c / s_cpu for (_, c), (_, s_cpu) in zip(rounds[name], sdpa)]
        results[name] = {"wall_us": wall, "cpu_us": cpu, "rounds": rounds[name], "cpu_over_sdpa": ratios}
        span = f"{statistics.median(ratios):.2f} ({min(ratios):.2f}-{max(ratios):.2f})"
        print(f"{name:56s} {wall:12.2f} {cpu:12.2f} {span:>22s}")
    if args.profile:
        for name, call in variants:
            profile(name, call, args.batch)
    print(f"kernel: {tsattn.last_kernel_name()}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"settings": vars(args), "results": results}, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
