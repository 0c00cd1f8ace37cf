"""GPU: tsattn.distributed's ring on tsattn's kernels (docs/distributed.md).

* The whole ring simulated on one GPU, each rank's work on its own CUDA stream: the unsharded
  output must match single-GPU ``tsattn.batch_prefill`` and the fp32 oracle within docs/contract.md's
  tolerances, and the lse the oracle's (which checks the merges and the zigzag order).
* The default backend's merge against the reference backend's, rows without keys included.
* Real process groups on NCCL: one rank (the distributed path end to end), and two ranks when the
  machine has two GPUs.
"""

import pytest
import torch

import tsattn
import tsattn.distributed as cp

from distributed_ranks import spawn_ranks
from support import assert_close_to_reference, call_or_xfail, indptr, randn, reference, reference_lse

# (atol, rtol) on lse, as test_gpu_lse.py's for bf16 and fp16: scores accumulate in fp32.
LSE_ATOL, LSE_RTOL = 2e-3, 1e-3
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}

# (id, world, layout: (B, chunk) fixed or request lengths in units of 2 * world, hq, hkv, d, dtype, mask, window)
SIMULATED = [
    ("causal_w2_bf16", 2, (2, 100), 8, 2, 128, "bf16", "causal", -1),
    ("causal_w4_fp16_d256", 4, (1, 96), 4, 4, 256, "fp16", "causal", -1),
    ("dense_w4_bf16", 4, (1, 64), 8, 1, 128, "bf16", "dense", -1),
    ("window_narrow_w4_bf16", 4, (1, 96), 8, 2, 128, "bf16", "causal", 40),
    ("window_wide_w3_bf16", 3, (2, 80), 4, 2, 128, "bf16", "causal", 300),
    ("packed_causal_w4_bf16", 4, [70, 0, 1, 33], 8, 2, 128, "bf16", "causal", -1),
    ("packed_window_w2_bf16", 2, [90, 1, 0, 47], 8, 2, 128, "bf16", "causal", 57),
    ("packed_dense_w3_fp16", 3, [20, 0, 41], 4, 2, 128, "fp16", "dense", -1),
]


def _whole_inputs(world, layout, hq, hkv, d, dtype, device="cuda"):
    """Whole-sequence q, k, v and the packed indptr (None for the fixed layout)."""
    if isinstance(layout, tuple):
        batch, chunk = layout
        shape, full_indptr = (batch, 2 * world * chunk), None
    else:
        lengths = [2 * world * n for n in layout]
        shape, full_indptr = (sum(lengths),), indptr(lengths)
    q = randn(shape + (hq, d), dtype, device)
    k, v = randn(shape + (hkv, d), dtype, device), randn(shape + (hkv, d), dtype, device)
    return q, k, v, full_indptr


def _check_lse(lse, expected, what):
    empty = torch.isneginf(expected)
    assert not torch.isnan(lse).any(), f"{what}: NaN in lse"
    assert torch.equal(torch.isneginf(lse), empty), f"{what}: -inf rows differ"
    torch.testing.assert_close(lse[~empty], expected[~empty], atol=LSE_ATOL, rtol=LSE_RTOL)


@pytest.mark.parametrize("case", SIMULATED, ids=[c[0] for c in SIMULATED])
def test_simulated_ring_on_one_gpu_matches_batch_prefill(case):
    name, world, layout, hq, hkv, d, dtype_name, mask, window = case
    torch.manual_seed(sum(map(ord, name)))
    dtype = DTYPES[dtype_name]
    q, k, v, full_indptr = _whole_inputs(world, layout, hq, hkv, d, dtype)
    settings = dict(mask_type=mask, window_left=window)
    single = tsattn.batch_prefill(q, k, v, qo_indptr=full_indptr, kv_indptr=full_indptr, **settings)

    if full_indptr is None:
        shards = [[cp.zigzag_shard(t, world, r) for r in range(world)] for t in (q, k, v)]
        local = None
    else:
        pieces = [[cp.zigzag_shard_packed(t, full_indptr, world, r) for r in range(world)] for t in (q, k, v)]
        shards, local = [[p[0] for p in per] for per in pieces], pieces[0][0][1]
    streams = [torch.cuda.Stream() for _ in range(world)]
    results = call_or_xfail(
        lambda: cp.simulate_ring_prefill(
            *shards, qo_indptr=local, kv_indptr=local, return_lse=True, streams=streams, **settings
        )
    )
    torch.cuda.synchronize()
    outs, lses = [r[0] for r in results], [r[1] for r in results]
    if local is None:
        out, lse = cp.zigzag_unshard(outs), cp.zigzag_unshard(lses)
    else:
        out, lse = cp.zigzag_unshard_packed(outs, local)[0], cp.zigzag_unshard_packed(lses, local)[0]
    assert out.dtype == dtype and out.shape == q.shape
    assert_close_to_reference(out, single.float(), dtype, what=f"{name}: ring against batch_prefill")
    kwargs = dict(qo_indptr=full_indptr, kv_indptr=full_indptr, **settings)
    assert_close_to_reference(out, reference(q, k, v, **kwargs), dtype, what=f"{name}: ring against the oracle")
    _check_lse(lse, reference_lse(q, k, **kwargs), name)


def test_default_merge_matches_the_reference_merge():
    """tsattn.merge_state behind TsattnBackend.merge_into, against the fp32 torch merge: rows where
    either side saw no key (lse -inf) included."""
    torch.manual_seed(11)
    rows, heads, d = 300, 8, 128
    acc_out = torch.randn(rows, heads, d, device="cuda")
    acc_lse = torch.randn(rows, heads, device="cuda") * 3
    part_out = randn((rows, heads, d), torch.bfloat16)
    part_lse = torch.randn(rows, heads, device="cuda") * 3
    acc_lse[:40] = float("-inf")
    acc_out[:40] = 0
    part_lse[20:60] = float("-inf")
    expected_out, expected_lse = acc_out.clone(), acc_lse.clone()
    cp.ReferenceBackend().merge_into(expected_out, expected_lse, part_out, part_lse)
    call_or_xfail(lambda: cp.TsattnBackend().merge_into(acc_out, acc_lse, part_out, part_lse))
    torch.cuda.synchronize()
    torch.testing.assert_close(acc_out, expected_out, atol=1e-5, rtol=1e-5)
    assert torch.equal(torch.isneginf(acc_lse), torch.isneginf(expected_lse))
    finite = ~torch.isneginf(expected_lse)
    torch.testing.assert_close(acc_lse[finite], expected_lse[finite], atol=1e-5, rtol=1e-5)
    # one side empty: the other side's values (the part widened to fp32), bit for bit
    assert torch.equal(acc_out[:20], part_out[:20].float()) and torch.equal(acc_lse[:20], part_lse[:20])


# (world, layout, hq, hkv, d, dtype, mask, window): the cases every NCCL run goes through
DISTRIBUTED = [
    ((1, 100), 8, 2, 128, "bf16", "causal", -1),
    ((2, 64), 4, 4, 256, "fp16", "dense", -1),
    ((1, 96), 8, 2, 128, "bf16", "causal", 30),
    ([70, 0, 1, 33], 8, 2, 128, "bf16", "causal", -1),
    ([40, 1, 0, 21], 8, 2, 128, "bf16", "causal", 50),
]


def _run_on_nccl(world, tmp_path):
    torch.manual_seed(20 + world)
    cases = []
    for layout, hq, hkv, d, dtype_name, mask, window in DISTRIBUTED:
        q, k, v, full_indptr = _whole_inputs(world, layout, hq, hkv, d, DTYPES[dtype_name], device="cpu")
        cases.append(dict(q=q, k=k, v=v, indptr=full_indptr, mask_type=mask, window_left=window, reference=False))
    results, _ = spawn_ranks(world, "nccl", cases, tmp_path, timeout_s=600)
    for case, per_rank in zip(cases, results):
        what = f"{world} NCCL ranks, {case['mask_type']} window_left={case['window_left']}"
        outs, lses = [r["out"] for r in per_rank], [r["lse"] for r in per_rank]
        if case["indptr"] is None:
            out, lse = cp.zigzag_unshard(outs), cp.zigzag_unshard(lses)
        else:
            local = cp.zigzag_shard_packed(case["q"], case["indptr"], world, 0)[1]
            out, lse = cp.zigzag_unshard_packed(outs, local)[0], cp.zigzag_unshard_packed(lses, local)[0]
        kwargs = dict(qo_indptr=case["indptr"], kv_indptr=case["indptr"], mask_type=case["mask_type"])
        kwargs["window_left"] = case["window_left"]
        assert_close_to_reference(out, reference(case["q"], case["k"], case["v"], **kwargs), case["q"].dtype, what=what)
        _check_lse(lse, reference_lse(case["q"], case["k"], **kwargs), what)
        for r in per_rank:  # a RingPrefill's second run, on its kept plans and buffers: the same bytes
            assert torch.equal(r["again"], r["out"]), what


def test_one_rank_nccl_process_group(tmp_path):
    _run_on_nccl(1, tmp_path)


def test_two_rank_nccl_process_group(tmp_path):
    if torch.cuda.device_count() < 2:  # checked here: without any GPU the file's mark says "no CUDA device"
        pytest.skip("skipped: fewer than 2 CUDA devices")
    _run_on_nccl(2, tmp_path)
