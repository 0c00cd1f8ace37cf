"""No-GPU tests of the paged KV cache's Python helpers (reference_prefill.py; docs/paged_kv.md):
paged_reference against a naive per-request loop that reads every key straight from its page,
random_paged_kv's tables and pools, a hand-computed bottom-right causal case and the table rules."""

import math
import random

import pytest
import torch

import reference_prefill as rp
from support import FP8


def _naive(q, kv, mask_type="dense", window_left=-1, sm_scale=None, output_scale=1.0):
    """fp64 attention with plain loops: key j of request b is slot j % page_size of page
    page_ids[b][j // page_size], read through the pool's own indexing; the mask is the contract's
    predicate on (i, j)."""
    scale = 1.0 / math.sqrt(q.shape[-1]) if sm_scale is None else float(sm_scale)
    hq = q.shape[1]
    hkv = kv.k_cache.shape[1 if kv.kv_layout == "HND" else 2]
    out = torch.zeros(q.shape, dtype=torch.float64)
    row = 0
    for (sq, sk), ids in zip(kv.lengths, kv.page_ids):
        keys, values = [], []
        for j in range(sk):
            page, slot = ids[j // kv.page_size], j % kv.page_size
            if kv.kv_layout == "HND":
                keys.append(kv.k_cache[page, :, slot])
                values.append(kv.v_cache[page, :, slot])
            else:
                keys.append(kv.k_cache[page, slot])
                values.append(kv.v_cache[page, slot])
        for i in range(sq):
            diagonal = i + sk - sq
            visible = [
                j
                for j in range(sk)
                if mask_type == "dense" or (j <= diagonal and (window_left < 1 or j >= diagonal - window_left))
            ]
            if visible:
                k = torch.stack([keys[j] for j in visible]).double()  # [n, Hkv, D]
                v = torch.stack([values[j] for j in visible]).double()
                for h in range(hq):
                    g = h // (hq // hkv)
                    p = torch.softmax(scale * (k[:, g] @ q[row + i, h].double()), dim=0)
                    out[row + i, h] = output_scale * (p @ v[:, g])
        row += sq
    return out


def _lengths(mask_type, page_size):
    """Odd sizes, page edges and empty requests; Sq <= Sk where the mask is causal."""
    if mask_type == "dense":
        return [(1, 1), (127, 129), (0, 40), (5, 0), (0, 0), (129, 127), (3, page_size)]
    return [(1, 1), (127, 129), (0, 40), (0, 0), (33, 70), (129, 129), (2, page_size + 1)]


@pytest.mark.parametrize("strided", [False, True], ids=["compact", "strided"])
@pytest.mark.parametrize(
    "mask_type,window_left", [("dense", -1), ("causal", -1), ("causal", 17)], ids=["dense", "causal", "window"]
)
@pytest.mark.parametrize("page_size", rp.PAGE_SIZES)
@pytest.mark.parametrize("kv_layout", rp.KV_LAYOUTS)
def test_paged_reference_matches_a_naive_loop(kv_layout, page_size, mask_type, window_left, strided):
    rng = random.Random()
    kv = rp.random_paged_kv(
        _lengths(mask_type, page_size),
        page_size=page_size,
        kv_layout=kv_layout,
        num_kv_heads=2,
        head_dim=128,
        dtype=torch.bfloat16,
        rng=rng,
        strided=strided,
    )
    q = torch.randn(kv.qo_indptr[-1].item(), 4, 128).mul(0.2).to(torch.bfloat16)
    scales = dict(sm_scale=rng.uniform(0.02, 0.5), output_scale=rng.uniform(0.25, 4.0))
    got = rp.paged_reference(
        q,
        *kv.arguments(),
        page_size=page_size,
        kv_layout=kv_layout,
        mask_type=mask_type,
        window_left=window_left,
        **scales,
    )
    want = _naive(q, kv, mask_type, window_left, **scales)
    assert got.dtype == torch.float32 and got.shape == q.shape
    assert not got.isnan().any(), "a NaN slot (unread by every request) reached the output"
    torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=1e-6)
    # Rows that see no key: exactly 0 (Sk = 0 requests here).
    assert (want.abs().sum(dim=(1, 2)) == 0).equal(got.abs().sum(dim=(1, 2)) == 0)


@pytest.mark.parametrize("dtype", [torch.float16, FP8], ids=["fp16", "fp8"])
def test_other_dtypes_gqa_and_d256(dtype):
    if dtype is None:
        pytest.skip("this torch has no float8_e4m3fn")
    kv = rp.random_paged_kv(
        [(9, 130), (0, 3), (64, 64)],
        page_size=32,
        kv_layout="NHD",
        num_kv_heads=1,
        head_dim=256,
        dtype=dtype,
        strided=True,
    )
    q = torch.randn(73, 8, 256).mul(0.125).to(dtype)
    got = rp.paged_reference(
        q, *kv.arguments(), page_size=32, kv_layout="NHD", mask_type="causal", out_dtype=torch.bfloat16
    )
    torch.testing.assert_close(got.double(), _naive(q, kv, "causal"), rtol=1e-5, atol=1e-6)


def test_random_paged_kv_tables_and_pools():
    rng = random.Random()
    shuffled = False
    for _ in range(30):
        page_size = rng.choice(rp.PAGE_SIZES)
        kv_layout = rng.choice(rp.KV_LAYOUTS)
        strided = rng.random() < 0.5
        lengths = [(rng.randrange(5), rng.choice([0, 1, 127, 129, page_size, rng.randrange(300)])) for _ in range(5)]
        kv = rp.random_paged_kv(
            lengths,
            page_size=page_size,
            kv_layout=kv_layout,
            num_kv_heads=3,
            head_dim=128,
            dtype=torch.bfloat16,
            rng=rng,
            strided=strided,
        )
        num_pages = kv.k_cache.shape[0]
        ptr, ids = kv.paged_kv_indptr.tolist(), kv.paged_kv_indices.tolist()
        last = kv.paged_kv_last_page_len.tolist()
        assert all(t.dtype == torch.int32 for t in kv.arguments()[2:])
        assert rp.paged_kv_lengths(
            *kv.arguments()[2:], total_q=sum(sq for sq, _ in lengths), num_pages=num_pages, page_size=page_size
        ) == [tuple(x) for x in lengths]
        all_ids = []
        for b, (_, sk) in enumerate(lengths):
            pages = -(-sk // page_size)
            assert ids[ptr[b] : ptr[b + 1]] == kv.page_ids[b] and len(kv.page_ids[b]) == pages
            if pages:
                assert last[b] == sk - (pages - 1) * page_size and 1 <= last[b] <= page_size
            all_ids += kv.page_ids[b]
        if len(all_ids) >= 2:
            assert len(set(all_ids)) < len(all_ids), "no page id repeats"
        shuffled |= all_ids != sorted(all_ids)

        head_axis, slot_axis = (1, 2) if kv_layout == "HND" else (2, 1)
        assert kv.k_cache.shape[slot_axis] == page_size and kv.k_cache.shape[head_axis] == 3
        assert kv.k_cache.stride(-1) == 1 and kv.v_cache.shape == kv.k_cache.shape
        assert kv.k_cache.is_contiguous() != strided
        # Read slots hold values, every other slot NaN.
        read = torch.zeros(num_pages, page_size, dtype=torch.bool)
        for (_, sk), page_ids in zip(lengths, kv.page_ids):
            for n, page in enumerate(page_ids):
                read[page, : min(page_size, sk - n * page_size)] = True
        for pool in (kv.k_cache, kv.v_cache):
            nan = pool.float().isnan()
            if slot_axis == 1:
                nan = nan.transpose(1, 2)  # [pages, heads, slots, D] in both layouts
            assert nan.all(dim=3).all(dim=1).equal(~read) and nan.any(dim=3).any(dim=1).equal(~read)
    assert shuffled, "page ids never out of order in 30 tables"


def test_strided_pools_share_one_buffer():
    kv = rp.random_paged_kv(
        [(1, 50)], page_size=16, kv_layout="HND", num_kv_heads=2, head_dim=128, dtype=torch.float16, strided=True
    )
    k, v = kv.k_cache, kv.v_cache
    assert k.untyped_storage().data_ptr() == v.untyped_storage().data_ptr()
    assert v.data_ptr() - k.data_ptr() == 2 * 16 * (128 + 16) * k.element_size()
    assert k.stride() == (2 * 2 * 16 * 144, 16 * 144, 144, 1)


def test_gather_follows_the_tables():
    kv = rp.random_paged_kv(
        [(0, 33), (0, 0), (0, 16), (0, 1)],
        page_size=16,
        kv_layout="NHD",
        num_kv_heads=2,
        head_dim=128,
        dtype=torch.bfloat16,
    )
    k, v, kv_indptr = rp.gather_paged_kv(
        kv.k_cache, kv.v_cache, kv.paged_kv_indptr, kv.paged_kv_indices, kv.lengths, page_size=16, kv_layout="NHD"
    )
    assert kv_indptr.tolist() == [0, 33, 33, 49, 50] and kv_indptr.dtype == torch.int32
    assert k.shape == (50, 2, 128) and v.shape == (50, 2, 128)
    first = [0, 33, 33, 49]
    for b, (_, sk) in enumerate(kv.lengths):
        for j in range(sk):
            page = kv.page_ids[b][j // 16]
            assert k[first[b] + j].equal(kv.k_cache[page, j % 16])
            assert v[first[b] + j].equal(kv.v_cache[page, j % 16])


@pytest.mark.parametrize("kv_layout", rp.KV_LAYOUTS)
def test_bottom_right_causal_over_shuffled_pages(kv_layout):
    """One head, equal scores, v of key j one-hot at d = j: each row's output is 1/n on exactly the
    keys it sees. Request 0 has Sq=2 of Sk=20 keys over two pages, request 1 Sq=Sk=3."""
    kv = rp.random_paged_kv(
        [(2, 20), (3, 3)],
        page_size=16,
        kv_layout=kv_layout,
        num_kv_heads=1,
        head_dim=128,
        dtype=torch.float32,
        repeats=False,
    )
    for b, (_, sk) in enumerate(kv.lengths):
        for j in range(sk):
            page, slot = kv.page_ids[b][j // 16], j % 16
            index = (page, 0, slot) if kv_layout == "HND" else (page, slot, 0)
            kv.k_cache[index] = 0.5
            kv.v_cache[index] = torch.nn.functional.one_hot(torch.tensor(j), 128).float()
    q = torch.full((5, 1, 128), 0.25)
    for window_left, rows in (
        (-1, [(0, 18), (0, 19), (0, 0), (0, 1), (0, 2)]),
        (2, [(16, 18), (17, 19), (0, 0), (0, 1), (0, 2)]),
    ):
        out = rp.paged_reference(
            q, *kv.arguments(), page_size=16, kv_layout=kv_layout, mask_type="causal", window_left=window_left
        )
        for row, (first, last) in enumerate(rows):
            want = torch.zeros(128)
            want[first : last + 1] = 1.0 / (last - first + 1)
            torch.testing.assert_close(
                out[row, 0], want, rtol=1e-6, atol=1e-7, msg=f"window_left={window_left} row {row}"
            )


def _valid():
    kv = rp.random_paged_kv(
        [(5, 40), (0, 0), (7, 17)], page_size=16, kv_layout="HND", num_kv_heads=2, head_dim=128, dtype=torch.bfloat16
    )
    return torch.zeros(12, 2, 128, dtype=torch.bfloat16), kv


def _set(t, index, value):
    t = t.clone()
    t[index] = value
    return t


# (case id, change to (q, args, kwargs), message part)
REJECTIONS = [
    ("page_size_24", lambda q, a, kw: kw.update(page_size=24), "page_size=24"),
    ("layout", lambda q, a, kw: kw.update(kv_layout="NDH"), "kv_layout='NDH'"),
    ("variable_window", lambda q, a, kw: kw.update(mask_type="variable_window"), "dense or causal"),
    ("window_dense", lambda q, a, kw: kw.update(window_left=4), "a window needs the causal mask"),
    ("indices_int64", lambda q, a, kw: a.__setitem__(4, a[4].long()), "paged_kv_indices: int32 1-D tensor"),
    ("qo_end", lambda q, a, kw: a.__setitem__(2, _set(a[2], -1, 13)), "qo_indptr[-1]=13 != q.shape[0]=12"),
    ("indptr_decreases", lambda q, a, kw: a.__setitem__(3, _set(a[3], 2, 2)), "paged_kv_indptr decreases"),
    ("indptr_start", lambda q, a, kw: a.__setitem__(3, _set(a[3], 0, 1)), "paged_kv_indptr[0]=1 != 0"),
    (
        "indptr_past_indices",
        lambda q, a, kw: a.__setitem__(4, a[4][:4]),
        "paged_kv_indptr[-1]=5 > paged_kv_indices.shape[0]=4",
    ),
    ("last_0", lambda q, a, kw: a.__setitem__(5, _set(a[5], 0, 0)), "paged_kv_last_page_len[0]=0 not in [1, 16]"),
    ("last_17", lambda q, a, kw: a.__setitem__(5, _set(a[5], 2, 17)), "paged_kv_last_page_len[2]=17"),
    ("page_id_negative", lambda q, a, kw: a.__setitem__(4, _set(a[4], 3, -1)), "paged_kv_indices[3]=-1"),
    ("page_id_past", lambda q, a, kw: a.__setitem__(4, _set(a[4], 0, 1000)), "paged_kv_indices[0]=1000"),
    (
        "causal_sq_gt_sk",
        lambda q, a, kw: (kw.update(mask_type="causal"), a.__setitem__(2, _set(a[2], 2, 6))),
        "request 1 has Sq=1 > Sk=0",
    ),
]


@pytest.mark.parametrize("change,needle", [r[1:] for r in REJECTIONS], ids=[r[0] for r in REJECTIONS])
def test_paged_reference_rejects_bad_tables(change, needle):
    q, kv = _valid()
    args = list(kv.arguments())
    kwargs = dict(page_size=16, kv_layout="HND")
    change(q, args, kwargs)
    with pytest.raises(rp.ContractError) as info:
        rp.paged_reference(q, *args, **kwargs)
    assert needle in str(info.value)


def test_unread_entries_and_empty_requests_are_accepted():
    q, kv = _valid()
    args = list(kv.arguments())
    args[4] = torch.cat([args[4], torch.tensor([-5, 2**31 - 1], dtype=torch.int32)])  # past paged_kv_indptr[-1]
    args[5] = _set(args[5], 1, 123456)  # request 1 has no pages
    out = rp.paged_reference(q, *args, page_size=16, kv_layout="HND")
    assert out.shape == q.shape and not out.isnan().any()
    empty = rp.random_paged_kv(
        [(3, 0), (0, 0)], page_size=64, kv_layout="NHD", num_kv_heads=1, head_dim=128, dtype=torch.bfloat16
    )
    assert empty.paged_kv_indptr.tolist() == [0, 0, 0]
    out = rp.paged_reference(
        torch.ones(3, 2, 128, dtype=torch.bfloat16), *empty.arguments(), page_size=64, kv_layout="NHD"
    )
    assert out.eq(0).all()
