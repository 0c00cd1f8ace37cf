"""Reads the per-item clock stamps the experiment build writes into out (CTAs 0, 1, 66)."""
import statistics
import sys

import torch

import tsattn

CASES = [  # (name, B, S, Hq, Hkv, mask)
    ("dense 32/8 B32xS256", 32, 256, 32, 8, "dense"),
    ("dense 32/8 B16xS512", 16, 512, 32, 8, "dense"),
    ("dense 32/8 B8xS1K", 8, 1024, 32, 8, "dense"),
    ("dense 32/32 B32xS256", 32, 256, 32, 32, "dense"),
    ("causal 32/32 B32xS256", 32, 256, 32, 32, "causal"),
    ("causal 32/8 B8xS1K", 8, 1024, 32, 8, "causal"),
]
NAMES = ["ring wait", "slot read", "decode", "setup+Q/K0 wait", "stagger", "S0 GEMM", "softmax0..last V wait", "last PV", "output", "item"]
ORDER = [0, 8, 9, 1, 2, 3, 4, 5, 6, 7]

for name, b, s, hq, hkv, mask in CASES:
    torch.manual_seed(0)
    q = torch.randn(b, s, hq, 128, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(b, s, hkv, 128, device="cuda", dtype=torch.bfloat16)
    v = torch.randn(b, s, hkv, 128, device="cuda", dtype=torch.bfloat16)
    for _ in range(30):
        out = tsattn.batch_prefill(q, k, v, mask_type=mask)
    out = torch.zeros_like(out)
    ev0, ev1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    ev0.record()
    tsattn.batch_prefill(q, k, v, mask_type=mask, out=out)
    ev1.record()
    torch.cuda.synchronize()
    print(f"   the stamped call took {ev0.elapsed_time(ev1) * 1000:.1f} us")
    words = out.view(torch.int32).reshape(-1, 64)
    heads = (words[:, 0] == 0x7E57A000).nonzero().flatten().tolist()
    print(f"== {name}: {len(heads)} warpgroup records")
    per = {n: [] for n in NAMES}
    for h in heads:
        n, cta, wg = words[h, 1].item(), words[h, 2].item(), words[h, 3].item()
        stride = hq  # rows of one token are hq rows apart in the [B*S*H, 64] view
        st = []
        for i in range(n):
            row = words[h + stride * (1 + i // 6)].tolist()
            raw = [x & 0xFFFFFFFF for x in row[10 * (i % 6): 10 * (i % 6) + 10]]
            st.append([raw[j] for j in ORDER])
        t0 = st[0][0]
        lines = []
        for i, e in enumerate(st):
            d = [(e[j + 1] - e[j]) & 0xFFFFFFFF for j in range(9)]
            nxt = st[i + 1][0] if i + 1 < n else e[9]
            d.append((nxt - e[0]) & 0xFFFFFFFF)
            lines.append(d)
            if i > 0 and i + 1 < n:
                for nm, x in zip(NAMES, d):
                    per[nm].append(x)
        print(f"  cta {cta} wg {wg}: {n} items, first starts {(st[0][0]-t0)}, last ends {(st[-1][9]-t0) & 0xFFFFFFFF} cycles")
        for i, d in enumerate(lines[:4]):
            print("    item", i, " ".join(f"{x:6d}" for x in d))
    if per["item"]:
        print("  median cycles per item (items after the first and before the last):")
        for nm in NAMES:
            print(f"    {nm:24s} {statistics.median(per[nm]):8.0f}   (min {min(per[nm])}, max {max(per[nm])})")
    sys.stdout.flush()
