"""A CPU stand-in for tsattn.batch_prefill: checks each call against docs/contract.md's rules (the
ones a caller can break: layouts, indptrs, masks, windows, bounds, heads), then computes support's
fp64 reference and returns it in q's dtype. The transformers tests run their attention plans
through it, so a plan tsattn would reject fails on the CPU too.

For the paged KV cache (docs/paged_kv.md): paged_reference, the fp32 oracle of
batch_prefill_with_paged_kv_cache from the same arguments, and random_paged_kv, which builds random
pools and page tables for given request lengths."""

import dataclasses
import math
import random
from typing import List, Optional, Sequence, Tuple

import torch

import support


class ContractError(AssertionError):
    pass


def _require(ok, message):
    if not ok:
        raise ContractError(message)


def _check_indptr(t, name, entries, extent):
    _require(isinstance(t, torch.Tensor) and t.dtype == torch.int32 and t.dim() == 1, f"{name}: int32 1-D tensor")
    _require(t.numel() == entries, f"{name}: {t.numel()} entries, want {entries}")
    v = t.tolist()
    _require(v[0] == 0, f"{name}[0]={v[0]} != 0")
    _require(all(b >= a for a, b in zip(v, v[1:])), f"{name} decreases: {v}")
    _require(v[-1] == extent, f"{name}[-1]={v[-1]} != {extent}")
    return v


def batch_prefill(
    q,
    k,
    v,
    *,
    qo_indptr=None,
    kv_indptr=None,
    mask_type="dense",
    window_left=-1,
    variable_window_token_starts=None,
    variable_window_token_ends=None,
    sm_scale=None,
    output_scale=1.0,
    out_dtype=None,
    out=None,
):
    _require(out is None and out_dtype is None, "the integration lets batch_prefill allocate out")
    _require(q.dtype == k.dtype == v.dtype, "q, k, v share one dtype")
    _require(all(t.stride(-1) == 1 for t in (q, k, v)), "head dims contiguous")
    _require(k.shape == v.shape, f"v.shape {tuple(v.shape)} != k.shape {tuple(k.shape)}")
    _require(q.shape[-1] == k.shape[-1], "q and k head dims")
    _require(q.shape[-2] % k.shape[-2] == 0, "Hq a multiple of Hkv")
    _require(mask_type in ("dense", "causal", "variable_window"), mask_type)
    _require(type(window_left) is int and (window_left == -1 or window_left >= 1), f"window_left={window_left}")
    _require(window_left == -1 or mask_type == "causal", "a window needs the causal mask")
    variable = mask_type == "variable_window"
    _require(
        (variable_window_token_starts is not None) == variable and (variable_window_token_ends is not None) == variable,
        "variable-window bounds exactly with mask_type='variable_window'",
    )
    if sm_scale is not None:
        _require(math.isfinite(sm_scale) and sm_scale > 0, f"sm_scale={sm_scale}")
    packed = qo_indptr is not None
    _require((kv_indptr is not None) == packed, "both indptrs or neither")
    if packed:
        _require(q.dim() == 3 and k.dim() == 3, "packed: [total, H, D]")
        qo = _check_indptr(qo_indptr, "qo_indptr", kv_indptr.numel(), q.shape[0])
        kv = _check_indptr(kv_indptr, "kv_indptr", qo_indptr.numel(), k.shape[0])
        lengths = [(qo[b + 1] - qo[b], kv[b + 1] - kv[b]) for b in range(len(qo) - 1)]
        rows = q.shape[0]
    else:
        _require(q.dim() == 4 and k.dim() == 4 and q.shape[0] == k.shape[0], "fixed: [B, S, H, D], one B")
        lengths = [(q.shape[1], k.shape[1])] * q.shape[0]
        rows = None
    if mask_type == "causal":
        for b, (sq, sk) in enumerate(lengths):
            _require(sq <= sk, f"causal needs Sq <= Sk: request {b} has Sq={sq} > Sk={sk}")
    if variable:
        shape = (rows,) if packed else (q.shape[0], q.shape[1])
        for t, name in ((variable_window_token_starts, "starts"), (variable_window_token_ends, "ends")):
            _require(t.dtype == torch.int32 and tuple(t.shape) == shape, f"{name}: int32 {shape}")
        starts, ends = variable_window_token_starts.long(), variable_window_token_ends.long()
        sk_of_row = (
            torch.cat([torch.full((sq,), sk) for sq, sk in lengths]) if packed else torch.tensor(k.shape[1])
        ).to(starts.device)
        _require(
            bool(((starts >= 0) & (starts <= ends) & (ends < sk_of_row)).all()), "bounds in 0 <= start <= end < Sk"
        )
    result = support.reference(
        q,
        k,
        v,
        qo_indptr=qo_indptr,
        kv_indptr=kv_indptr,
        mask_type=mask_type,
        window_left=window_left,
        starts=variable_window_token_starts,
        ends=variable_window_token_ends,
        sm_scale=sm_scale,
        output_scale=output_scale,
    )
    return result.to(q.dtype)


# ---------------------------------------------------------------- the paged KV cache (docs/paged_kv.md)

PAGE_SIZES = (16, 32, 64, 128)
KV_LAYOUTS = ("HND", "NHD")


def _table(t, name):
    _require(isinstance(t, torch.Tensor) and t.dtype == torch.int32 and t.dim() == 1, f"{name}: int32 1-D tensor")
    return t.tolist()


def paged_kv_lengths(
    qo_indptr, paged_kv_indptr, paged_kv_indices, paged_kv_last_page_len, *, total_q, num_pages, page_size
):
    """docs/paged_kv.md's table rules (ContractError naming the broken one); returns each request's (Sq, Sk).
    A request without pages has Sk = 0 whatever its last_page_len; paged_kv_indices may run past
    paged_kv_indptr[-1] (the rest is unread)."""
    _require(page_size in PAGE_SIZES, f"page_size={page_size} not in {PAGE_SIZES}")
    qo = _table(qo_indptr, "qo_indptr")
    ptr = _table(paged_kv_indptr, "paged_kv_indptr")
    ids = _table(paged_kv_indices, "paged_kv_indices")
    last = _table(paged_kv_last_page_len, "paged_kv_last_page_len")
    _require(len(qo) >= 1 and len(ptr) == len(qo), f"qo_indptr has {len(qo)} entries, paged_kv_indptr {len(ptr)}")
    _require(len(last) == len(qo) - 1, f"paged_kv_last_page_len has {len(last)} entries, want B={len(qo) - 1}")
    for name, v in (("qo_indptr", qo), ("paged_kv_indptr", ptr)):
        _require(v[0] == 0, f"{name}[0]={v[0]} != 0")
        _require(all(b >= a for a, b in zip(v, v[1:])), f"{name} decreases: {v}")
    _require(qo[-1] == total_q, f"qo_indptr[-1]={qo[-1]} != q.shape[0]={total_q}")
    _require(ptr[-1] <= len(ids), f"paged_kv_indptr[-1]={ptr[-1]} > paged_kv_indices.shape[0]={len(ids)}")
    lengths = []
    for b in range(len(qo) - 1):
        pages = ptr[b + 1] - ptr[b]
        if pages > 0:
            _require(1 <= last[b] <= page_size, f"paged_kv_last_page_len[{b}]={last[b]} not in [1, {page_size}]")
        sk = (pages - 1) * page_size + last[b] if pages > 0 else 0
        _require(sk < 2**31, f"request {b} has Sk={sk} >= 2^31 keys")
        for n in range(ptr[b], ptr[b + 1]):
            _require(0 <= ids[n] < num_pages, f"paged_kv_indices[{n}]={ids[n]} not in [0, {num_pages}) (request {b})")
        lengths.append((qo[b + 1] - qo[b], sk))
    return lengths


def _pool_axes(kv_layout):
    """(head axis, slot axis) of a pool tensor in this layout."""
    _require(kv_layout in KV_LAYOUTS, f"kv_layout={kv_layout!r} not in {KV_LAYOUTS}")
    return (1, 2) if kv_layout == "HND" else (2, 1)


def gather_paged_kv(k_cache, v_cache, paged_kv_indptr, paged_kv_indices, lengths, *, page_size, kv_layout):
    """Each request's pages in table order, cut at its Sk (lengths: its (Sq, Sk) pairs) and packed:
    k, v [total_k, Hkv, D] in the pools' dtype and kv_indptr int32 [B + 1], on the pools' device."""
    head_axis, _ = _pool_axes(kv_layout)
    ptr, ids = paged_kv_indptr.tolist(), paged_kv_indices.tolist()
    ks, vs, kv_indptr = [], [], [0]
    for b, (_, sk) in enumerate(lengths):
        pages = torch.tensor(ids[ptr[b] : ptr[b + 1]], dtype=torch.long, device=k_cache.device)
        for pool, out in ((k_cache, ks), (v_cache, vs)):
            chosen = pool.index_select(0, pages)  # [pages, ..., D] in the pool's layout
            if head_axis == 1:
                chosen = chosen.transpose(1, 2)  # HND pages to [pages, page_size, Hkv, D]
            out.append(chosen.reshape(-1, pool.shape[head_axis], pool.shape[-1])[:sk])
        kv_indptr.append(kv_indptr[-1] + sk)
    hkv, d = k_cache.shape[head_axis], k_cache.shape[-1]
    empty = k_cache.new_empty((0, hkv, d))
    k = torch.cat(ks) if ks else empty
    v = torch.cat(vs) if vs else empty
    return k, v, torch.tensor(kv_indptr, dtype=torch.int32, device=k_cache.device)


def paged_reference(
    q,
    k_cache,
    v_cache,
    qo_indptr,
    paged_kv_indptr,
    paged_kv_indices,
    paged_kv_last_page_len,
    *,
    page_size=32,
    kv_layout="HND",
    mask_type="dense",
    window_left=-1,
    sm_scale=None,
    output_scale=1.0,
    out_dtype=None,
    out=None,
) -> torch.Tensor:
    """The fp32 oracle of batch_prefill_with_paged_kv_cache, from the same arguments: checks them
    against docs/paged_kv.md (ContractError), gathers each request's pages into packed K/V and
    computes support.reference over them. Returns fp32 [total_q, Hq, D]; out_dtype and out are
    accepted so that a test can pass the GPU call's arguments unchanged, and never used."""
    del out_dtype, out  # the oracle's result is fp32 whatever the call writes
    head_axis, slot_axis = _pool_axes(kv_layout)
    _require(q.dim() == 3, f"q: [total_q, Hq, D], got {tuple(q.shape)}")
    _require(k_cache.dim() == 4 and v_cache.shape == k_cache.shape, "k_cache and v_cache: one 4-D shape")
    _require(k_cache.shape[slot_axis] == page_size, f"k_cache.shape[{slot_axis}] != page_size={page_size}")
    _require(q.dtype == k_cache.dtype == v_cache.dtype, "q, k_cache, v_cache share one dtype")
    _require(all(t.stride(-1) == 1 for t in (q, k_cache, v_cache)), "head dims contiguous")
    _require(q.shape[-1] == k_cache.shape[-1], "q and the pools share D")
    _require(q.shape[1] % k_cache.shape[head_axis] == 0, "Hq a multiple of Hkv")
    _require(mask_type in ("dense", "causal"), f"mask_type={mask_type!r}: dense or causal with a paged cache")
    _require(type(window_left) is int and (window_left == -1 or window_left >= 1), f"window_left={window_left}")
    _require(window_left == -1 or mask_type == "causal", "a window needs the causal mask")
    lengths = paged_kv_lengths(
        qo_indptr,
        paged_kv_indptr,
        paged_kv_indices,
        paged_kv_last_page_len,
        total_q=q.shape[0],
        num_pages=k_cache.shape[0],
        page_size=page_size,
    )
    if mask_type == "causal":
        for b, (sq, sk) in enumerate(lengths):
            _require(sq <= sk, f"causal needs Sq <= Sk: request {b} has Sq={sq} > Sk={sk}")
    k, v, kv_indptr = gather_paged_kv(
        k_cache, v_cache, paged_kv_indptr, paged_kv_indices, lengths, page_size=page_size, kv_layout=kv_layout
    )
    return support.reference(
        q,
        k,
        v,
        qo_indptr=qo_indptr,
        kv_indptr=kv_indptr,
        mask_type=mask_type,
        window_left=window_left,
        sm_scale=sm_scale,
        output_scale=output_scale,
    )


@dataclasses.dataclass
class PagedKv:
    """A paged KV cache from random_paged_kv: the pools, the four tables, and what they were built
    from (each request's (Sq, Sk) and its page ids in order), so that a test can find key j of
    request b as page_ids[b][j // page_size], slot j % page_size without the tables."""

    k_cache: torch.Tensor
    v_cache: torch.Tensor
    qo_indptr: torch.Tensor
    paged_kv_indptr: torch.Tensor
    paged_kv_indices: torch.Tensor
    paged_kv_last_page_len: torch.Tensor
    page_size: int
    kv_layout: str
    lengths: List[Tuple[int, int]]
    page_ids: List[List[int]]

    def arguments(self):
        """k_cache, v_cache and the four tables, in the call's positional order (after q)."""
        return (
            self.k_cache,
            self.v_cache,
            self.qo_indptr,
            self.paged_kv_indptr,
            self.paged_kv_indices,
            self.paged_kv_last_page_len,
        )


def random_paged_kv(
    lengths: Sequence[Tuple[int, int]],
    *,
    page_size: int,
    kv_layout: str,
    num_kv_heads: int,
    head_dim: int,
    dtype,
    device="cpu",
    tables_device=None,
    rng: Optional[random.Random] = None,
    repeats: bool = True,
    strided: bool = False,
) -> PagedKv:
    """Pools and tables for requests of the given (Sq, Sk): page ids drawn from a shuffled range with
    a few spare pages; with `repeats` some ids reused within and across requests (at least one
    whenever two pages or more are used); partial last pages where Sk is not a multiple of
    page_size; no pages for Sk = 0, with a garbage last_page_len (it is unread); a few garbage
    entries past paged_kv_indptr[-1]. Slots a request reads hold support.randn values, every other
    slot NaN, so a read of the wrong slot shows. strided=True makes the pools the K and V halves of
    one [num_pages, 2, ..., D + 16] buffer (strided views, D contiguous). Tables are int32 on
    tables_device (default: device)."""
    rng = rng or random.Random()
    tables_device = tables_device if tables_device is not None else device
    head_axis, slot_axis = _pool_axes(kv_layout)
    needed = sum(-(-sk // page_size) for _, sk in lengths)
    num_pages = needed + rng.randrange(4)
    fresh = list(range(num_pages))
    rng.shuffle(fresh)
    used, page_ids, repeated = [], [], False
    for _, sk in lengths:
        ids = []
        for _ in range(-(-sk // page_size)):
            reuse = repeats and len(used) > 0 and rng.randrange(4) == 0
            ids.append(rng.choice(used) if reuse else fresh[len(used)])
            if not reuse:
                used.append(ids[-1])
            repeated |= reuse
        page_ids.append(ids)
    if repeats and not repeated and len(used) >= 2:
        # The last page of the last request with pages takes the first page's id.
        next(ids for ids in reversed(page_ids) if ids)[-1] = used[0]

    qo, ptr, indices, last = [0], [0], [], []
    for (sq, sk), ids in zip(lengths, page_ids):
        qo.append(qo[-1] + sq)
        indices += ids
        ptr.append(len(indices))
        last.append(sk - (len(ids) - 1) * page_size if ids else rng.choice([0, -3, page_size + 1, -(2**31)]))
    indices += [rng.choice([-1, 2**30]) for _ in range(rng.randrange(3))]

    shape = [num_pages, 0, 0, head_dim]
    shape[head_axis], shape[slot_axis] = num_kv_heads, page_size
    if strided:
        storage = torch.empty([num_pages, 2] + shape[1:3] + [head_dim + 16], dtype=dtype, device=device)
        k_cache, v_cache = storage[:, 0, ..., :head_dim], storage[:, 1, ..., :head_dim]
    else:
        k_cache = torch.empty(shape, dtype=dtype, device=device)
        v_cache = torch.empty(shape, dtype=dtype, device=device)
    # Slots read: page p's first read[p] slots (the longest use of the page).
    read = [0] * num_pages
    for (_, sk), ids in zip(lengths, page_ids):
        for n, page in enumerate(ids):
            read[page] = max(read[page], min(page_size, sk - n * page_size))
    slot = torch.arange(page_size, device=device)
    mask = slot.unsqueeze(0) < torch.tensor(read, device=device, dtype=torch.long).unsqueeze(1)  # [num_pages, ps]
    mask = mask.unsqueeze(-1).unsqueeze(-1) if slot_axis == 1 else mask.unsqueeze(1).unsqueeze(-1)
    if strided:  # the padding and every unread slot NaN (0x7F is NaN in float8_e4m3fn)
        storage.view(torch.uint8).fill_(0x7F) if dtype == support.FP8 else storage.fill_(float("nan"))
    for pool in (k_cache, v_cache):
        values = support.randn(shape, dtype, device=device).float()
        pool.copy_(torch.where(mask, values, torch.full_like(values, float("nan"))).to(dtype))

    def table(values):
        return torch.tensor(values, dtype=torch.int32, device=tables_device)

    return PagedKv(
        k_cache=k_cache,
        v_cache=v_cache,
        qo_indptr=table(qo),
        paged_kv_indptr=table(ptr),
        paged_kv_indices=table(indices),
        paged_kv_last_page_len=table(last),
        page_size=page_size,
        kv_layout=kv_layout,
        lengths=[tuple(x) for x in lengths],
        page_ids=page_ids,
    )
