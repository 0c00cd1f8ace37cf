"""Time tsattn (TSATTN_LIBRARY) on fixed dense bf16 shapes not in the bench product; check each
against fp32 torch SDPA. usage: shape_time.py LABEL ROUND"""
import sys, torch, tsattn
sys.path.insert(0, "tools/bench")
from timing import cuda_timer
import statistics
label, rnd = sys.argv[1], sys.argv[2]
SHAPES = [(1, 1152, 32, 8), (1, 1152, 32, 32), (2, 1000, 32, 8), (3, 640, 32, 8), (5, 256, 32, 8), (1, 1280, 32, 8), (6, 384, 32, 32)]
for b, s, hq, hkv in SHAPES:
    torch.manual_seed(b * 7 + s)
    sets = []
    for _ in range(3):
        q = torch.randn(b, s, hq, 128, device="cuda", dtype=torch.bfloat16)
        k = torch.randn(b, s, hkv, 128, device="cuda", dtype=torch.bfloat16)
        v = torch.randn(b, s, hkv, 128, device="cuda", dtype=torch.bfloat16)
        sets.append((q, k, v, torch.full_like(q, float("nan"))))
    q, k, v, out = sets[0]
    tsattn.batch_prefill(q, k, v, mask_type="dense", out=out)
    ref = torch.nn.functional.scaled_dot_product_attention(
        q.float().transpose(1, 2), k.float().transpose(1, 2).repeat_interleave(hq // hkv, 1),
        v.float().transpose(1, 2).repeat_interleave(hq // hkv, 1)).transpose(1, 2)
    err = ((out.float() - ref).norm() / ref.norm()).item()
    ts = cuda_timer(lambda i: tsattn.batch_prefill(sets[i][0], sets[i][1], sets[i][2], mask_type="dense", out=sets[i][3]),
                    3, 5, 40, torch.device("cuda"))
    ms = statistics.median(ts)
    tflops = 4 * hq * 128 * b * s * s / (ms * 1e-3) / 1e12
    ok = "ok" if err < 0.01 else "WRONG"
    print(f"b{b}-s{s}-h{hq}kv{hkv}{'':24s} {label:10s} r{rnd} {tflops:7.1f} {ok} err={err:.4f}")
