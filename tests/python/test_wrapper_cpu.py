"""No-GPU tests of BatchPrefillTSWrapper (docs/contract.md, "Plan once, run every layer"): the
signatures the contract writes down, plan() argument errors from Python and from the library, a plan
without a GPU, and run()'s own checks."""

import ctypes
import inspect
import re

import pytest
import torch

import tsattn
from tsattn import _library, _views, _wrapper

from support import FP8, REPO, needs_library

CONTRACT = REPO / "docs" / "contract.md"
BF16 = torch.bfloat16


def _contract_methods():
    """plan and run as the python block under "## Plan once, run every layer" declares them."""
    text = CONTRACT.read_text()
    m = re.search(r"^## Plan once, run every layer\n.*?^```python\n(.*?)^```", text, re.S | re.M)
    assert m, f"{CONTRACT}: no ```python block under '## Plan once, run every layer'"
    code = re.sub(r"#[^\n]*", "", m.group(1))
    namespace = {"torch": torch}
    exec(code, namespace)  # noqa: S102 - the contract's own text
    cls = namespace["BatchPrefillTSWrapper"]
    return inspect.signature(cls.plan), inspect.signature(cls.run)


def _simple(signature):
    return [(p.name, p.kind, p.default) for p in signature.parameters.values()]


def test_signatures_match_contract():
    plan, run = _contract_methods()
    assert _simple(inspect.signature(tsattn.BatchPrefillTSWrapper.plan)) == _simple(plan)
    assert _simple(inspect.signature(tsattn.BatchPrefillTSWrapper.run)) == _simple(run)


def test_exported():
    assert "BatchPrefillTSWrapper" in tsattn.__all__
    assert "BatchPrefillTSWrapper" in dir(tsattn)
    assert tsattn.BatchPrefillTSWrapper is _wrapper.BatchPrefillTSWrapper


@pytest.mark.parametrize("structure", [_library.TensorView, _library.PrefillOptions, _library.RunOptions])
def test_packed_structs_read_back_through_ctypes(structure):
    # Calls pack these structs with struct.pack_into: every field must land where ctypes (and C) reads it.
    packer = _views.packer_for(structure)
    values = [1000 + 7 * i for i in range(len(structure._fields_))]
    buffer = bytearray(packer.size)
    packer.pack_into(buffer, 0, *values)
    read = structure.from_buffer(buffer)
    for (name, field_type), value in zip(structure._fields_, values):
        got = getattr(read, name)
        if issubclass(field_type, ctypes._Pointer):
            got = ctypes.cast(got, ctypes.c_void_p).value
        assert got == value, name


@pytest.mark.parametrize("make", [lambda: torch.randn(3, 5, 7), lambda: torch.randn(4, 6, 2, 8).transpose(1, 2)])
def test_view_buffer_writes_what_c_reads(make):
    tensor = make()
    views = _views.ViewBuffer(2, _views.packer_for(_library.RunOptions))
    address = views.put(1, tensor, "q")
    view = _library.TensorView.from_address(address)
    assert view.data == tensor.data_ptr() and view.dtype == _views.DTYPE_CODES[tensor.dtype]
    assert (view.device_type, view.device_id, view.ndim) == (1, 0, tensor.dim())
    assert [view.shape[i] for i in range(view.ndim)] == list(tensor.shape)
    if tensor.is_contiguous():
        assert not view.strides  # NULL: compact row-major
    else:
        assert [view.strides[i] for i in range(view.ndim)] == list(tensor.stride())


VALID = dict(
    device="cuda",
    batch_size=4,
    max_seq_len_q=128,
    max_kv_len=256,
    num_qo_heads=8,
    num_kv_heads=2,
    head_dim=128,
    q_dtype=BF16,
    kv_dtype=BF16,
)

PLAN_REJECTIONS = [
    # (id, overrides, exception, substrings); the first ones are Python's, the rest the library's.
    ("device_cpu", dict(device="cpu"), ValueError, ["device must be a CUDA device", "cpu"]),
    ("device_float", dict(device=1.5), TypeError, ["device must be"]),
    ("device_bad_string", dict(device="nonsense"), ValueError, ["device='nonsense'"]),
    ("batch_float", dict(batch_size=4.0), TypeError, ["batch_size must be an int"]),
    ("batch_bool", dict(batch_size=True), TypeError, ["batch_size must be an int"]),
    ("heads_huge", dict(num_qo_heads=2**40), ValueError, ["num_qo_heads=", "int32"]),
    ("q_dtype_not_dtype", dict(q_dtype="bfloat16"), TypeError, ["q_dtype must be a torch.dtype"]),
    ("q_dtype_float32", dict(q_dtype=torch.float32), NotImplementedError, ["q_dtype=float32"]),
    ("packed_int", dict(packed=1), TypeError, ["packed must be a bool"]),
    ("mask_unknown", dict(mask_type="sliding"), ValueError, ["mask_type='sliding'"]),
    ("mask_not_str", dict(mask_type=1), TypeError, ["mask_type must be a str"]),
    ("window_float", dict(mask_type="causal", window_left=2.0), TypeError, ["window_left must be an int"]),
    ("sm_scale_str", dict(sm_scale="1"), TypeError, ["sm_scale must be a real scalar"]),
    ("out_dtype_int8", dict(out_dtype=torch.int8), NotImplementedError, ["out_dtype=int8"]),
    # The library's rules, reported before it needs a device.
    ("kv_dtype_differs", dict(kv_dtype=torch.float16), NotImplementedError, ["share one dtype", "kv_dtype=float16"]),
    ("head_dim_64", dict(head_dim=64), NotImplementedError, ["head_dim=64 is not supported"]),
    ("heads_not_multiple", dict(num_qo_heads=6, num_kv_heads=4), ValueError, ["num_qo_heads=6", "num_kv_heads=4"]),
    ("batch_zero", dict(batch_size=0), ValueError, ["batch_size=0 must be >= 1"]),
    ("max_q_negative", dict(max_seq_len_q=-1), ValueError, ["max_seq_len_q=-1"]),
    ("too_many_rows", dict(max_kv_len=2**30), ValueError, ["max_kv_len=1073741824", "2^31-1"]),
    ("window_zero", dict(mask_type="causal", window_left=0), ValueError, ["window_left=0"]),
    ("window_dense", dict(window_left=8), ValueError, ["window_left=8", "causal"]),
    ("sm_scale_negative", dict(sm_scale=-1.0), ValueError, ["sm_scale=-1"]),
    ("output_scale_zero", dict(output_scale=0.0), ValueError, ["output_scale=0"]),
]
if FP8 is not None:
    PLAN_REJECTIONS.append(
        ("fp8_with_bf16", dict(q_dtype=FP8, kv_dtype=BF16), NotImplementedError, ["q_dtype=float8_e4m3fn"])
    )


@needs_library
@pytest.mark.parametrize("case,overrides,exc,needles", PLAN_REJECTIONS, ids=[r[0] for r in PLAN_REJECTIONS])
def test_plan_rejections(case, overrides, exc, needles):
    w = tsattn.BatchPrefillTSWrapper()
    args = dict(VALID)
    args.update(overrides)
    with pytest.raises(exc) as info:
        w.plan(**args)
    assert type(info.value) is exc, f"{type(info.value).__name__}: {info.value}"
    for needle in needles:
        assert needle in str(info.value), f"{needle!r} not in {str(info.value)!r}"
    with pytest.raises(RuntimeError, match="call plan\\(\\) first"):
        w.run(*(torch.zeros(1, 1, 8, 128, dtype=BF16),) * 3)


@needs_library
@pytest.mark.skipif(torch.cuda.is_available(), reason="skipped: this machine has a CUDA device")
def test_plan_without_a_gpu_is_a_runtime_error():
    w = tsattn.BatchPrefillTSWrapper()
    with pytest.raises(RuntimeError) as info:
        w.plan(**VALID)
    assert "CUDA" in str(info.value)
    with pytest.raises(RuntimeError, match="needs a plan"):
        w.run(*(torch.zeros(1, 1, 8, 128, dtype=BF16),) * 3)


def test_run_checks_before_the_plan():
    w = tsattn.BatchPrefillTSWrapper()
    q = torch.zeros(1, 4, 8, 128, dtype=BF16)
    with pytest.raises(TypeError, match="return_lse must be a bool"):
        w.run(q, q, q, return_lse=1)
    with pytest.raises(TypeError, match="validate must be a bool"):
        w.run(q, q, q, validate=None)
    with pytest.raises(RuntimeError, match="needs a plan"):
        w.run(q, q, q)


def test_run_tensor_types(monkeypatch):
    """With a plan in place (stood in for here), arguments that are not tensors are TypeErrors."""
    w = tsattn.BatchPrefillTSWrapper()
    monkeypatch.setattr(w, "_handle", 1, raising=False)
    q = torch.zeros(1, 4, 8, 128, dtype=BF16)
    with pytest.raises(TypeError, match="k must be a torch.Tensor"):
        w.run(q, [1, 2], q)
    with pytest.raises(TypeError, match="qo_indptr must be a torch.Tensor or None"):
        w.run(q, q, q, (0, 4), None)
    with pytest.raises(TypeError, match="out must be a torch.Tensor or None"):
        w.run(q, q, q, out=3)
