"""GPU: the C library's rejection matrix on CUDA tensors (shapes, head dims, strides, overlap,
indptrs, bounds), each with the contract's exception type and a message naming the argument.
A rejected call leaves out untouched."""

import pytest
import torch

import tsattn

from support import assert_rejected, poisoned

F16, BF16 = torch.float16, torch.bfloat16


def t(*shape, dtype=F16, device="cuda"):
    return torch.zeros(shape, dtype=dtype, device=device)


def i32(values, device="cpu"):
    return torch.tensor(values, dtype=torch.int32, device=device)


def misaligned_base(*shape):
    """A view whose data pointer is 2 bytes past a 16-byte boundary."""
    n = 1
    for s in shape:
        n *= s
    return torch.zeros(n + 8, dtype=F16, device="cuda")[1 : n + 1].view(shape)


def misaligned_stride():
    """Head dim contiguous, but the head stride is 130 elements (260 bytes)."""
    return torch.zeros(1, 17, 2, 130, dtype=F16, device="cuda")[..., :128]


def _fixed(**kw):
    base = dict(q=t(1, 17, 4, 128), k=t(1, 17, 2, 128), v=t(1, 17, 2, 128))
    base.update(kw)
    return base


def _packed(**kw):
    base = dict(q=t(20, 4, 128), k=t(24, 2, 128), v=t(24, 2, 128), qo_indptr=i32([0, 5, 20]), kv_indptr=i32([0, 4, 24]))
    base.update(kw)
    return base


CASES = [  # arguments are built lazily: no CUDA tensor at collection time
    # id, arguments, exception, substrings
    ("q_3d_in_fixed_layout", lambda: _fixed(q=t(17, 4, 128)), ValueError, ["q must be 4-D"]),
    ("k_5d", lambda: _fixed(k=t(1, 1, 17, 2, 128)), ValueError, ["k must be 4-D"]),
    ("v_shape_differs", lambda: _fixed(v=t(1, 16, 2, 128)), ValueError, ["v.shape=", "k.shape="]),
    ("batch_differs", lambda: _fixed(k=t(2, 17, 2, 128), v=t(2, 17, 2, 128)), ValueError, ["batch sizes differ"]),
    (
        "head_dim_64",
        lambda: _fixed(q=t(1, 17, 4, 64), k=t(1, 17, 2, 64), v=t(1, 17, 2, 64)),
        NotImplementedError,
        ["head_dim=64"],
    ),
    (
        "head_dim_192",
        lambda: _fixed(q=t(1, 17, 4, 192), k=t(1, 17, 2, 192), v=t(1, 17, 2, 192)),
        NotImplementedError,
        ["head_dim=192"],
    ),
    ("head_dims_differ", lambda: _fixed(k=t(1, 17, 2, 256), v=t(1, 17, 2, 256)), ValueError, ["head dims differ"]),
    (
        "hq_not_multiple_of_hkv",
        lambda: _fixed(q=t(1, 17, 6, 128), k=t(1, 17, 4, 128), v=t(1, 17, 4, 128)),
        ValueError,
        ["must be a multiple of Hkv"],
    ),
    ("zero_kv_heads", lambda: _fixed(k=t(1, 17, 0, 128), v=t(1, 17, 0, 128)), ValueError, ["head counts"]),
    ("k_on_cpu", lambda: _fixed(k=t(1, 17, 2, 128, device="cpu")), ValueError, ["k must be a CUDA tensor"]),
    ("mixed_dtypes", lambda: _fixed(v=t(1, 17, 2, 128, dtype=BF16)), NotImplementedError, ["v=bfloat16"]),
    (
        "float32_inputs",
        lambda: _fixed(
            q=t(1, 17, 4, 128, dtype=torch.float32),
            k=t(1, 17, 2, 128, dtype=torch.float32),
            v=t(1, 17, 2, 128, dtype=torch.float32),
        ),
        NotImplementedError,
        ["float32"],
    ),
    (
        "head_dim_not_contiguous",
        lambda: _fixed(q=t(1, 17, 128, 4).transpose(2, 3)),
        ValueError,
        ["head dimension must be contiguous"],
    ),
    ("misaligned_base", lambda: _fixed(q=misaligned_base(1, 17, 4, 128)), ValueError, ["q.data=", "16-byte aligned"]),
    (
        "misaligned_stride",
        lambda: _fixed(k=misaligned_stride(), v=t(1, 17, 2, 128)),
        ValueError,
        ["k.stride(", "16-byte"],
    ),
    (
        "causal_sq_gt_sk",
        lambda: _fixed(k=t(1, 16, 2, 128), v=t(1, 16, 2, 128), mask_type="causal"),
        ValueError,
        ["Sq=q.shape[1]=17 > Sk=k.shape[1]=16"],
    ),
    ("window_with_dense", lambda: _fixed(window_left=4), ValueError, ["window_left=4"]),
    ("out_shape", lambda: _fixed(out=t(1, 17, 4, 256)), ValueError, ["out.shape="]),
    ("out_on_cpu", lambda: _fixed(out=t(1, 17, 4, 128, device="cpu")), ValueError, ["out must be a CUDA tensor"]),
    (
        "out_float32",
        lambda: _fixed(out=t(1, 17, 4, 128, dtype=torch.float32)),
        NotImplementedError,
        ["out has dtype float32"],
    ),
    ("out_misaligned", lambda: _fixed(out=misaligned_base(1, 17, 4, 128)), ValueError, ["out.data="]),
    ("out_self_overlapping", lambda: _fixed(out=t(1, 17, 1, 128).expand(1, 17, 4, 128)), ValueError, ["out"]),
    (
        "variable_window_bounds_on_cpu",
        lambda: _fixed(
            mask_type="variable_window",
            variable_window_token_starts=i32([[0] * 17]),
            variable_window_token_ends=i32([[0] * 17]),
        ),
        ValueError,
        ["variable_window_token_starts must be a CUDA tensor"],
    ),
    (
        "variable_window_bounds_int64",
        lambda: _fixed(
            mask_type="variable_window",
            variable_window_token_starts=t(1, 17, dtype=torch.int64),
            variable_window_token_ends=t(1, 17, dtype=torch.int32),
        ),
        ValueError,
        ["variable_window_token_starts must have dtype int32", "int64"],
    ),
    (
        "variable_window_bounds_shape",
        lambda: _fixed(
            mask_type="variable_window",
            variable_window_token_starts=t(1, 16, dtype=torch.int32),
            variable_window_token_ends=t(1, 16, dtype=torch.int32),
        ),
        ValueError,
        ["variable_window_token_starts.shape=[1, 16]"],
    ),
    ("packed_q_4d", lambda: _packed(q=t(1, 20, 4, 128)), ValueError, ["q must be 3-D"]),
    (
        "packed_indptr_int64",
        lambda: _packed(qo_indptr=torch.tensor([0, 5, 20])),
        TypeError,
        ["qo_indptr has dtype int64; expected int32"],
    ),
    ("packed_indptr_not_from_zero", lambda: _packed(qo_indptr=i32([1, 5, 20])), ValueError, ["qo_indptr[0]=1"]),
    (
        "packed_indptr_decreasing",
        lambda: _packed(kv_indptr=i32([0, 25, 24])),
        ValueError,
        ["kv_indptr must be non-decreasing"],
    ),
    (
        "packed_indptr_end_mismatch",
        lambda: _packed(qo_indptr=i32([0, 5, 19])),
        ValueError,
        ["qo_indptr[-1]=19", "q.shape[0]=20"],
    ),
    ("packed_indptr_lengths_differ", lambda: _packed(kv_indptr=i32([0, 24])), ValueError, ["qo_indptr has 3 entries"]),
    (
        "packed_indptr_2d",
        lambda: _packed(qo_indptr=i32([[0, 5, 20]]), kv_indptr=i32([[0, 4, 24]])),
        ValueError,
        ["qo_indptr must be 1-D"],
    ),
    (
        "packed_indptrs_on_different_devices",
        lambda: _packed(kv_indptr=i32([0, 4, 24], device="cuda")),
        ValueError,
        ["must both be on the host or both on the GPU"],
    ),
    ("packed_causal_request_sq_gt_sk", lambda: _packed(mask_type="causal"), ValueError, ["request 0 has Sq=5 > Sk=4"]),
    ("packed_only_one_indptr", lambda: _packed(kv_indptr=None), ValueError, ["must be given together"]),
    (
        "packed_bounds_fixed_shape",
        lambda: _packed(
            mask_type="variable_window",
            variable_window_token_starts=t(2, 10, dtype=torch.int32),
            variable_window_token_ends=t(2, 10, dtype=torch.int32),
        ),
        ValueError,
        ["variable_window_token_starts.shape=[2, 10]", "[total_q]"],
    ),
]


@pytest.mark.parametrize("case,args,exc,needles", CASES, ids=[c[0] for c in CASES])
def test_rejection_on_cuda(case, args, exc, needles):
    assert_rejected(exc, needles, args())


@pytest.mark.parametrize("which", ["q", "k", "v", "partial_q"])
def test_out_overlapping_an_input(which):
    q, k, v = t(1, 17, 4, 128), t(1, 17, 4, 128), t(1, 17, 4, 128)
    out = {"q": q, "k": k, "v": v}.get(which)
    if which == "partial_q":
        big = t(1, 18, 4, 128)
        q, out = big[:, :17], big[:, 1:]
    with pytest.raises(ValueError) as info:
        tsattn.batch_prefill(q, k, v, out=out)
    assert "out" in str(info.value) and "overlap" in str(info.value), str(info.value)


def test_out_overlapping_indptr_storage():
    """out must not share memory with the indptr/bounds storage either."""
    storage = torch.zeros(4 * 17 * 128 + 64, dtype=F16, device="cuda")
    out = storage[: 4 * 17 * 128].view(17, 4, 128)
    bounds = storage.view(torch.int32)[:17]
    q, k, v = t(17, 4, 128), t(17, 4, 128), t(17, 4, 128)
    with pytest.raises(ValueError, match="overlap"):
        tsattn.batch_prefill(
            q,
            k,
            v,
            qo_indptr=i32([0, 17]),
            kv_indptr=i32([0, 17]),
            mask_type="variable_window",
            variable_window_token_starts=bounds,
            variable_window_token_ends=t(17, dtype=torch.int32),
            out=out,
        )


def test_rejection_leaves_out_untouched():
    q, k, v = t(1, 17, 4, 128), t(1, 16, 2, 128), t(1, 16, 2, 128)
    out = poisoned(q.shape, F16)
    with pytest.raises(ValueError):
        tsattn.batch_prefill(q, k, v, mask_type="causal", out=out)
    torch.cuda.synchronize()
    assert torch.isnan(out).all()
