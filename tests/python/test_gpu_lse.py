"""GPU: the log-sum-exp output (options.lse; the wrapper's return_lse) against the fp32 oracle.

Every case: fresh random inputs, out and lse poisoned with NaN; lse must match torch's fp64
logsumexp of the visible scores (-inf exactly where a row sees no key), and out must be bit for
bit the output of the same call without lse. Run once per kernel family (TSATTN_KERNEL_FAMILY is
read once per process, so the sm80 pass is a second pytest process; see tools/dev/gpu_check.sh).
"""

import pytest
import torch

import tsattn
from tsattn import _call

from support import FP8, indptr, poisoned, randn, reference_lse

DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp8": FP8}
# (atol, rtol) on lse: scores accumulate in fp32 either way; e4m3 products are cut shorter.
LSE_TOLERANCE = {"fp16": (2e-3, 1e-3), "bf16": (2e-3, 1e-3), "fp8": (2e-2, 1e-2)}


def _call_with_lse(q, k, v, with_lse, qo=None, kv=None, mask="dense", window=-1, starts=None, ends=None):
    out = poisoned(q.shape, q.dtype if q.dtype != FP8 else torch.bfloat16)
    lse = poisoned(q.shape[:-1], torch.float32) if with_lse else None
    _call.run(q, k, v, qo, kv, mask, window, starts, ends, None, 1.0, 0, out, lse)
    return out, lse


def _check(q, k, v, dtype_name, **kwargs):
    out_plain, _ = _call_with_lse(q, k, v, False, **kwargs)
    plain_kernel = tsattn.last_kernel_name()
    out, lse = _call_with_lse(q, k, v, True, **kwargs)
    # The kernel that writes lse is the plain one's twin; the plain one has no lse code.
    assert not plain_kernel.endswith(".lse") and tsattn.last_kernel_name() == plain_kernel + ".lse"
    torch.cuda.synchronize()
    assert torch.equal(out.view(torch.uint8), out_plain.view(torch.uint8)), "out differs with lse"
    expected = reference_lse(
        q,
        k,
        qo_indptr=kwargs.get("qo"),
        kv_indptr=kwargs.get("kv"),
        mask_type=kwargs.get("mask", "dense"),
        window_left=kwargs.get("window", -1),
        starts=kwargs.get("starts"),
        ends=kwargs.get("ends"),
    )
    assert not torch.isnan(lse).any(), "lse left unwritten"
    empty = torch.isinf(expected)
    assert torch.equal(torch.isinf(lse) & (lse < 0), empty), "-inf rows differ"
    atol, rtol = LSE_TOLERANCE[dtype_name]
    torch.testing.assert_close(lse[~empty], expected[~empty], atol=atol, rtol=rtol)


# (id, B, Sq, Sk, Hq, Hkv, D, dtype, mask, window)
FIXED = [
    ("dense_bf16_d128", 2, 129, 129, 4, 4, 128, "bf16", "dense", -1),
    ("causal_fp16_gqa4", 1, 127, 129, 8, 2, 128, "fp16", "causal", -1),
    ("window17_bf16_d256", 2, 129, 129, 8, 2, 256, "bf16", "causal", 17),
    ("dense_fp8_d128", 1, 129, 127, 4, 2, 128, "fp8", "dense", -1),
    ("causal_fp8_d256", 1, 129, 129, 4, 4, 256, "fp8", "causal", -1),
    ("dense_fp16_d256_len1", 1, 1, 1, 4, 4, 256, "fp16", "dense", -1),
    ("dense_bf16_sk2048", 1, 129, 2048, 4, 2, 128, "bf16", "dense", -1),
]


@pytest.mark.parametrize("case", FIXED, ids=[c[0] for c in FIXED])
def test_fixed_layout_lse(case):
    _, b, sq, sk, hq, hkv, d, dtype_name, mask, window = case
    torch.manual_seed(sum(map(ord, case[0])))
    dtype = DTYPES[dtype_name]
    q, k, v = randn((b, sq, hq, d), dtype), randn((b, sk, hkv, d), dtype), randn((b, sk, hkv, d), dtype)
    _check(q, k, v, dtype_name, mask=mask, window=window)


@pytest.mark.parametrize("dtype_name", ["bf16", "fp8"])
@pytest.mark.parametrize("indptr_device", ["cpu", "cuda"])
@pytest.mark.parametrize("mask", ["dense", "causal"])
def test_packed_layout_lse(dtype_name, indptr_device, mask):
    """Ragged requests, an empty one among them, with host or GPU indptrs."""
    torch.manual_seed(7)
    q_lens, kv_lens = [1, 127, 0, 129, 64], [1, 129, 5, 129, 300]
    dtype = DTYPES[dtype_name]
    hq, hkv, d = 8, 2, 128
    q = randn((sum(q_lens), hq, d), dtype)
    k, v = randn((sum(kv_lens), hkv, d), dtype), randn((sum(kv_lens), hkv, d), dtype)
    _check(q, k, v, dtype_name, qo=indptr(q_lens, indptr_device), kv=indptr(kv_lens, indptr_device), mask=mask)


def test_variable_window_rows_without_keys_get_minus_inf():
    torch.manual_seed(11)
    b, sq, sk, hq, hkv, d = 2, 129, 127, 4, 2, 128
    q, k = randn((b, sq, hq, d), torch.bfloat16), randn((b, sk, hkv, d), torch.bfloat16)
    v = randn((b, sk, hkv, d), torch.bfloat16)
    starts = torch.randint(0, sk, (b, sq), dtype=torch.int32, device="cuda")
    ends = starts + torch.randint(-3, 40, (b, sq), dtype=torch.int32, device="cuda")  # some inverted: empty rows
    assert (ends < starts).any()
    _check(q, k, v, "bf16", mask="variable_window", starts=starts, ends=ends)


def test_lse_is_rejected_with_the_wrong_dtype_or_shape():
    q = randn((1, 17, 4, 128), torch.bfloat16)
    k, v = randn((1, 17, 4, 128), torch.bfloat16), randn((1, 17, 4, 128), torch.bfloat16)
    out = poisoned(q.shape, torch.bfloat16)
    with pytest.raises(TypeError, match="lse has dtype float16"):
        _call.run(
            q,
            k,
            v,
            None,
            None,
            "dense",
            -1,
            None,
            None,
            None,
            1.0,
            0,
            out,
            torch.empty(1, 17, 4, dtype=torch.float16, device="cuda"),
        )
    with pytest.raises(ValueError, match=r"lse.shape=\[1, 17, 5\]"):
        _call.run(q, k, v, None, None, "dense", -1, None, None, None, 1.0, 0, out, torch.empty(1, 17, 5, device="cuda"))


@pytest.mark.parametrize("packed", [False, True])
def test_wrapper_return_lse_equals_the_one_shot_lse(packed):
    """run(..., return_lse=True) gives the one-shot call's out and lse bit for bit (same kernel)."""
    torch.manual_seed(5)
    hq, hkv, d = 8, 2, 128
    if packed:
        q_lens, kv_lens = [127, 0, 129], [129, 3, 200]
        q = randn((sum(q_lens), hq, d), torch.bfloat16)
        k, v = randn((sum(kv_lens), hkv, d), torch.bfloat16), randn((sum(kv_lens), hkv, d), torch.bfloat16)
        qo, kv = indptr(q_lens, "cuda"), indptr(kv_lens, "cuda")
        batch, max_q, max_kv = len(q_lens), max(q_lens), max(kv_lens)
    else:
        q = randn((2, 129, hq, d), torch.bfloat16)
        k, v = randn((2, 257, hkv, d), torch.bfloat16), randn((2, 257, hkv, d), torch.bfloat16)
        qo = kv = None
        batch, max_q, max_kv = 2, 129, 257
    w = tsattn.BatchPrefillTSWrapper()
    w.plan(
        device="cuda",
        batch_size=batch,
        max_seq_len_q=max_q,
        max_kv_len=max_kv,
        num_qo_heads=hq,
        num_kv_heads=hkv,
        head_dim=d,
        q_dtype=torch.bfloat16,
        kv_dtype=torch.bfloat16,
        packed=packed,
        mask_type="causal",
    )
    plain_out = w.run(q, k, v, qo, kv, out=poisoned(q.shape, torch.bfloat16))
    plain_kernel = tsattn.last_kernel_name()
    out, lse = w.run(q, k, v, qo, kv, out=poisoned(q.shape, torch.bfloat16), return_lse=True)
    run_kernel = tsattn.last_kernel_name()
    expected_out, expected_lse = _call_with_lse(q, k, v, True, qo=qo, kv=kv, mask="causal")
    # One plan runs both kernels: its plain one without lse, the twin with it (the one-shot call's).
    assert run_kernel == plain_kernel + ".lse" == tsattn.last_kernel_name()
    torch.cuda.synchronize()
    assert torch.equal(plain_out.view(torch.uint8), expected_out.view(torch.uint8))
    assert lse.dtype == torch.float32 and lse.shape == q.shape[:-1]
    assert torch.equal(out.view(torch.uint8), expected_out.view(torch.uint8))
    assert torch.equal(lse.view(torch.int32), expected_lse.view(torch.int32))
