"""Paged one-shot (GPU tables) vs contiguous packed one-shot on the same batch; CUDA events, medians."""
import random, statistics, sys, torch, tsattn
dev = torch.device("cuda"); torch.manual_seed(0); rnd = random.Random(0)
def timeit(fn, reps=30):
    for _ in range(5): fn()
    torch.cuda.synchronize(); ts = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record(); fn(); b.record(); torch.cuda.synchronize(); ts.append(a.elapsed_time(b))
    return statistics.median(ts)
cases = {"ragged16": [(n, n) for n in [rnd.randint(256, 4096) for _ in range(16)]],
         "chunk1k_on_7k_x4": [(1024, 8192)] * 4}
hq, hk, d, dt = 32, 8, 128, torch.bfloat16
for name, lengths in cases.items():
    qo = torch.tensor([0] + [a for a, _ in lengths]).cumsum(0).to(torch.int32)
    kvp = torch.tensor([0] + [b for _, b in lengths]).cumsum(0).to(torch.int32)
    q = torch.randn(int(qo[-1]), hq, d, device=dev, dtype=dt)
    k = torch.randn(int(kvp[-1]), hk, d, device=dev, dtype=dt); v = torch.randn_like(k)
    flops = sum(4 * hq * d * (sq * sk - sq * (sq - 1) // 2) for sq, sk in lengths)
    for mask in ["causal"]:
        packed = timeit(lambda: tsattn.batch_prefill(q, k, v, qo_indptr=qo.to(dev), kv_indptr=kvp.to(dev), mask_type=mask))
        print(f"{name} {mask} packed {packed*1e3:.1f} us {flops/packed/1e9:.0f} TFLOP/s", flush=True)
        for ps in [16, 32, 64, 128]:
            for layout in ["NHD", "HND"]:
                pages = [(sk + ps - 1) // ps for _, sk in lengths]
                ids = list(range(sum(pages))); rnd.shuffle(ids)
                num = len(ids)
                shape = (num, ps, hk, d) if layout == "NHD" else (num, hk, ps, d)
                kc = torch.empty(shape, device=dev, dtype=dt); vc = torch.empty_like(kc)
                # fill pages from packed k/v
                pos = 0
                for r, ((sq, sk), np_) in enumerate(zip(lengths, pages)):
                    base = int(kvp[r])
                    for j in range(np_):
                        lo, hi = j * ps, min(sk, (j + 1) * ps)
                        pid = ids[pos + j]
                        if layout == "NHD":
                            kc[pid, : hi - lo] = k[base + lo: base + hi]; vc[pid, : hi - lo] = v[base + lo: base + hi]
                        else:
                            kc[pid, :, : hi - lo] = k[base + lo: base + hi].transpose(0, 1); vc[pid, :, : hi - lo] = v[base + lo: base + hi].transpose(0, 1)
                    pos += np_
                pind = torch.tensor([0] + pages).cumsum(0).to(torch.int32).to(dev)
                pidx = torch.tensor(ids, dtype=torch.int32, device=dev)
                last = torch.tensor([sk - (p - 1) * ps for (_, sk), p in zip(lengths, pages)], dtype=torch.int32, device=dev)
                qod = qo.to(dev)
                call = lambda: tsattn.batch_prefill_with_paged_kv_cache(q, kc, vc, qod, pind, pidx, last, page_size=ps, kv_layout=layout, mask_type=mask)
                t = timeit(call)
                ref = tsattn.batch_prefill(q, k, v, qo_indptr=qo, kv_indptr=kvp, mask_type=mask)
                diff = (call().float() - ref.float()).abs().max().item()
                print(f"{name} {mask} paged ps{ps} {layout} {t*1e3:.1f} us  paged/packed time {t/packed:.3f} (ratio of speed {packed/t:.3f})  maxdiff {diff:.2e}", flush=True)
