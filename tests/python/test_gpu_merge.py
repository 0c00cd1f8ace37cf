"""GPU: merge_state and merge_states against an fp64 torch oracle, and chunked prefill built on them.

Merges: fresh random inputs (v from randn, lse spread over several units so weights differ a lot),
outputs poisoned with NaN first, every element checked; rows whose lse is -inf on one side must copy
the other side bit for bit, rows with no finite state must be exactly 0 and -inf. Odd row counts,
one or many heads, D = 128 and 256 (and widths that force narrower accesses), fp16, bf16 and fp32,
strided views.

Chunked prefill: the keys of a call split into disjoint parts, each part one call with its lse
(the one-shot call's lse output, as tests/python/test_gpu_lse.py uses it, or the wrapper's
return_lse=True), then merged: the result must match the full call and the fp32 oracle within the
contract's tolerances, dense, bottom-right causal over a cached prefix, packed with an empty request
and empty prefixes, and a sliding window that leaves late rows no visible prefix key (-inf on that
side).
"""

import pytest
import torch

import tsattn
from tsattn import _call

from support import assert_close_to_reference, indptr, poisoned, randn, reference, reference_lse

NEG_INF = float("-inf")
V_DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}
# (rtol, atol) of the merged v against the fp64 oracle: the output's rounding dominates.
V_TOLERANCE = {"fp16": (2e-3, 2e-4), "bf16": (1e-2, 1e-3), "fp32": (1e-5, 1e-6)}
S_TOLERANCE = dict(rtol=1e-5, atol=1e-5)


def random_lse(shape, minus_inf_fraction=0.0, generator=None):
    """float32 lse values spread over [-6, 6], with about `minus_inf_fraction` of them -inf."""
    s = torch.rand(shape, device="cuda", generator=generator) * 12 - 6
    if minus_inf_fraction > 0:
        s[torch.rand(shape, device="cuda", generator=generator) < minus_inf_fraction] = NEG_INF
    return s


def oracle(vs, ss):
    """fp64 merge of states stacked on dim -3 (v [..., n, H, D]) and dim -2 (s [..., n, H])."""
    v, s = vs.double(), ss.double()
    if v.shape[-3] == 0:
        return torch.zeros(v.shape[:-3] + v.shape[-2:], dtype=torch.float64, device=v.device), torch.full(
            s.shape[:-2] + s.shape[-1:], NEG_INF, dtype=torch.float64, device=v.device
        )
    m = s.amax(dim=-2, keepdim=True)
    finite = torch.isfinite(m)
    w = torch.where(finite, torch.exp(s - torch.where(finite, m, torch.zeros_like(m))), torch.zeros_like(s))
    total = w.sum(dim=-2)
    merged = (w.unsqueeze(-1) * torch.nan_to_num(v)).sum(dim=-3) / total.clamp_min(1e-300).unsqueeze(-1)
    merged = torch.where((total > 0).unsqueeze(-1), merged, torch.zeros_like(merged))
    lse = torch.where(total > 0, m.squeeze(-2) + torch.log(total.clamp_min(1e-300)), torch.full_like(total, NEG_INF))
    return merged, lse


def check_merge(out, s_out, vs, ss, dtype_name):
    """out/s_out against the oracle of the stacked states; one-finite-state rows bit for bit."""
    torch.cuda.synchronize()
    expected_v, expected_s = oracle(vs, ss)
    assert not torch.isnan(out).any(), "out left unwritten (NaN poison) or NaN made"
    assert not torch.isnan(s_out).any(), "s_out left unwritten (NaN poison) or NaN made"
    rtol, atol = V_TOLERANCE[dtype_name]
    torch.testing.assert_close(out.double(), expected_v, rtol=rtol, atol=atol)
    empty = torch.isinf(expected_s)
    assert torch.equal(torch.isinf(s_out) & (s_out < 0), empty), "-inf rows differ"
    torch.testing.assert_close(s_out[~empty].double(), expected_s[~empty], **S_TOLERANCE)
    # No finite state: exactly 0 and -inf.
    assert torch.equal(out[empty], torch.zeros_like(out[empty]))
    # One finite state: its v and s, bit for bit.
    finite = torch.isfinite(ss)
    single = finite.sum(dim=-2) == 1
    if single.any():
        which = finite.float().argmax(dim=-2)  # [..., H]: the finite state's index
        own_s = ss.gather(-2, which.unsqueeze(-2)).squeeze(-2)
        index = which.unsqueeze(-2).unsqueeze(-1).expand(*which.shape[:-1], 1, which.shape[-1], vs.shape[-1])
        own_v = vs.gather(-3, index).squeeze(-3)
        assert torch.equal(bits(out[single]), bits(own_v[single])), "a lone finite state's v was not copied exactly"
        assert torch.equal(bits(s_out[single]), bits(own_s[single])), "a lone finite state's lse was not kept"


def bits(t):
    """A tensor's bytes as integers, for bit-for-bit comparisons."""
    return t.contiguous().view(torch.int32 if t.element_size() == 4 else torch.int16)


# ---------------------------------------------------------------- merge_state


@pytest.mark.parametrize("dtype_name", ["fp16", "bf16", "fp32"])
@pytest.mark.parametrize("d", [128, 256])
@pytest.mark.parametrize("heads", [1, 32])
@pytest.mark.parametrize("rows", [1, 127, 129])
def test_merge_state(rows, heads, d, dtype_name):
    torch.manual_seed(rows * 1000 + heads * 10 + d)
    dtype = V_DTYPES[dtype_name]
    v_a, v_b = randn((rows, heads, d), dtype), randn((rows, heads, d), dtype)
    s_a, s_b = random_lse((rows, heads), 0.15), random_lse((rows, heads), 0.15)
    s_a[0, 0] = s_b[0, 0] = NEG_INF  # both sides empty: at least one row
    if rows > 1:
        s_a[1, 0], s_b[1, 0] = NEG_INF, 1.5  # b alone
        s_a[-1, -1], s_b[-1, -1] = -2.0, NEG_INF  # a alone
    out, s_out = poisoned(v_a.shape, dtype), poisoned(s_a.shape, torch.float32)
    result = tsattn.merge_state(v_a, s_a, v_b, s_b, out=out, s_out=s_out)
    assert result[0] is out and result[1] is s_out
    check_merge(out, s_out, torch.stack([v_a, v_b], dim=-3), torch.stack([s_a, s_b], dim=-2), dtype_name)


def test_merge_state_allocates_outputs_and_never_reads_a_minus_inf_side():
    """-inf on one side: that side's v is never read, so NaN there cannot leak into the result."""
    torch.manual_seed(3)
    v_a, v_b = randn((129, 8, 128), torch.bfloat16), randn((129, 8, 128), torch.bfloat16)
    s_a, s_b = random_lse((129, 8)), random_lse((129, 8))
    s_a[::3] = NEG_INF
    v_a[::3] = float("nan")
    v, s = tsattn.merge_state(v_a, s_a, v_b, s_b)
    assert v.dtype == torch.bfloat16 and v.shape == v_a.shape and s.dtype == torch.float32 and s.shape == s_a.shape
    check_merge(v, s, torch.stack([v_a, v_b], dim=-3), torch.stack([s_a, s_b], dim=-2), "bf16")


def test_merge_state_four_dims_and_strided_views():
    """[B, S, H, D] views: every other head of a wider tensor, a head-major tensor seen row-major, a
    transposed lse, and outputs inside larger buffers."""
    torch.manual_seed(4)
    b, s, h, d = 2, 65, 4, 128
    v_a = randn((b, s, 2 * h, d), torch.float16)[:, :, ::2]
    v_b = randn((b, h, s, d), torch.float16).transpose(1, 2)
    s_a = random_lse((b, h, s), 0.1).transpose(1, 2)
    s_b = random_lse((b, s, h + 3), 0.1)[:, :, 1 : h + 1]
    out_buffer = poisoned((b, s + 1, h, d + 64), torch.float16)
    out = out_buffer[:, 1:, :, :d]
    s_out_buffer = poisoned((b, h, s), torch.float32)
    s_out = s_out_buffer.transpose(1, 2)
    tsattn.merge_state(v_a, s_a, v_b, s_b, out=out, s_out=s_out)
    check_merge(out, s_out, torch.stack([v_a, v_b], dim=-3), torch.stack([s_a, s_b], dim=-2), "fp16")
    torch.cuda.synchronize()
    assert torch.isnan(out_buffer[:, 0]).all() and torch.isnan(out_buffer[..., d:]).all(), "wrote outside out"


@pytest.mark.parametrize("d,offset", [(100, 0), (3, 0), (128, 1), (130, 0)], ids=["d100", "d3", "misaligned", "d130"])
@pytest.mark.parametrize("dtype_name", ["fp16", "fp32"])
def test_merge_state_narrow_accesses(d, offset, dtype_name):
    """Head dims and pointers that do not allow 16-byte accesses: 8-, 4- and 2-byte ones (fp16 D = 100,
    130, 3; a pointer one element off) and fp32's narrower cases."""
    torch.manual_seed(d + offset)
    dtype = V_DTYPES[dtype_name]
    rows, heads = 33, 3
    v_a = randn((rows * heads * d + offset,), dtype)[offset:].view(rows, heads, d)
    v_b = randn((rows, heads, d), dtype)
    s_a, s_b = random_lse((rows, heads), 0.2), random_lse((rows, heads), 0.2)
    out = poisoned((rows * heads * d + offset,), dtype)[offset:].view(rows, heads, d)
    s_out = poisoned((rows, heads), torch.float32)
    tsattn.merge_state(v_a, s_a, v_b, s_b, out=out, s_out=s_out)
    check_merge(out, s_out, torch.stack([v_a, v_b], dim=-3), torch.stack([s_a, s_b], dim=-2), dtype_name)


def test_merge_state_empty_launches_nothing():
    v = torch.empty(0, 8, 128, dtype=torch.bfloat16, device="cuda")
    s = torch.empty(0, 8, device="cuda")
    out, s_out = tsattn.merge_state(v, s, v, s)
    assert out.shape == (0, 8, 128) and s_out.shape == (0, 8)


# ---------------------------------------------------------------- merge_states


@pytest.mark.parametrize("dtype_name", ["fp16", "bf16", "fp32"])
@pytest.mark.parametrize("n", [0, 1, 2, 3, 5])
@pytest.mark.parametrize("rows,heads,d", [(1, 1, 128), (127, 32, 128), (129, 4, 256)])
def test_merge_states(rows, heads, d, n, dtype_name):
    torch.manual_seed(rows + 7 * n + d)
    dtype = V_DTYPES[dtype_name]
    v = randn((rows, n, heads, d), dtype)
    s = random_lse((rows, n, heads), 0.2)
    out, s_out = poisoned((rows, heads, d), dtype), poisoned((rows, heads), torch.float32)
    result = tsattn.merge_states(v, s, out=out, s_out=s_out)
    assert result[0] is out and result[1] is s_out
    check_merge(out, s_out, v, s, dtype_name)


def test_merge_states_strided_states_axis():
    """States outermost in memory ([n, rows, H, D] seen as [rows, n, H, D]), with a leading batch dim."""
    torch.manual_seed(9)
    n, b, rows, heads, d = 3, 2, 65, 8, 128
    v = randn((n, b, rows, heads, d), torch.bfloat16).permute(1, 2, 0, 3, 4)
    s = random_lse((n, b, rows, heads), 0.2).permute(1, 2, 0, 3)
    v_merged, s_merged = tsattn.merge_states(v, s)
    assert v_merged.shape == (b, rows, heads, d) and s_merged.shape == (b, rows, heads)
    check_merge(v_merged, s_merged, v, s, "bf16")


# ---------------------------------------------------------------- chunked prefill


def attention_with_lse(q, k, v, qo=None, kv=None, mask="dense", window=-1, starts=None, ends=None):
    """One batch_prefill call with its lse output (the library's options.lse), out and lse poisoned first."""
    out = poisoned(q.shape, q.dtype)
    lse = poisoned(q.shape[:-1], torch.float32)
    _call.run(q, k, v, qo, kv, mask, window, starts, ends, None, 1.0, 0, out, lse)
    return out, lse


def check_chunked(merged, merged_lse, full, full_lse, expected, expected_lse):
    """The merge of the parts against the full call and the fp32 oracle (out and lse)."""
    torch.cuda.synchronize()
    assert_close_to_reference(merged, expected, merged.dtype, "merged vs oracle")
    assert_close_to_reference(merged, full.float(), merged.dtype, "merged vs the full call")
    empty = torch.isinf(expected_lse)
    assert torch.equal(torch.isinf(merged_lse) & (merged_lse < 0), empty), "-inf rows differ"
    assert torch.equal(torch.isinf(full_lse) & (full_lse < 0), empty)
    torch.testing.assert_close(merged_lse[~empty], expected_lse[~empty], atol=2e-3, rtol=1e-3)
    torch.testing.assert_close(merged_lse[~empty], full_lse[~empty], atol=2e-3, rtol=1e-3)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("d", [128, 256])
def test_chunked_dense_two_parts(dtype, d):
    torch.manual_seed(21 + d)
    b, sq, sk, split, hq, hkv = 2, 129, 300, 127, 8, 2
    q = randn((b, sq, hq, d), dtype)
    k, v = randn((b, sk, hkv, d), dtype), randn((b, sk, hkv, d), dtype)
    out_a, lse_a = attention_with_lse(q, k[:, :split], v[:, :split])
    out_b, lse_b = attention_with_lse(q, k[:, split:], v[:, split:])
    merged, merged_lse = tsattn.merge_state(out_a, lse_a, out_b, lse_b)
    full, full_lse = attention_with_lse(q, k, v)
    check_chunked(merged, merged_lse, full, full_lse, reference(q, k, v), reference_lse(q, k))


@pytest.mark.parametrize("prefix", [1, 127, 300])
def test_chunked_causal_over_a_cached_prefix(prefix):
    """Bottom-right causal with Sk = P + Sq: the prefix [0, P) is fully visible (dense call), the last
    Sq keys causal (a causal call with Sk = Sq); merged == one causal call over all Sk keys."""
    torch.manual_seed(prefix)
    b, sq, hq, hkv, d = 2, 129, 8, 2, 128
    sk = prefix + sq
    q = randn((b, sq, hq, d), torch.bfloat16)
    k, v = randn((b, sk, hkv, d), torch.bfloat16), randn((b, sk, hkv, d), torch.bfloat16)
    out_p, lse_p = attention_with_lse(q, k[:, :prefix], v[:, :prefix], mask="dense")
    out_c, lse_c = attention_with_lse(q, k[:, prefix:], v[:, prefix:], mask="causal")
    merged, merged_lse = tsattn.merge_state(out_p, lse_p, out_c, lse_c)
    full, full_lse = attention_with_lse(q, k, v, mask="causal")
    check_chunked(
        merged,
        merged_lse,
        full,
        full_lse,
        reference(q, k, v, mask_type="causal"),
        reference_lse(q, k, mask_type="causal"),
    )


def test_chunked_causal_packed_with_empty_request_and_empty_prefixes():
    """Packed ragged requests: an empty request, requests without a cached prefix (their prefix part
    sees no key: lse -inf, so the merge copies the causal part), long and short prefixes."""
    torch.manual_seed(31)
    q_lens, prefix_lens = [5, 0, 130, 64, 1], [0, 7, 300, 1, 0]
    hq, hkv, d = 8, 2, 128
    total_q = sum(q_lens)
    q = randn((total_q, hq, d), torch.bfloat16)
    # Per request its prefix keys, then its own Sq keys: the full call's layout.
    full_lens = [p + n for p, n in zip(prefix_lens, q_lens)]
    k, v = randn((sum(full_lens), hkv, d), torch.bfloat16), randn((sum(full_lens), hkv, d), torch.bfloat16)
    starts = [sum(full_lens[:i]) for i in range(len(full_lens))]
    prefix_rows = torch.cat([torch.arange(s, s + p) for s, p in zip(starts, prefix_lens)]).cuda()
    own_rows = torch.cat([torch.arange(s + p, s + p + n) for s, p, n in zip(starts, prefix_lens, q_lens)]).cuda()
    qo = indptr(q_lens, "cuda")
    out_p, lse_p = attention_with_lse(q, k[prefix_rows], v[prefix_rows], qo, indptr(prefix_lens, "cuda"))
    out_c, lse_c = attention_with_lse(q, k[own_rows], v[own_rows], qo, indptr(q_lens, "cuda"), mask="causal")
    merged, merged_lse = tsattn.merge_state(out_p, lse_p, out_c, lse_c)
    kv_full = indptr(full_lens, "cuda")
    full, full_lse = attention_with_lse(q, k, v, qo, kv_full, mask="causal")
    check_chunked(
        merged,
        merged_lse,
        full,
        full_lse,
        reference(q, k, v, qo_indptr=qo, kv_indptr=kv_full, mask_type="causal"),
        reference_lse(q, k, qo_indptr=qo, kv_indptr=kv_full, mask_type="causal"),
    )
    # Rows of requests without a prefix: the causal part, bit for bit.
    torch.cuda.synchronize()
    no_prefix = torch.cat([torch.arange(sum(q_lens[:i]), sum(q_lens[: i + 1])) for i in (0, 4)]).cuda()
    assert torch.equal(bits(merged[no_prefix]), bits(out_c[no_prefix]))
    assert torch.isinf(lse_p[no_prefix]).all()


@pytest.mark.parametrize("window", [16, 100])
def test_chunked_sliding_window_leaves_late_rows_no_prefix_key(window):
    """causal + window_left=W over Sk = P + Sq keys. Row i sees keys [i + P - W, i + P]: in the prefix
    [max(0, i + P - W), P - 1] (per-row bounds: a variable window, empty for i >= W, so those rows'
    prefix lse is -inf), and the own keys [i - W, i] (causal with the same window over Sk = Sq)."""
    torch.manual_seed(window)
    b, sq, prefix, hq, hkv, d = 2, 129, 100, 4, 4, 128
    sk = prefix + sq
    q = randn((b, sq, hq, d), torch.bfloat16)
    k, v = randn((b, sk, hkv, d), torch.bfloat16), randn((b, sk, hkv, d), torch.bfloat16)
    i = torch.arange(sq, device="cuda", dtype=torch.int32)
    starts = (i + prefix - window).clamp_min(0).expand(b, sq).contiguous()
    ends = torch.full((b, sq), prefix - 1, dtype=torch.int32, device="cuda")
    out_p, lse_p = attention_with_lse(q, k[:, :prefix], v[:, :prefix], mask="variable_window", starts=starts, ends=ends)
    out_c, lse_c = attention_with_lse(q, k[:, prefix:], v[:, prefix:], mask="causal", window=window)
    torch.cuda.synchronize()
    late = i >= window
    assert late.any() and torch.isinf(lse_p[:, late]).all(), "late rows should see no prefix key"
    merged, merged_lse = tsattn.merge_state(out_p, lse_p, out_c, lse_c)
    full, full_lse = attention_with_lse(q, k, v, mask="causal", window=window)
    check_chunked(
        merged,
        merged_lse,
        full,
        full_lse,
        reference(q, k, v, mask_type="causal", window_left=window),
        reference_lse(q, k, mask_type="causal", window_left=window),
    )
    torch.cuda.synchronize()
    assert torch.equal(bits(merged[:, late]), bits(out_c[:, late]))


def test_chunked_merge_states_of_three_parts():
    """Three key chunks, stacked on a states axis: merge_states == the full call."""
    torch.manual_seed(41)
    b, sq, hq, hkv, d = 2, 127, 8, 2, 128
    cuts = [0, 100, 101, 257]
    q = randn((b, sq, hq, d), torch.bfloat16)
    k, v = randn((b, cuts[-1], hkv, d), torch.bfloat16), randn((b, cuts[-1], hkv, d), torch.bfloat16)
    parts = [attention_with_lse(q, k[:, lo:hi], v[:, lo:hi]) for lo, hi in zip(cuts, cuts[1:])]
    vs = torch.stack([o for o, _ in parts], dim=2)  # [B, Sq, 3, H, D]
    ss = torch.stack([s for _, s in parts], dim=2)  # [B, Sq, 3, H]
    merged, merged_lse = tsattn.merge_states(vs, ss)
    full, full_lse = attention_with_lse(q, k, v)
    check_chunked(merged, merged_lse, full, full_lse, reference(q, k, v), reference_lse(q, k))


def test_chunked_prefill_through_the_wrapper():
    """The public path: BatchPrefillTSWrapper.run(return_lse=True) per part, then merge_state."""
    torch.manual_seed(51)
    b, sq, prefix, hq, hkv, d = 1, 129, 256, 8, 2, 128
    q = randn((b, sq, hq, d), torch.bfloat16)
    k = randn((b, prefix + sq, hkv, d), torch.bfloat16)
    v = randn((b, prefix + sq, hkv, d), torch.bfloat16)
    common = dict(device="cuda", batch_size=b, max_seq_len_q=sq, num_qo_heads=hq, num_kv_heads=hkv, head_dim=d)
    dense, causal = tsattn.BatchPrefillTSWrapper(), tsattn.BatchPrefillTSWrapper()
    dense.plan(max_kv_len=prefix, q_dtype=torch.bfloat16, kv_dtype=torch.bfloat16, **common)
    causal.plan(max_kv_len=sq, q_dtype=torch.bfloat16, kv_dtype=torch.bfloat16, mask_type="causal", **common)
    out_p, lse_p = dense.run(q, k[:, :prefix], v[:, :prefix], return_lse=True)
    out_c, lse_c = causal.run(q, k[:, prefix:], v[:, prefix:], return_lse=True)
    merged, merged_lse = tsattn.merge_state(out_p, lse_p, out_c, lse_c)
    full, full_lse = attention_with_lse(q, k, v, mask="causal")
    check_chunked(
        merged,
        merged_lse,
        full,
        full_lse,
        reference(q, k, v, mask_type="causal"),
        reference_lse(q, k, mask_type="causal"),
    )
