"""MHA's DRAM bytes or MHA's code path? Times MHA 32/32 D128 bf16 calls three ways on the same shapes:
K/V as 32 heads of their own (mha), K/V as 32 heads whose rows overlap (mha-overlap: head h reads
elements 32h..32h+127 of a 1120-element token row, so the call streams GQA 32/8's bytes through
MHA's kernels and pairs), and GQA 32/8 (gqa); cuDNN SDPA on the first two. Every tsattn output is
poisoned first and checked against fp32 SDPA on the same (materialized) K/V. Causal FLOPs count S^2 / 2
pairs per request, not the contract's S (S + 1) / 2 (0.39% fewer at S = 256); ratios are unaffected.
usage: kv_traffic.py ROUND"""
import statistics
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import tsattn

sys.path.insert(0, "tools/bench")
from timing import cuda_timer  # noqa: E402

rnd = sys.argv[1]
H, D, STEP = 32, 128, 32
ROW = (H - 1) * STEP + D
SHAPES = [(32, 256, "dense"), (16, 512, "dense"), (8, 1024, "dense"), (4, 2048, "dense"), (32, 256, "causal")]
dev = torch.device("cuda")


def overlapped(b, s):
    store = torch.randn(b, s, ROW, device=dev, dtype=torch.bfloat16)
    return store.as_strided((b, s, H, D), (s * ROW, ROW, STEP, 1))


def make(kind, b, s):
    q = torch.randn(b, s, H, D, device=dev, dtype=torch.bfloat16)
    if kind == "mha-overlap":
        k, v = overlapped(b, s), overlapped(b, s)
    else:
        hkv = 8 if kind == "gqa" else H
        k = torch.randn(b, s, hkv, D, device=dev, dtype=torch.bfloat16)
        v = torch.randn(b, s, hkv, D, device=dev, dtype=torch.bfloat16)
    return q, k, v, torch.full_like(q, float("nan"))


def check(q, k, v, out, causal):
    g = H // k.shape[2]
    ref = F.scaled_dot_product_attention(
        q.float().transpose(1, 2), k.float().transpose(1, 2).repeat_interleave(g, 1),
        v.float().transpose(1, 2).repeat_interleave(g, 1), is_causal=causal).transpose(1, 2)
    return ((out.float() - ref).norm() / ref.norm()).item()


def time_it(call):
    return statistics.median(cuda_timer(call, 3, 5, None, dev))


for b, s, mask in SHAPES:
    causal = mask == "causal"
    flops = 4 * H * D * b * s * s / (2 if causal else 1)
    for kind in ("mha", "mha-overlap", "gqa"):
        torch.manual_seed(b * 7 + s)
        sets = [make(kind, b, s) for _ in range(3)]
        q, k, v, out = sets[0]
        tsattn.batch_prefill(q, k, v, mask_type=mask, out=out)
        err = check(q, k, v, out, causal)
        ms = time_it(lambda i: tsattn.batch_prefill(*sets[i][:3], mask_type=mask, out=sets[i][3]))
        ok = "ok" if err < 0.01 else "WRONG"
        print(f"b{b}-s{s}-{mask:6s} {kind:12s} tsattn r{rnd} {flops / ms / 1e9:7.1f} {ok} err={err:.4f}", flush=True)
        if kind == "gqa":
            continue
        tsets = [(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)) for q, k, v, _ in sets]
        try:
            with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
                got = F.scaled_dot_product_attention(*tsets[0], is_causal=causal).transpose(1, 2)
                cms = time_it(lambda i: F.scaled_dot_product_attention(*tsets[i], is_causal=causal))
            cerr = check(*sets[0][:3], got, causal)
            print(f"b{b}-s{s}-{mask:6s} {kind:12s} cudnn  r{rnd} {flops / cms / 1e9:7.1f} "
                  f"{'ok' if cerr < 0.01 else 'WRONG'} err={cerr:.4f}", flush=True)
        except RuntimeError as e:
            print(f"b{b}-s{s}-{mask:6s} {kind:12s} cudnn  r{rnd} n/a ({str(e).splitlines()[0][:100]})", flush=True)
