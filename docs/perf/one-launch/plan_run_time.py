"""GPU time per packed wrapper.run (GPU indptrs) on the serving packed shapes: events over 100 runs."""
import sys, torch, tsattn
torch.manual_seed(0)
dev = torch.device("cuda")
rows = []
for (b, s) in [(16, 512), (8, 1024), (4, 2048), (32, 256)]:
    for (hq, hk, d) in [(32, 8, 128), (32, 32, 128), (16, 4, 256)]:
        for mask in ["dense", "causal"]:
            g = torch.Generator().manual_seed(b * 1000 + s)
            lens = [max(1, int(s * (0.5 + torch.rand(1, generator=g).item()))) for _ in range(b)]
            ind = torch.tensor([0] + lens).cumsum(0).to(torch.int32)
            tot = int(ind[-1])
            q = torch.randn(tot, hq, d, device=dev, dtype=torch.bfloat16)
            k = torch.randn(tot, hk, d, device=dev, dtype=torch.bfloat16)
            v = torch.randn(tot, hk, d, device=dev, dtype=torch.bfloat16)
            out = torch.empty_like(q)
            ind_d = ind.to(dev)
            w = tsattn.BatchPrefillTSWrapper()
            w.plan(device=dev, batch_size=b, max_seq_len_q=max(lens), max_kv_len=max(lens), num_qo_heads=hq,
                   num_kv_heads=hk, head_dim=d, q_dtype=torch.bfloat16, kv_dtype=torch.bfloat16, packed=True,
                   mask_type=mask)
            for _ in range(10):
                w.run(q, k, v, ind_d, ind_d, out=out)
            torch.cuda.synchronize()
            res = []
            for rep in range(5):
                e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                e0.record()
                for _ in range(50):
                    w.run(q, k, v, ind_d, ind_d, out=out)
                e1.record(); torch.cuda.synchronize()
                res.append(e0.elapsed_time(e1) / 50 * 1000)
            res.sort()
            ref = tsattn.batch_prefill(q, k, v, qo_indptr=ind, kv_indptr=ind, mask_type=mask)
            err = (out.float() - ref.float()).abs().max().item()
            print(f"{sys.argv[1]} B{b} S{s} {hq}/{hk} D{d} {mask}: run {res[2]:.1f} us (min {res[0]:.1f}) maxdiff_vs_oneshot {err:.2e}", flush=True)
