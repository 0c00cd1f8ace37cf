"""No-GPU tests of batch_prefill_with_paged_kv_cache and BatchPrefillPagedTSWrapper (docs/paged_kv.md):
the signatures the page writes down, the exports and custom ops, the checks only Python makes, the
library's checks that come before it needs a device (CPU tensors and host tables), plan() argument
errors, and run()'s own checks."""

import ctypes
import inspect
import re

import pytest
import torch

import tsattn
from tsattn import _library, _ops, _wrapper

from support import REPO, needs_library

DOC = REPO / "docs" / "paged_kv.md"
BF16 = torch.bfloat16


def _doc_block(heading: str) -> str:
    text = DOC.read_text()
    m = re.search(rf"^#+ {re.escape(heading)}\n.*?^```python\n(.*?)^```", text, re.S | re.M)
    assert m, f"{DOC}: no ```python block under {heading!r}"
    return m.group(1)


def _simple(signature):
    return [(p.name, p.kind, p.default) for p in signature.parameters.values()]


def test_signatures_match_the_page():
    code = _doc_block("Signature").replace("-> torch.Tensor", "")
    namespace = {"torch": torch}
    exec("def " + code.strip() + ": pass", namespace)  # noqa: S102 - the page's own text
    assert _simple(inspect.signature(tsattn.batch_prefill_with_paged_kv_cache)) == _simple(
        inspect.signature(namespace["batch_prefill_with_paged_kv_cache"])
    )
    namespace = {"torch": torch}
    exec(_doc_block("Plan once, run every layer: `BatchPrefillPagedTSWrapper`"), namespace)  # noqa: S102
    cls = namespace["BatchPrefillPagedTSWrapper"]
    for method in ("plan", "run"):
        assert _simple(inspect.signature(getattr(tsattn.BatchPrefillPagedTSWrapper, method))) == _simple(
            inspect.signature(getattr(cls, method))
        ), method


def test_exported_and_registered():
    for name in ("batch_prefill_with_paged_kv_cache", "BatchPrefillPagedTSWrapper"):
        assert name in tsattn.__all__ and name in dir(tsattn)
    assert tsattn.BatchPrefillPagedTSWrapper is _wrapper.BatchPrefillPagedTSWrapper
    if _ops.AVAILABLE:
        assert _ops.paged_functional is torch.ops.tsattn.batch_prefill_with_paged_kv_cache.default
        assert _ops.paged_mutating is torch.ops.tsattn.batch_prefill_with_paged_kv_cache_out.default


@pytest.mark.skipif(not _ops.AVAILABLE, reason="skipped: torch has no torch.library.custom_op")
def test_fake_op_gives_the_output_shape_and_dtype():
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        q = torch.empty(12, 8, 128, dtype=BF16)
        pool = torch.empty(10, 2, 16, 128, dtype=BF16)
        table = torch.empty(3, dtype=torch.int32)
        out = _ops.paged_functional(
            q, pool, pool, table, table, table, table[:2], 16, "HND", "causal", -1, None, 1.0, 0
        )
        assert out.shape == q.shape and out.dtype == BF16
        out = _ops.paged_functional(q, pool, pool, table, table, table, table[:2], 16, "HND", "dense", -1, None, 1.0, 1)
        assert out.dtype == torch.float16


def _call_args():
    q = torch.zeros(5, 4, 128, dtype=BF16)
    pool = torch.zeros(6, 2, 16, 128, dtype=BF16)
    tables = (
        torch.tensor([0, 3, 5], dtype=torch.int32),
        torch.tensor([0, 3, 4], dtype=torch.int32),
        torch.tensor([2, 0, 5, 1], dtype=torch.int32),
        torch.tensor([8, 16], dtype=torch.int32),
    )
    return [q, pool, pool, *tables]


PYTHON_REJECTIONS = [
    ("q_not_tensor", dict(arg=(0, [1])), TypeError, ["q must be a torch.Tensor"]),
    ("table_not_tensor", dict(arg=(5, (0, 1))), TypeError, ["paged_kv_indices must be a torch.Tensor"]),
    ("out_not_tensor", dict(out=3), TypeError, ["out must be a torch.Tensor or None"]),
    ("page_size_bool", dict(page_size=True), TypeError, ["page_size must be an int"]),
    ("page_size_float", dict(page_size=16.0), TypeError, ["page_size must be an int"]),
    ("page_size_huge", dict(page_size=2**70), ValueError, ["page_size=", "int64"]),
    ("layout_not_str", dict(kv_layout=0), TypeError, ["kv_layout must be a str"]),
    ("layout_unknown", dict(kv_layout="hnd"), ValueError, ["kv_layout='hnd' is not one of 'HND', 'NHD'"]),
    ("mask_variable_window", dict(mask_type="variable_window"), ValueError, ["not available with a paged KV cache"]),
    ("mask_unknown", dict(mask_type="sliding"), ValueError, ["mask_type='sliding'"]),
    ("window_float", dict(mask_type="causal", window_left=2.0), TypeError, ["window_left must be an int"]),
    ("out_dtype_float32", dict(out_dtype=torch.float32), NotImplementedError, ["out_dtype=float32"]),
]


@pytest.mark.parametrize("case,overrides,exc,needles", PYTHON_REJECTIONS, ids=[r[0] for r in PYTHON_REJECTIONS])
def test_python_side_rejections(case, overrides, exc, needles, monkeypatch):
    def no_call(*args, **kwargs):
        raise AssertionError("the library was called")

    monkeypatch.setattr(_ops, "paged_eager", no_call)
    args = _call_args()
    overrides = dict(overrides)
    if "arg" in overrides:
        index, value = overrides.pop("arg")
        args[index] = value
    overrides.setdefault("page_size", 16)
    with pytest.raises(exc) as info:
        tsattn.batch_prefill_with_paged_kv_cache(*args, **overrides)
    assert type(info.value) is exc, f"{type(info.value).__name__}: {info.value}"
    for needle in needles:
        assert needle in str(info.value), f"{needle!r} not in {str(info.value)!r}"


LIBRARY_REJECTIONS = [
    ("page_size_24", dict(page_size=24), NotImplementedError, ["page_size=24 is not supported; supported: 16, 32"]),
    ("page_size_0", dict(page_size=0), ValueError, ["page_size=0 must be >= 1"]),
    ("pools_on_cpu", dict(page_size=16), ValueError, ["k_cache must be a CUDA tensor (got cpu)"]),
    ("layout_code", dict(page_size=16, kv_layout="NHD"), ValueError, ["k_cache must be a CUDA tensor"]),
]


@needs_library
@pytest.mark.parametrize("case,overrides,exc,needles", LIBRARY_REJECTIONS, ids=[r[0] for r in LIBRARY_REJECTIONS])
def test_library_rejections_before_a_device(case, overrides, exc, needles):
    with pytest.raises(exc) as info:
        tsattn.batch_prefill_with_paged_kv_cache(*_call_args(), **overrides)
    assert type(info.value) is exc, f"{type(info.value).__name__}: {info.value}"
    for needle in needles:
        assert needle in str(info.value), f"{needle!r} not in {str(info.value)!r}"


@needs_library
def test_paged_plan_options_struct_matches_the_library():
    """init() fills the defaults at the offsets the ctypes struct reads."""
    options = _library.PagedPlanOptions()
    _library.function("tsattn_paged_prefill_plan_options_init")(ctypes.byref(options))
    assert options.struct_size == ctypes.sizeof(_library.PagedPlanOptions)
    assert (options.page_size, options.kv_layout, options.window_left, options.output_scale) == (32, 0, -1, 1.0)
    assert (options.q_dtype, options.kv_dtype, options.out_dtype, options.mask_type) == (2, 2, 0, 0)


VALID = dict(
    device="cuda:0",
    batch_size=4,
    max_seq_len_q=256,
    max_kv_len=512,
    num_qo_heads=8,
    num_kv_heads=2,
    head_dim=128,
    q_dtype=BF16,
    kv_dtype=BF16,
)

PLAN_REJECTIONS = [
    ("page_size_bool", dict(page_size=True), TypeError, ["page_size must be an int"]),
    ("layout_unknown", dict(kv_layout="XYZ"), ValueError, ["kv_layout='XYZ'"]),
    ("mask_variable_window", dict(mask_type="variable_window"), ValueError, ["not available with a paged KV cache"]),
    ("batch_float", dict(batch_size=4.0), TypeError, ["batch_size must be an int"]),
    # The library's rules, reported before it needs a device.
    ("page_size_8", dict(page_size=8), NotImplementedError, ["page_size=8 is not supported"]),
    ("head_dim_64", dict(head_dim=64), NotImplementedError, ["head_dim=64 is not supported"]),
    ("window_dense", dict(window_left=8), ValueError, ["window_left=8", "causal"]),
    ("too_many_rows", dict(max_kv_len=2**30), ValueError, ["max_kv_len=1073741824", "2^31-1"]),
]


@needs_library
@pytest.mark.parametrize("case,overrides,exc,needles", PLAN_REJECTIONS, ids=[r[0] for r in PLAN_REJECTIONS])
def test_plan_rejections(case, overrides, exc, needles):
    w = tsattn.BatchPrefillPagedTSWrapper()
    args = dict(VALID)
    args.update(overrides)
    with pytest.raises(exc) as info:
        w.plan(**args)
    assert type(info.value) is exc, f"{type(info.value).__name__}: {info.value}"
    for needle in needles:
        assert needle in str(info.value), f"{needle!r} not in {str(info.value)!r}"
    with pytest.raises(RuntimeError, match="call plan\\(\\) first"):
        w.run(*_call_args())


@needs_library
@pytest.mark.skipif(torch.cuda.is_available(), reason="skipped: this machine has a CUDA device")
def test_plan_without_a_gpu_is_a_runtime_error():
    w = tsattn.BatchPrefillPagedTSWrapper()
    with pytest.raises(RuntimeError) as info:
        w.plan(**VALID)
    assert "CUDA" in str(info.value)


def test_run_checks_before_the_plan(monkeypatch):
    w = tsattn.BatchPrefillPagedTSWrapper()
    args = _call_args()
    with pytest.raises(TypeError, match="return_lse must be a bool"):
        w.run(*args, return_lse=1)
    with pytest.raises(TypeError, match="validate must be a bool"):
        w.run(*args, validate=None)
    with pytest.raises(RuntimeError, match="needs a plan"):
        w.run(*args)
    monkeypatch.setattr(w, "_handle", 1, raising=False)  # a plan stood in for: the tensors' types come next
    bad = list(args)
    bad[4] = [0, 3, 4]
    with pytest.raises(TypeError, match="paged_kv_indptr must be a torch.Tensor"):
        w.run(*bad)
    with pytest.raises(TypeError, match="out must be a torch.Tensor or None"):
        w.run(*args, out=3)
