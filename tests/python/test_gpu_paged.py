"""GPU: batch_prefill_with_paged_kv_cache and BatchPrefillPagedTSWrapper (docs/paged_kv.md) against the
fp32 oracle paged_reference on fresh random caches: shuffled page tables with repeated pages and a
partly filled last page, NaN in every slot no request reads, out poisoned first. Every mask, both
layouts, every page size, host and GPU tables, all nine dtype pairs, odd sizes and empty requests;
lse against the fp32 log-sum-exp; a run equals the one-shot call bit for bit; a CUDA graph of a run
replays with a changed page table; bad GPU tables are clamped (no fault, valid requests unaffected).
The kernel family is the process's (tools/dev/gpu_check.sh runs this file again with
TSATTN_KERNEL_FAMILY=sm80)."""

import itertools
import random
import re

import pytest
import torch

import tsattn
from reference_prefill import gather_paged_kv, paged_kv_lengths, paged_reference, random_paged_kv

from support import FP8, assert_close_to_reference, capture_graph, poisoned, randn, reference_lse

BF16, F16 = torch.bfloat16, torch.float16
DTYPES = [d for d in (F16, BF16, FP8) if d is not None]
MASKS = [("dense", -1), ("causal", -1), ("causal", 40)]
# Odd sizes: a single key, one short of and one past a 128 tile, empty requests, a request without queries.
ODD = [(1, 1), (127, 127), (129, 129), (0, 0), (5, 0), (0, 33), (64, 300), (3, 200)]


def _lengths(rng, mask_type, count=5):
    lengths = [rng.choice(ODD) for _ in range(count)]
    if mask_type == "causal":  # the queries are the last Sq of the Sk keys
        lengths = [(min(sq, sk), sk) for sq, sk in lengths]
    return lengths


def _cache(lengths, rng, *, page_size=16, kv_layout="HND", dtype=BF16, hkv=2, d=128, tables="cuda", strided=False):
    return random_paged_kv(
        lengths,
        page_size=page_size,
        kv_layout=kv_layout,
        num_kv_heads=hkv,
        head_dim=d,
        dtype=dtype,
        device="cuda",
        tables_device=tables,
        rng=rng,
        strided=strided,
    )


def _q(cache, hq, d, dtype):
    return randn((sum(sq for sq, _ in cache.lengths), hq, d), dtype)


def _one_shot(q, cache, out_dtype=None, **kwargs):
    out = poisoned(q.shape, out_dtype or q.dtype)
    result = tsattn.batch_prefill_with_paged_kv_cache(
        q, *cache.arguments(), page_size=cache.page_size, kv_layout=cache.kv_layout, out=out, **kwargs
    )
    assert result is out
    return out


def _oracle(q, cache, **kwargs):
    return paged_reference(q, *cache.arguments(), page_size=cache.page_size, kv_layout=cache.kv_layout, **kwargs)


def _wrapper(cache, hq, d, dtype, out_dtype=None, batch_size=8, max_q=512, max_kv=512, **kwargs):
    w = tsattn.BatchPrefillPagedTSWrapper()
    w.plan(
        device="cuda",
        batch_size=batch_size,
        max_seq_len_q=max_q,
        max_kv_len=max_kv,
        num_qo_heads=hq,
        num_kv_heads=cache.k_cache.shape[1 if cache.kv_layout == "HND" else 2],
        head_dim=d,
        q_dtype=dtype,
        kv_dtype=dtype,
        out_dtype=out_dtype,
        page_size=cache.page_size,
        kv_layout=cache.kv_layout,
        **kwargs,
    )
    return w


def _same_bytes(a, b, what):
    x, y = a.contiguous().view(torch.uint8), b.contiguous().view(torch.uint8)
    assert torch.equal(x, y), f"{what}: {int((x != y).sum())} bytes differ"


@pytest.mark.parametrize(
    "mask,layout,page_size,tables",
    list(itertools.product(MASKS, ("HND", "NHD"), (16, 32, 64, 128), ("cpu", "cuda"))),
    ids=lambda v: f"{v[0]}{v[1]}" if isinstance(v, tuple) else str(v),
)
def test_one_shot_against_the_oracle(mask, layout, page_size, tables):
    mask_type, window = mask
    rng = random.Random()
    lengths = _lengths(rng, mask_type)
    cache = _cache(lengths, rng, page_size=page_size, kv_layout=layout, tables=tables, strided=rng.random() < 0.5)
    q = _q(cache, 4, 128, BF16)
    out = _one_shot(q, cache, mask_type=mask_type, window_left=window)
    what = f"{mask_type} window={window} {layout} page_size={page_size} tables on {tables} lengths={lengths}"
    # The packed kernel over gathered keys, or (Hopper, D128, 16-bit) its paged variant.
    kernel = tsattn.last_kernel_name()
    assert re.search(r"\.packed(\.paged)?(\.short_keys)?$", kernel) or sum(sq for sq, _ in lengths) == 0, what
    assert_close_to_reference(out, _oracle(q, cache, mask_type=mask_type, window_left=window), BF16, what)


@pytest.mark.parametrize("in_dtype,out_dtype", list(itertools.product(DTYPES, DTYPES)), ids=str)
def test_every_dtype_pair(in_dtype, out_dtype):
    rng = random.Random()
    cache = _cache([(3, 40), (0, 0), (70, 129)], rng, dtype=in_dtype, kv_layout=rng.choice(["HND", "NHD"]))
    q = _q(cache, 8, 128, in_dtype)
    out = poisoned(q.shape, out_dtype)
    tsattn.batch_prefill_with_paged_kv_cache(
        q, *cache.arguments(), page_size=16, kv_layout=cache.kv_layout, mask_type="causal", out=out
    )
    assert_close_to_reference(out, _oracle(q, cache, mask_type="causal"), in_dtype, f"{in_dtype} -> {out_dtype}")


@pytest.mark.parametrize("hq,hkv,d", [(8, 8, 128), (8, 1, 256), (6, 2, 256)])
def test_heads_and_head_dims(hq, hkv, d):
    rng = random.Random()
    cache = _cache([(129, 300), (1, 17)], rng, hkv=hkv, d=d, page_size=32, kv_layout="NHD", strided=True)
    q = _q(cache, hq, d, BF16)
    out = _one_shot(q, cache, mask_type="causal", sm_scale=0.05, output_scale=1.5)
    expected = _oracle(q, cache, mask_type="causal", sm_scale=0.05, output_scale=1.5)
    assert_close_to_reference(out, expected, BF16, f"Hq={hq} Hkv={hkv} D={d}")


@pytest.mark.parametrize("tables", ["cpu", "cuda"])
@pytest.mark.parametrize("mask", MASKS, ids=str)
def test_run_equals_one_shot_and_writes_lse(mask, tables):
    mask_type, window = mask
    rng = random.Random()
    lengths = _lengths(rng, mask_type, count=6)
    cache = _cache(lengths, rng, page_size=32, kv_layout=rng.choice(["HND", "NHD"]), tables=tables)
    q = _q(cache, 8, 128, BF16)
    w = _wrapper(cache, 8, 128, BF16, mask_type=mask_type, window_left=window)
    shot = _one_shot(q, cache, mask_type=mask_type, window_left=window)
    out = poisoned(q.shape, BF16)
    ran, lse = w.run(q, *cache.arguments(), out=out, return_lse=True)
    assert ran is out
    assert tsattn.last_kernel_name().endswith(".lse") or q.shape[0] == 0
    torch.cuda.synchronize()
    assert_close_to_reference(out, _oracle(q, cache, mask_type=mask_type, window_left=window), BF16, "run")
    # The lse kernel is the plain one's twin: its output has the same bytes.
    _same_bytes(out, shot, f"run with lse and the one-shot call, {mask_type} tables on {tables}")
    plain = w.run(q, *cache.arguments())
    _same_bytes(plain, shot, "run without lse and the one-shot call")

    keys = paged_kv_lengths(
        *(t.cpu() for t in cache.arguments()[2:]),
        total_q=q.shape[0],
        num_pages=cache.k_cache.shape[0],
        page_size=cache.page_size,
    )
    k, _, kv_indptr = gather_paged_kv(
        cache.k_cache,
        cache.v_cache,
        cache.paged_kv_indptr.cpu(),
        cache.paged_kv_indices.cpu(),
        keys,
        page_size=cache.page_size,
        kv_layout=cache.kv_layout,
    )
    expected = reference_lse(
        q, k, qo_indptr=cache.qo_indptr.cpu(), kv_indptr=kv_indptr.cpu(), mask_type=mask_type, window_left=window
    )
    assert lse.shape == q.shape[:-1] and lse.dtype == torch.float32
    empty = torch.isinf(expected) & (expected < 0)
    assert torch.equal(torch.isinf(lse) & (lse < 0), empty), "-inf rows differ"
    torch.testing.assert_close(lse[~empty], expected[~empty], atol=1e-3, rtol=1e-4)


def test_one_plan_serves_runs_of_other_shapes_and_checks_its_capacities():
    rng = random.Random()
    w = None
    for _ in range(4):
        lengths = [(rng.randint(0, 100), rng.randint(0, 300)) for _ in range(rng.randint(1, 4))]
        lengths = [(min(sq, sk), sk) for sq, sk in lengths]
        cache = _cache(lengths, rng, page_size=16, tables=rng.choice(["cpu", "cuda"]))
        q = _q(cache, 4, 128, BF16)
        w = w or _wrapper(cache, 4, 128, BF16, batch_size=4, max_q=100, max_kv=300, mask_type="causal")
        out = w.run(q, *cache.arguments())
        assert_close_to_reference(out, _oracle(q, cache, mask_type="causal"), BF16, f"lengths={lengths}")
    big = _cache([(2, 301)], rng, page_size=16, tables="cpu")
    q = _q(big, 4, 128, BF16)
    with pytest.raises(ValueError, match="more than the plan's max_kv_len=300"):
        w.run(q, *big.arguments())
    many = _cache([(1, 5)] * 5, rng, page_size=16, tables="cuda")
    with pytest.raises(ValueError, match="exceeds the plan's batch_size=4"):
        w.run(_q(many, 4, 128, BF16), *many.arguments())
    # Unchecked, the same runs are clamped on the device: no fault, nothing read out of bounds.
    w.run(q, *big.arguments(), validate=False)
    w.run(_q(many, 4, 128, BF16), *many.arguments(), validate=False)
    torch.cuda.synchronize()


def test_cuda_graph_of_a_run_replays_with_a_changed_page_table():
    """A run captured with GPU tables: replays read the tables' values of the replay. The second
    replay moves every page to another id (copying its slots there) and rewrites paged_kv_indices."""
    rng = random.Random()
    lengths = [(20, 90), (0, 0), (64, 64), (1, 129)]
    cache = _cache(lengths, rng, page_size=16, kv_layout="NHD")
    # Room for a second copy of every page.
    pages = cache.k_cache.shape[0]
    k_cache = torch.cat([cache.k_cache, torch.full_like(cache.k_cache, float("nan"))])
    v_cache = torch.cat([cache.v_cache, torch.full_like(cache.v_cache, float("nan"))])
    cache.k_cache, cache.v_cache = k_cache, v_cache
    q = _q(cache, 4, 128, BF16)
    w = _wrapper(cache, 4, 128, BF16, batch_size=4, max_q=128, max_kv=256, mask_type="causal")
    out = poisoned(q.shape, BF16)
    graph = capture_graph(lambda: w.run(q, *cache.arguments(), out=out))
    for replay in range(3):
        if replay == 1:
            used = cache.paged_kv_indptr[-1].item()
            ids = cache.paged_kv_indices[:used].long()
            k_cache[ids + pages] = k_cache[ids]
            v_cache[ids + pages] = v_cache[ids]
            cache.paged_kv_indices[:used] += pages
        q.copy_(randn(q.shape, BF16))
        out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        assert_close_to_reference(out, _oracle(q, cache, mask_type="causal"), BF16, f"replay {replay}")


def test_one_shot_call_is_capturable_with_gpu_tables():
    rng = random.Random()
    cache = _cache([(10, 50), (30, 30)], rng, page_size=64, tables="cuda")
    q = _q(cache, 4, 128, BF16)
    out = poisoned(q.shape, BF16)
    graph = capture_graph(
        lambda: tsattn.batch_prefill_with_paged_kv_cache(q, *cache.arguments(), page_size=64, out=out)
    )
    for _ in range(2):
        q.copy_(randn(q.shape, BF16))
        out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        assert_close_to_reference(out, _oracle(q, cache), BF16, "graph replay")
    host = _cache([(10, 50)], rng, page_size=64, tables="cpu")
    host_q, host_out = _q(host, 4, 128, BF16), poisoned((10, 4, 128), BF16)
    with pytest.raises(ValueError, match="page tables are on the host"):
        with torch.cuda.graph(torch.cuda.CUDAGraph()):
            tsattn.batch_prefill_with_paged_kv_cache(host_q, *host.arguments(), page_size=64, out=host_out)


def _finite_cache(lengths, rng, **kwargs):
    """A cache whose every slot holds a finite value, so that clamped reads of any slot stay finite."""
    cache = _cache(lengths, rng, **kwargs)
    for pool in (cache.k_cache, cache.v_cache):
        pool.copy_(torch.nan_to_num(pool.float(), nan=0.1).to(pool.dtype))
    return cache


@pytest.mark.parametrize("through", ["one-shot", "run"])
def test_bad_gpu_tables_are_clamped(through):
    rng = random.Random()
    lengths = [(30, 70), (20, 40), (40, 129)]
    cache = _finite_cache(lengths, rng, page_size=16, tables="cuda")
    q = _q(cache, 4, 128, BF16)
    expected = _oracle(q, cache)
    w = _wrapper(cache, 4, 128, BF16, batch_size=3, max_q=64, max_kv=160) if through == "run" else None

    def call():
        out = poisoned(q.shape, BF16)
        if w is None:
            tsattn.batch_prefill_with_paged_kv_cache(q, *cache.arguments(), page_size=16, out=out)
        else:
            w.run(q, *cache.arguments(), out=out, validate=False)
        torch.cuda.synchronize()
        return out

    # Request 1's page ids out of range and its last page length past page_size: the other
    # requests' rows are exact, request 1's are finite (clamped reads).
    first, end = cache.paged_kv_indptr[1].item(), cache.paged_kv_indptr[2].item()
    cache.paged_kv_indices[first:end] = torch.tensor(
        [-(2**31), 2**31 - 1, -1][: end - first], dtype=torch.int32, device="cuda"
    )
    cache.paged_kv_last_page_len[1] = 10**6
    out = call()
    rows = slice(cache.qo_indptr[1].item(), cache.qo_indptr[2].item())
    assert torch.isfinite(out[rows].float()).all(), "request 1: clamped reads gave non-finite rows"
    for b in (0, 2):
        r = slice(cache.qo_indptr[b].item(), cache.qo_indptr[b + 1].item())
        assert_close_to_reference(out[r], expected[r], BF16, f"request {b} beside a bad one")

    # Garbage indptrs and lengths everywhere: no fault, nothing written out of bounds, and every row
    # the call writes is finite.
    for garbage in range(3):
        cache.paged_kv_indptr.copy_(torch.tensor([[5, -7, 2**31 - 1, 3], [0, 0, 0, 0], [0, 9, 1, 2**30]][garbage]))
        cache.paged_kv_last_page_len.copy_(torch.tensor([0, -(2**31), 17], dtype=torch.int32))
        out = call()
        written = ~torch.isnan(out.float())
        assert torch.isfinite(out.float()[written]).all(), f"garbage tables {garbage}: non-finite output"
    cache.qo_indptr.copy_(torch.tensor([0, 2**31 - 1, -4, q.shape[0]], dtype=torch.int32))
    call()


def test_host_tables_are_checked_before_anything_runs():
    rng = random.Random()
    cache = _cache([(3, 40), (2, 20)], rng, page_size=16, tables="cpu")
    q = _q(cache, 4, 128, BF16)
    out = poisoned(q.shape, BF16)
    first = int(cache.paged_kv_indptr[1])
    valid_page = int(cache.paged_kv_indices[first])
    cache.paged_kv_indices[first] = cache.k_cache.shape[0]
    with pytest.raises(ValueError, match=r"is out of range \[0, num_pages=\d+\) \(page 0 of request 1\)"):
        tsattn.batch_prefill_with_paged_kv_cache(q, *cache.arguments(), page_size=16, out=out)
    torch.cuda.synchronize()
    assert torch.isnan(out.float()).all(), "a rejected call wrote out"
    cache.paged_kv_indices[first] = valid_page  # the checks below each meet one bad argument
    with pytest.raises(TypeError, match="paged_kv_indptr has dtype int64; expected int32"):
        args = list(cache.arguments())
        args[3] = args[3].long()
        tsattn.batch_prefill_with_paged_kv_cache(q, *args, page_size=16)
    with pytest.raises(ValueError, match="out.shape"):
        tsattn.batch_prefill_with_paged_kv_cache(q, *cache.arguments(), page_size=16, out=out[1:])
