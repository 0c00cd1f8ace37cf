"""No-GPU, no-library tests of the checks only Python can do (docs/contract.md, "Errors"), and of what the binding
hands to the C call (normalised scalars, the resolved out dtype, the returned tensor)."""

import math

import numpy as np
import pytest
import torch

import tsattn
from tsattn import _call

from support import assert_rejected, FP8


def _qkv():
    q = torch.zeros(1, 4, 2, 128, dtype=torch.float16)
    return q, q.clone(), q.clone()


def _bounds():
    return torch.zeros(1, 4, dtype=torch.int32)


# (case id, keyword overrides, exception type, substrings the message must contain)
REJECTIONS = [
    ("q_numpy", dict(q=np.zeros((1, 4, 2, 128), np.float16)), TypeError, ["q must be a torch.Tensor", "numpy"]),
    ("q_none", dict(q=None), TypeError, ["q must be a torch.Tensor"]),
    ("k_list", dict(k=[[0.0]]), TypeError, ["k must be a torch.Tensor", "list"]),
    ("v_float", dict(v=1.0), TypeError, ["v must be a torch.Tensor"]),
    (
        "qo_indptr_list",
        dict(qo_indptr=[0, 4], kv_indptr=torch.tensor([0, 4], dtype=torch.int32)),
        TypeError,
        ["qo_indptr must be a torch.Tensor or None"],
    ),
    (
        "kv_indptr_numpy",
        dict(qo_indptr=torch.tensor([0, 4], dtype=torch.int32), kv_indptr=np.array([0, 4], np.int32)),
        TypeError,
        ["kv_indptr"],
    ),
    (
        "starts_list",
        dict(
            mask_type="variable_window",
            variable_window_token_starts=[[0, 0, 0, 0]],
            variable_window_token_ends=_bounds(),
        ),
        TypeError,
        ["variable_window_token_starts"],
    ),
    (
        "ends_int",
        dict(mask_type="variable_window", variable_window_token_starts=_bounds(), variable_window_token_ends=3),
        TypeError,
        ["variable_window_token_ends"],
    ),
    ("out_numpy", dict(out=np.zeros((1, 4, 2, 128), np.float16)), TypeError, ["out must be a torch.Tensor or None"]),
    ("mask_int", dict(mask_type=1), TypeError, ["mask_type must be a str", "1"]),
    ("mask_none", dict(mask_type=None), TypeError, ["mask_type must be a str"]),
    ("mask_bytes", dict(mask_type=b"causal"), TypeError, ["mask_type must be a str"]),
    ("mask_case", dict(mask_type="Causal"), ValueError, ["mask_type='Causal'", "'dense', 'causal', 'variable_window'"]),
    ("mask_unknown", dict(mask_type="sliding_window"), ValueError, ["mask_type='sliding_window'"]),
    ("mask_empty", dict(mask_type=""), ValueError, ["mask_type=''"]),
    ("window_bool", dict(mask_type="causal", window_left=True), TypeError, ["window_left must be an int", "True"]),
    ("window_float", dict(mask_type="causal", window_left=4.0), TypeError, ["window_left must be an int", "4.0"]),
    ("window_str", dict(mask_type="causal", window_left="4"), TypeError, ["window_left must be an int"]),
    ("window_none", dict(window_left=None), TypeError, ["window_left must be an int"]),
    (
        "window_huge",
        dict(mask_type="causal", window_left=2**63),
        ValueError,
        ["window_left=9223372036854775808", "int64"],
    ),
    ("window_very_negative", dict(window_left=-(2**63) - 1), ValueError, ["window_left=-9223372036854775809"]),
    ("window_numpy_bool", dict(window_left=np.bool_(True)), TypeError, ["window_left must be an int"]),
    ("sm_scale_bool", dict(sm_scale=True), TypeError, ["sm_scale must be a real scalar", "True"]),
    ("sm_scale_complex", dict(sm_scale=1j), TypeError, ["sm_scale must be a real scalar", "1j"]),
    ("sm_scale_str", dict(sm_scale="0.1"), TypeError, ["sm_scale must be a real scalar"]),
    ("sm_scale_tensor", dict(sm_scale=torch.tensor(0.1)), TypeError, ["sm_scale must be a real scalar"]),
    ("sm_scale_numpy_bool", dict(sm_scale=np.bool_(False)), TypeError, ["sm_scale"]),
    ("sm_scale_int_overflow", dict(sm_scale=10**400), ValueError, ["sm_scale=", "too large for a float"]),
    ("output_scale_none", dict(output_scale=None), TypeError, ["output_scale must be a real scalar", "None"]),
    ("output_scale_bool", dict(output_scale=False), TypeError, ["output_scale must be a real scalar", "False"]),
    ("output_scale_complex", dict(output_scale=2 + 0j), TypeError, ["output_scale"]),
    ("output_scale_int_overflow", dict(output_scale=-(10**309)), ValueError, ["output_scale=", "too large"]),
    ("out_dtype_str", dict(out_dtype="float16"), TypeError, ["out_dtype must be a torch.dtype or None", "'float16'"]),
    ("out_dtype_python_type", dict(out_dtype=float), TypeError, ["out_dtype must be a torch.dtype"]),
    (
        "out_dtype_float32",
        dict(out_dtype=torch.float32),
        NotImplementedError,
        ["out_dtype=float32 is not supported", "float16, bfloat16"],
    ),
    ("out_dtype_int8", dict(out_dtype=torch.int8), NotImplementedError, ["out_dtype=int8"]),
    ("out_dtype_float64", dict(out_dtype=torch.float64), NotImplementedError, ["out_dtype=float64"]),
]
if FP8 is not None and hasattr(torch, "float8_e5m2"):
    REJECTIONS.append(
        ("out_dtype_e5m2", dict(out_dtype=torch.float8_e5m2), NotImplementedError, ["out_dtype=float8_e5m2"])
    )


@pytest.fixture
def no_library_call(monkeypatch):
    """Fails the test if a rejected call reaches the C library."""

    def forbidden(*args, **kwargs):
        raise AssertionError("the Python-side check should have rejected this call before the C library")

    monkeypatch.setattr(_call, "run", forbidden)


@pytest.mark.parametrize("case,overrides,exc,needles", REJECTIONS, ids=[r[0] for r in REJECTIONS])
def test_python_side_rejection(no_library_call, case, overrides, exc, needles):
    q, k, v = _qkv()
    args = dict(q=q, k=k, v=v)
    args.update(overrides)
    assert_rejected(exc, needles, args)


def test_keyword_only_after_v(no_library_call):
    q, k, v = _qkv()
    with pytest.raises(TypeError):
        tsattn.batch_prefill(q, k, v, None)  # qo_indptr positionally
    with pytest.raises(TypeError):
        tsattn.batch_prefill(q, k, v, causal=True)  # unknown keyword
    with pytest.raises(TypeError):
        tsattn.batch_prefill(q, k)  # v missing


class Recorder:
    def __init__(self):
        self.calls = []

    def __call__(
        self,
        q,
        k,
        v,
        qo_indptr,
        kv_indptr,
        mask_type,
        window_left,
        starts,
        ends,
        sm_scale,
        output_scale,
        out_dtype_code,
        out,
    ):
        self.calls.append(
            dict(
                q=q,
                k=k,
                v=v,
                qo_indptr=qo_indptr,
                kv_indptr=kv_indptr,
                mask_type=mask_type,
                window_left=window_left,
                starts=starts,
                ends=ends,
                sm_scale=sm_scale,
                output_scale=output_scale,
                out_dtype_code=out_dtype_code,
                out=out,
            )
        )


@pytest.fixture
def recorder(monkeypatch):
    rec = Recorder()
    monkeypatch.setattr(_call, "run", rec)
    return rec


def test_accepted_scalars_are_normalised(recorder):
    q, k, v = _qkv()
    tsattn.batch_prefill(q, k, v, mask_type="causal", window_left=np.int64(7), sm_scale=np.float32(0.5), output_scale=2)
    call = recorder.calls[-1]
    assert call["window_left"] == 7 and type(call["window_left"]) is int
    assert call["sm_scale"] == 0.5 and type(call["sm_scale"]) is float
    assert call["output_scale"] == 2.0 and type(call["output_scale"]) is float
    assert call["mask_type"] == "causal" and call["out_dtype_code"] == 0
    tsattn.batch_prefill(q, k, v, sm_scale=1)
    assert recorder.calls[-1]["sm_scale"] == 1.0 and recorder.calls[-1]["window_left"] == -1
    tsattn.batch_prefill(q, k, v)
    assert recorder.calls[-1]["sm_scale"] is None and recorder.calls[-1]["output_scale"] == 1.0


def test_values_are_left_to_the_library(recorder):
    """nan, inf, 0, negative scales and window values are the C library's to reject (it names them)."""
    q, k, v = _qkv()
    for kwargs in (
        dict(sm_scale=math.nan),
        dict(sm_scale=-1.0),
        dict(output_scale=math.inf),
        dict(output_scale=0),
        dict(window_left=0),
        dict(window_left=-5),
        dict(window_left=2**63 - 1),
    ):
        tsattn.batch_prefill(q, k, v, **kwargs)
    assert len(recorder.calls) == 7


@pytest.mark.parametrize("out_dtype", [None, torch.float16, torch.bfloat16, "fp8"])
def test_out_is_allocated_with_the_resolved_dtype(recorder, out_dtype):
    if out_dtype == "fp8":
        if FP8 is None:
            pytest.skip("skipped: torch has no float8_e4m3fn")
        out_dtype = FP8
    q, k, v = _qkv()
    q = q.to(torch.bfloat16)
    result = tsattn.batch_prefill(q, k, v, out_dtype=out_dtype)
    call = recorder.calls[-1]
    want = out_dtype or torch.bfloat16
    assert result.dtype == want and result.shape == q.shape and result.device == q.device
    assert call["out"] is result or call["out"].data_ptr() == result.data_ptr()
    assert call["out_dtype_code"] == {None: 0, torch.float16: 1, torch.bfloat16: 2}.get(out_dtype, 3)


def test_out_is_returned_and_its_dtype_used(recorder):
    q, k, v = _qkv()
    out = torch.empty(1, 4, 2, 128, dtype=torch.bfloat16)
    assert tsattn.batch_prefill(q, k, v, out=out) is out
    assert recorder.calls[-1]["out"] is out and recorder.calls[-1]["out_dtype_code"] == 0
    assert tsattn.batch_prefill(q, k, v, out=out, out_dtype=torch.bfloat16) is out
    assert recorder.calls[-1]["out_dtype_code"] == 2


def test_tensors_reach_the_library_unchanged(recorder):
    """Strided views are passed as they are (no copy, no .contiguous())."""
    qkv = torch.zeros(1, 4, 6, 128, dtype=torch.float16)
    q, k, v = qkv[:, :, :4], qkv[:, :, 4:5], qkv[:, :, 5:]
    qo = torch.tensor([0, 4], dtype=torch.int32)
    starts, ends = torch.zeros(4, dtype=torch.int32), torch.ones(4, dtype=torch.int32)
    tsattn.batch_prefill(
        q[0],
        k[0],
        v[0],
        qo_indptr=qo,
        kv_indptr=qo,
        mask_type="variable_window",
        variable_window_token_starts=starts,
        variable_window_token_ends=ends,
    )
    call = recorder.calls[-1]
    assert call["q"].data_ptr() == q.data_ptr() and call["q"].stride() == q[0].stride()
    assert call["k"].data_ptr() == k.data_ptr() and call["v"].stride() == v[0].stride()
    assert call["qo_indptr"] is qo or call["qo_indptr"].data_ptr() == qo.data_ptr()
    assert call["starts"].data_ptr() == starts.data_ptr() and call["ends"].data_ptr() == ends.data_ptr()
    assert call["mask_type"] == "variable_window"
