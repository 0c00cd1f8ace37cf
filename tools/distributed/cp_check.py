#!/usr/bin/env python3
"""cp_check.py - context-parallel prefill (tsattn.distributed) on the ranks torchrun starts: a
correctness check against one device, then a scaling benchmark. Rank 0 prints the results.

usage: PYTHONPATH=python torchrun --nproc_per_node N tools/distributed/cp_check.py \\
           [--seq-lens 32768,131072,524288] [--json FILE]
       PYTHONPATH=python torchrun --nproc_per_node 2 tools/distributed/cp_check.py --device cpu \\
           --seq-lens 64,128 --heads 4 --kv-heads 2 --head-dim 16 --check-seq-len 48

--device cuda (the default): NCCL, one GPU per rank (LOCAL_RANK), tsattn's kernels.
--device cpu: gloo and the fp32 reference backend, for small sizes (a smoke test of the launcher).

Check: every rank builds the same whole q, k, v (seeded), takes its zigzag shard and runs
ring_prefill; the shards are gathered and compared, out and lse, with the same attention on one
device (rank 0: a BatchPrefillTSWrapper over the whole sequence; on the CPU the fp32 reference):
dense, causal, causal with two windows (one narrower than a chunk: from 3 ranks on it skips whole steps),
fixed and packed. bf16/fp16 tolerances are docs/contract.md's.

Bench: causal attention of one sequence (B = 1) at each --seq-lens length, --heads/--kv-heads, D
--head-dim, --dtype. Each rank times RingPrefill.run (with communication) and run_compute_only (the
same calls, no communication) with CUDA events, median of --iters after --warmup; rank 0 then times
the whole sequence alone. Reported: the single-device time, the slowest rank's ring and compute
times, the communication not hidden (ring minus compute, the largest over ranks, and its share of
the ring time) and the speedup (single / ring). Lengths are rounded up to a multiple of
2 * world size.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        description="Context-parallel prefill check and scaling benchmark; run under "
        "torchrun --nproc_per_node N (see the module docstring).",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument(
        "--device", choices=["cuda", "cpu"], default="cuda", help="cuda: NCCL + tsattn; cpu: gloo + the fp32 reference"
    )
    parser.add_argument(
        "--seq-lens", default=None, help="comma-separated benchmark lengths (default: 32768,131072 on cuda, 256 on cpu)"
    )
    parser.add_argument("--heads", type=int, default=32, help="query heads")
    parser.add_argument("--kv-heads", type=int, default=8, help="key/value heads")
    parser.add_argument("--head-dim", type=int, default=128)
    parser.add_argument("--dtype", choices=["bf16", "fp16"], default="bf16", help="cuda only; the CPU runs fp32")
    parser.add_argument(
        "--check-seq-len",
        type=int,
        default=None,
        help="length of the correctness cases (default: 4096 on cuda, 64 on cpu)",
    )
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--iters", type=int, default=10)
    parser.add_argument("--skip-check", action="store_true")
    parser.add_argument("--skip-bench", action="store_true")
    parser.add_argument("--json", default=None, help="rank 0 writes the results here")
    return parser.parse_args(argv)


def _round_up(n: int, multiple: int) -> int:
    return max(multiple, -(-n // multiple) * multiple)


class Run:
    """This rank's process group, device and backend choice."""

    def __init__(self, args):
        import torch
        import torch.distributed as dist

        import tsattn.distributed as cp

        self.args, self.torch, self.dist, self.cp = args, torch, dist, cp
        self.cuda = args.device == "cuda"
        if self.cuda:
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
            self.device = torch.device("cuda", torch.cuda.current_device())
            self.dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}[args.dtype]
        else:
            self.device, self.dtype = torch.device("cpu"), torch.float32
        dist.init_process_group("nccl" if self.cuda else "gloo")
        self.rank, self.world = dist.get_rank(), dist.get_world_size()

    def backend(self):
        return None if self.cuda else self.cp.ReferenceBackend()

    def randn(self, shape, generator=None):
        torch = self.torch
        if generator is not None:  # the same values on every rank
            return (0.2 * torch.randn(shape, generator=generator)).to(self.device, self.dtype)
        return (0.2 * torch.randn(shape, device=self.device)).to(self.dtype)

    def single_device(self, q, k, v, mask_type, window_left, indptr=None):
        """(out, lse) of the whole problem on this one device."""
        torch, cp = self.torch, self.cp
        if not self.cuda:
            return cp.ReferenceBackend().attention(
                q, k, v, cp.BlockMask(mask_type, window_left), qo_indptr=indptr, kv_indptr=indptr
            )
        import tsattn

        wrapper = tsattn.BatchPrefillTSWrapper()
        if indptr is None:
            batch, max_len = q.shape[0], q.shape[1]
        else:
            lengths = (indptr[1:] - indptr[:-1]).tolist()
            batch, max_len = len(lengths), max(lengths + [1])
        wrapper.plan(
            device=self.device,
            batch_size=batch,
            max_seq_len_q=max_len,
            max_kv_len=max_len,
            num_qo_heads=q.shape[-2],
            num_kv_heads=k.shape[-2],
            head_dim=q.shape[-1],
            q_dtype=q.dtype,
            kv_dtype=k.dtype,
            packed=indptr is not None,
            mask_type=mask_type,
            window_left=window_left,
        )
        out, lse = wrapper.run(q, k, v, indptr, indptr, return_lse=True)
        torch.cuda.synchronize()
        return out, lse

    def gather(self, tensor):
        parts = [self.torch.empty_like(tensor) for _ in range(self.world)]
        self.dist.all_gather(parts, tensor.contiguous())
        return parts

    def timer(self):
        """fn -> median ms per call over --iters, after --warmup calls."""
        torch, args = self.torch, self.args

        def measure(fn):
            for _ in range(args.warmup):
                fn()
            if self.cuda:
                torch.cuda.synchronize()
                pairs = []
                for _ in range(args.iters):
                    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    start.record()
                    fn()
                    end.record()
                    pairs.append((start, end))
                torch.cuda.synchronize()
                return statistics.median(s.elapsed_time(e) for s, e in pairs)
            times = []
            for _ in range(args.iters):
                t0 = time.perf_counter()
                fn()
                times.append((time.perf_counter() - t0) * 1e3)
            return statistics.median(times)

        return measure


def _tolerances(run):
    """(rtol, atol, relative-norm bound) on out, (atol, rtol) on lse: docs/contract.md's for the dtype."""
    torch = run.torch
    if not run.cuda:
        return (1e-4, 1e-4, 1e-4), (1e-4, 1e-4)
    if run.dtype == torch.bfloat16:
        return (2e-2, 1e-2, 2e-2), (2e-3, 1e-3)
    return (1e-2, 2e-3, 1e-2), (2e-3, 1e-3)


def _compare(run, out, lse, expected_out, expected_lse):
    """(ok, max |out error|, max |lse error|)."""
    torch = run.torch
    (rtol, atol, relnorm), (lse_atol, lse_rtol) = _tolerances(run)
    a, e = out.float(), expected_out.float()
    out_err = float((a - e).abs().max()) if a.numel() else 0.0
    ok = bool(torch.isfinite(a).all()) and bool((a - e).abs().le(atol + rtol * e.abs()).all())
    norm = float(e.norm())
    if norm > 0:
        ok &= float((a - e).norm()) / norm <= relnorm
    same_empty = torch.equal(torch.isneginf(lse), torch.isneginf(expected_lse))
    finite = ~torch.isneginf(expected_lse)
    lse_err = float((lse[finite] - expected_lse[finite]).abs().max()) if finite.any() else 0.0
    ok &= same_empty and bool(
        (lse[finite] - expected_lse[finite]).abs().le(lse_atol + lse_rtol * expected_lse[finite].abs()).all()
    )
    return ok, out_err, lse_err


def check(run, length: int):
    """The correctness cases; returns their reports (rank 0's verdicts, shared with every rank)."""
    torch, cp, args, world = run.torch, run.cp, run.args, run.world
    length = _round_up(length, 2 * world)
    chunk = length // (2 * world)
    narrow, wide = max(1, chunk // 2), 3 * chunk
    packed_lengths = [_round_up(length // 2, 2 * world), 2 * world, 0, _round_up(length // 4, 2 * world)]
    cases = [
        ("fixed", "dense", -1),
        ("fixed", "causal", -1),
        ("fixed", "causal", narrow),
        ("fixed", "causal", wide),
        ("packed", "causal", -1),
        ("packed", "causal", narrow),
    ]
    reports = []
    for number, (layout, mask_type, window) in enumerate(cases):
        generator = torch.Generator().manual_seed(1234 + number)
        if layout == "fixed":
            shapes = [(1, length, args.heads, args.head_dim)] + [(1, length, args.kv_heads, args.head_dim)] * 2
            indptr = None
        else:
            total = sum(packed_lengths)
            shapes = [(total, args.heads, args.head_dim)] + [(total, args.kv_heads, args.head_dim)] * 2
            indptr = torch.tensor([0] + packed_lengths, dtype=torch.int32).cumsum(0, dtype=torch.int32)
        q, k, v = (run.randn(shape, generator) for shape in shapes)
        if indptr is None:
            shards, local = [cp.zigzag_shard(t, world, run.rank) for t in (q, k, v)], None
        else:
            pieces = [cp.zigzag_shard_packed(t, indptr, world, run.rank) for t in (q, k, v)]
            shards, local = [p[0] for p in pieces], pieces[0][1]
        out, lse = cp.ring_prefill(
            *shards,
            mask_type=mask_type,
            window_left=window,
            qo_indptr=local,
            kv_indptr=local,
            return_lse=True,
            backend=run.backend(),
        )
        outs, lses = run.gather(out), run.gather(lse)
        verdict = torch.zeros(1, dtype=torch.float64, device=run.device)
        name = f"{layout} {mask_type}" + (f" window_left={window}" if window > 0 else "")
        name += f" length={length}" if indptr is None else f" lengths={packed_lengths}"
        errors = (math.nan, math.nan)
        if run.rank == 0:
            if local is None:
                whole_out, whole_lse = cp.zigzag_unshard(outs), cp.zigzag_unshard(lses)
            else:
                whole_out = cp.zigzag_unshard_packed(outs, local)[0]
                whole_lse = cp.zigzag_unshard_packed(lses, local)[0]
            expected_out, expected_lse = run.single_device(q, k, v, mask_type, window, indptr)
            ok, out_err, lse_err = _compare(run, whole_out, whole_lse, expected_out, expected_lse)
            verdict[0], errors = (1.0 if ok else 0.0), (out_err, lse_err)
        run.dist.broadcast(verdict, 0)
        ok = bool(verdict[0] == 1.0)
        if run.rank == 0:
            status = "check ok    " if ok else "check FAILED"
            print(
                f"{status} {name}: max |out - single| {errors[0]:.3g}, max |lse - single| {errors[1]:.3g}", flush=True
            )
        reports.append({"case": name, "ok": ok, "max_out_error": errors[0], "max_lse_error": errors[1]})
    return reports


def _time_ring(run, length: int):
    """[[ring ms, compute-only ms] of each rank] for causal attention over this rank's shard."""
    torch, cp, args = run.torch, run.cp, run.args
    local = length // run.world
    q = run.randn((1, local, args.heads, args.head_dim))
    k = run.randn((1, local, args.kv_heads, args.head_dim))
    v = run.randn((1, local, args.kv_heads, args.head_dim))
    ring = cp.RingPrefill(mask_type="causal", backend=run.backend())
    measure = run.timer()
    run.dist.barrier()
    ring_ms = measure(lambda: ring.run(q, k, v))
    run.dist.barrier()
    compute_ms = measure(lambda: ring.run_compute_only(q, k, v))
    times = torch.tensor([ring_ms, compute_ms], dtype=torch.float64, device=run.device)
    return [t.tolist() for t in run.gather(times)]


def _time_single(run, length: int) -> float:
    """ms of causal attention over the whole sequence on this one device."""
    cp, args = run.cp, run.args
    q, k, v = (run.randn((1, length, h, args.head_dim)) for h in (args.heads, args.kv_heads, args.kv_heads))
    measure = run.timer()
    if not run.cuda:
        backend, mask = cp.ReferenceBackend(), cp.BlockMask("causal")
        return measure(lambda: backend.attention(q, k, v, mask))
    import tsattn

    wrapper = tsattn.BatchPrefillTSWrapper()
    wrapper.plan(
        device=run.device,
        batch_size=1,
        max_seq_len_q=length,
        max_kv_len=length,
        num_qo_heads=args.heads,
        num_kv_heads=args.kv_heads,
        head_dim=args.head_dim,
        q_dtype=run.dtype,
        kv_dtype=run.dtype,
        mask_type="causal",
    )
    return measure(lambda: wrapper.run(q, k, v))


def bench(run, lengths):
    rows = []
    for requested in lengths:
        length = _round_up(requested, 2 * run.world)
        per_rank = _time_ring(run, length)
        run.dist.barrier()
        # The whole sequence on rank 0's device alone, the other ranks waiting.
        single_ms = _time_single(run, length) if run.rank == 0 else math.nan
        run.dist.barrier()
        ring_max = max(r for r, _ in per_rank)
        exposed = max(r - c for r, c in per_rank)
        rows.append(
            {
                "seq_len": length,
                "single_ms": single_ms,
                "ring_ms": ring_max,
                "compute_ms": max(c for _, c in per_rank),
                "exposed_comm_ms": exposed,
                "exposed_share": exposed / ring_max if ring_max > 0 else math.nan,
                "speedup": single_ms / ring_max if ring_max > 0 else math.nan,
                "per_rank_ring_ms": [r for r, _ in per_rank],
                "per_rank_compute_ms": [c for _, c in per_rank],
            }
        )
    return rows


def _print_bench(run, rows):
    args = run.args
    dtype = args.dtype if run.cuda else "fp32"
    print(
        f"\nbench: causal, B=1, {args.heads}/{args.kv_heads} heads, D{args.head_dim}, {dtype}, "
        f"{run.world} ranks on {run.args.device}; median of {args.iters} after {args.warmup} warm-up",
        flush=True,
    )
    print(
        f"{'seq_len':>9} {'single ms':>10} {'ring ms':>9} {'compute ms':>11} {'exposed comm ms':>16} {'exposed':>8} {'speedup':>8}"
    )
    for row in rows:
        print(
            f"{row['seq_len']:>9} {row['single_ms']:>10.3f} {row['ring_ms']:>9.3f} {row['compute_ms']:>11.3f} "
            f"{row['exposed_comm_ms']:>16.3f} {row['exposed_share']:>8.1%} {row['speedup']:>8.2f}",
            flush=True,
        )


def main(argv=None) -> int:
    args = parse_args(argv)
    run = Run(args)
    results = {"world_size": run.world, "device": args.device, "torch": run.torch.__version__}
    if run.cuda:
        results["gpu"] = run.torch.cuda.get_device_name(run.device)
    failed = False
    try:
        if not args.skip_check:
            reports = check(run, args.check_seq_len or (4096 if run.cuda else 64))
            results["check"] = reports
            failed = not all(r["ok"] for r in reports)
        if not args.skip_bench:
            default = "32768,131072" if run.cuda else "256"
            lengths = [int(n) for n in (args.seq_lens or default).split(",") if n.strip()]
            rows = bench(run, lengths)
            results["bench"] = rows
            if run.rank == 0:
                _print_bench(run, rows)
        if run.rank == 0 and args.json:
            with open(args.json, "w") as f:
                json.dump(results, f, indent=2)
    finally:
        run.dist.destroy_process_group()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
