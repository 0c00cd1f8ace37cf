#!/usr/bin/env python3
"""The cost of a paged KV cache: paged calls against the contiguous packed call on the same keys.

Two batches (bf16, 32/8 heads, D128, causal, lengths from a fixed seed): "ragged16", 16 requests of
256-4096 new tokens, and "chunk1k_on_7k", 4 requests of 1K new tokens on 7K cached (queries are the
last 1K of 8K keys, as in chunked prefill over a prefix cache). For each page size (16, 32, 64, 128)
and layout (NHD, HND) the same keys are written into shuffled pages. The variants alternate for
`--rounds` rounds; each round times `--reps` calls with CUDA events (median), queued behind a GPU
sleep so that host time stays out:
  contiguous   batch_prefill on packed K/V with GPU indptrs;
  default      batch_prefill_with_paged_kv_cache with GPU tables, as the library chooses;
  kernel       the same with TSATTN_PAGED_KV=kernel (the paged kernel reads the pages);
  gather       the same with TSATTN_PAGED_KV=gather (pages gathered into packed K/V first);
  flex         FlexAttention over torch's PagedAttention cache (chunk batch, HND, 128-key pages: its
               kernels take blocks of 128 keys, one page per block).
Every output is compared with the contiguous call's. Prints ms, TFLOP/s (4 * Hq * D * visible
pairs) and each variant's speed relative to the contiguous call. Needs a GPU.

    python3 tools/bench/paged_cost.py [--reps 20] [--rounds 2] [--no-flex] [--batches chunk1k_on_7k]
        [--page-sizes 128] [--layouts HND]
"""

import argparse
import os
import random
import statistics

import torch

import tsattn
from timing import median_event_ms

HQ, HKV, D = 32, 8, 128


def batches(rnd: random.Random):
    return {
        "ragged16": [(n, n) for n in (rnd.randint(256, 4096) for _ in range(16))],
        "chunk1k_on_7k": [(1024, 8192)] * 4,
    }


def paged_copy(k, v, kv_indptr, lengths, page_size, layout, rnd):
    """Pools holding the packed keys in shuffled pages, and the GPU tables that name them."""
    pages = [(sk + page_size - 1) // page_size for _, sk in lengths]
    ids = list(range(sum(pages)))
    rnd.shuffle(ids)
    shape = (len(ids), page_size, HKV, D) if layout == "NHD" else (len(ids), HKV, page_size, D)
    k_cache = torch.full(shape, float("nan"), device="cuda", dtype=k.dtype)
    v_cache = torch.full(shape, float("nan"), device="cuda", dtype=v.dtype)
    first = 0
    for r, ((_, sk), count) in enumerate(zip(lengths, pages)):
        base = int(kv_indptr[r])
        for j in range(count):
            lo, hi = j * page_size, min(sk, (j + 1) * page_size)
            page = ids[first + j]
            if layout == "NHD":
                k_cache[page, : hi - lo] = k[base + lo : base + hi]
                v_cache[page, : hi - lo] = v[base + lo : base + hi]
            else:
                k_cache[page, :, : hi - lo] = k[base + lo : base + hi].transpose(0, 1)
                v_cache[page, :, : hi - lo] = v[base + lo : base + hi].transpose(0, 1)
        first += count
    indptr = torch.tensor([0] + pages, dtype=torch.int64).cumsum(0).to(torch.int32).cuda()
    indices = torch.tensor(ids, dtype=torch.int32, device="cuda")
    last = torch.tensor(
        [sk - (count - 1) * page_size for (_, sk), count in zip(lengths, pages)], dtype=torch.int32, device="cuda"
    )
    return k_cache, v_cache, indptr, indices, last


def flex_call(q, k, v, lengths, page_size):
    """FlexAttention over torch's paged cache for a batch of equal lengths (None where it cannot)."""
    from torch.nn.attention.experimental._paged_attention import PagedAttention
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    batch, (sq, sk) = len(lengths), lengths[0]
    n_pages = batch * sk // page_size
    paged = PagedAttention(n_pages, page_size, batch, device="cuda")
    k_cache = torch.zeros(1, HKV, n_pages * page_size, D, device="cuda", dtype=k.dtype)
    v_cache = torch.zeros_like(k_cache)
    batch_idx = torch.arange(batch, device="cuda", dtype=torch.int32)
    for b in range(batch):
        paged.reserve(torch.tensor(b, device="cuda"), torch.tensor(sk, device="cuda"))
    kb = k.view(batch, sk, HKV, D).transpose(1, 2)
    vb = v.view(batch, sk, HKV, D).transpose(1, 2)
    input_pos = torch.arange(sk, device="cuda", dtype=torch.int32).expand(batch, sk)
    paged.assign(batch_idx, input_pos, kb, vb, k_cache, v_cache)
    offset = sk - sq

    def causal(b, h, q_idx, kv_idx):
        return kv_idx <= q_idx + offset

    logical = create_block_mask(causal, batch, None, sq, sk, BLOCK_SIZE=page_size)
    physical = paged.convert_logical_block_mask(logical)
    qb = q.view(batch, sq, HQ, D).transpose(1, 2)
    compiled = torch.compile(flex_attention)
    return lambda: (
        compiled(qb, k_cache, v_cache, block_mask=physical, enable_gqa=True).transpose(1, 2).reshape(-1, HQ, D)
    )


def set_page_reads(mode):
    if mode is None:
        os.environ.pop("TSATTN_PAGED_KV", None)
    else:
        os.environ["TSATTN_PAGED_KV"] = mode


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--no-flex", action="store_true")
    parser.add_argument("--batches", nargs="+", default=["ragged16", "chunk1k_on_7k"])
    parser.add_argument("--page-sizes", nargs="+", type=int, default=[16, 32, 64, 128])
    parser.add_argument("--layouts", nargs="+", default=["NHD", "HND"])
    args = parser.parse_args()
    rnd = random.Random(0)
    torch.manual_seed(0)
    for name, lengths in batches(rnd).items():
        if name not in args.batches:
            continue
        qo = torch.tensor([0] + [a for a, _ in lengths]).cumsum(0).to(torch.int32).cuda()
        kvp = torch.tensor([0] + [b for _, b in lengths]).cumsum(0).to(torch.int32).cuda()
        q = torch.randn(int(qo[-1]), HQ, D, device="cuda", dtype=torch.bfloat16) * 0.5
        k = torch.randn(int(kvp[-1]), HKV, D, device="cuda", dtype=torch.bfloat16) * 0.5
        v = torch.randn_like(k)
        flop = sum(4 * HQ * D * (sq * sk - sq * (sq - 1) // 2) for sq, sk in lengths)
        out = torch.empty_like(q)

        def contiguous():
            return tsattn.batch_prefill(q, k, v, qo_indptr=qo, kv_indptr=kvp, mask_type="causal", out=out)

        want = tsattn.batch_prefill(q, k, v, qo_indptr=qo, kv_indptr=kvp, mask_type="causal").float()
        for page_size in args.page_sizes:
            for layout in args.layouts:
                k_cache, v_cache, indptr, indices, last = paged_copy(k, v, kvp, lengths, page_size, layout, rnd)
                paged_out = torch.empty_like(q)

                def paged():
                    return tsattn.batch_prefill_with_paged_kv_cache(
                        q,
                        k_cache,
                        v_cache,
                        qo,
                        indptr,
                        indices,
                        last,
                        page_size=page_size,
                        kv_layout=layout,
                        mask_type="causal",
                        out=paged_out,
                    )

                variants = {
                    "contiguous": (None, contiguous),
                    "default": (None, paged),
                    "kernel": ("kernel", paged),
                    "gather": ("gather", paged),
                }
                if not args.no_flex and name == "chunk1k_on_7k" and layout == "HND" and page_size == 128:
                    try:
                        flex = flex_call(q, k, v, lengths, page_size)
                        flex()  # compiles
                        variants["flex"] = (None, flex)
                    except Exception as e:  # a torch version whose paged FlexAttention differs
                        print(f"{name} ps{page_size} flex: not run ({type(e).__name__}: {str(e)[:160]})", flush=True)
                times = {v_name: [] for v_name in variants}
                for _ in range(args.rounds):
                    for v_name, (mode, call) in variants.items():
                        set_page_reads(mode)
                        times[v_name].append(median_event_ms(call, args.reps))
                set_page_reads(None)
                base = statistics.median(times["contiguous"])
                for v_name, (mode, call) in variants.items():
                    set_page_reads(mode)
                    error = (call().float() - want).abs().max().item()
                    kernel = tsattn.last_kernel_name() if v_name != "flex" else "flex_attention"
                    set_page_reads(None)
                    ms = statistics.median(times[v_name])
                    print(
                        f"{name} ps{page_size} {layout} {v_name:10s} {ms:8.3f} ms {flop / ms / 1e9:6.0f} TFLOP/s "
                        f"speed/contiguous {base / ms:.3f} rounds {' '.join(f'{t:.3f}' for t in times[v_name])} "
                        f"max|diff| {error:.2e} {kernel}",
                        flush=True,
                    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
