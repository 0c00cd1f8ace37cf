"""No-GPU tests against the real libtsattn: errors the C validator raises before it needs a GPU
(it checks options first, then dtypes, then devices), and the library helpers."""

import json
import math
import threading

import pytest
import torch

import tsattn

from support import assert_rejected, FP8, REPO, needs_library

pytestmark = needs_library


def _qkv(dtype=torch.float16, d=128):
    q = torch.zeros(1, 4, 2, d, dtype=dtype)
    return q, q.clone(), q.clone()


def _bounds():
    return torch.zeros(1, 4, dtype=torch.int32)


C_REJECTIONS = [
    # (id, overrides, type, substrings)
    ("cpu_tensors", {}, ValueError, ["q must be a CUDA tensor (got cpu)"]),
    ("window_zero", dict(mask_type="causal", window_left=0), ValueError, ["window_left=0"]),
    ("window_below_minus_one", dict(mask_type="causal", window_left=-2), ValueError, ["window_left=-2"]),
    ("window_without_causal", dict(window_left=8), ValueError, ["window_left=8", "causal"]),
    (
        "window_with_variable_window",
        dict(
            mask_type="variable_window",
            window_left=8,
            variable_window_token_starts=_bounds(),
            variable_window_token_ends=_bounds(),
        ),
        ValueError,
        ["window_left=8", "variable_window"],
    ),
    (
        "variable_window_without_bounds",
        dict(mask_type="variable_window"),
        ValueError,
        ["variable_window_token_starts", "variable_window_token_ends"],
    ),
    (
        "variable_window_without_ends",
        dict(mask_type="variable_window", variable_window_token_starts=_bounds()),
        ValueError,
        ["missing: variable_window_token_ends"],
    ),
    (
        "bounds_with_causal",
        dict(mask_type="causal", variable_window_token_starts=_bounds(), variable_window_token_ends=_bounds()),
        ValueError,
        ["variable_window_token_starts"],
    ),
    ("sm_scale_nan", dict(sm_scale=math.nan), ValueError, ["sm_scale=nan"]),
    ("sm_scale_inf", dict(sm_scale=math.inf), ValueError, ["sm_scale=inf"]),
    ("sm_scale_zero", dict(sm_scale=0.0), ValueError, ["sm_scale=0"]),
    ("sm_scale_negative", dict(sm_scale=-0.125), ValueError, ["sm_scale=-0.125"]),
    ("sm_scale_float32_underflow", dict(sm_scale=1e-50), ValueError, ["sm_scale=", "float32"]),
    ("output_scale_float32_overflow", dict(output_scale=1e39), ValueError, ["output_scale=", "float32"]),
    ("output_scale_zero", dict(output_scale=0), ValueError, ["output_scale=0"]),
    ("output_scale_nan", dict(output_scale=math.nan), ValueError, ["output_scale=nan"]),
    (
        "only_qo_indptr",
        dict(qo_indptr=torch.tensor([0, 4], dtype=torch.int32)),
        ValueError,
        ["qo_indptr and kv_indptr must be given together"],
    ),
    ("only_kv_indptr", dict(kv_indptr=torch.tensor([0, 4], dtype=torch.int32)), ValueError, ["kv_indptr"]),
    ("q_float32", dict(q=torch.zeros(1, 4, 2, 128)), NotImplementedError, ["q has dtype float32"]),
    (
        "qkv_float32",
        dict(q=torch.zeros(1, 4, 2, 128), k=torch.zeros(1, 4, 2, 128), v=torch.zeros(1, 4, 2, 128)),
        NotImplementedError,
        ["q has dtype float32"],
    ),
    ("q_int8", dict(q=torch.zeros(1, 4, 2, 128, dtype=torch.int8)), NotImplementedError, ["q has dtype int8"]),
    ("q_complex", dict(q=torch.zeros(1, 4, 2, 128, dtype=torch.complex64)), NotImplementedError, ["q has dtype"]),
    (
        "mixed_k_bf16",
        dict(k=torch.zeros(1, 4, 2, 128, dtype=torch.bfloat16)),
        NotImplementedError,
        ["q, k and v must share one dtype", "k=bfloat16"],
    ),
    ("mixed_v_fp32", dict(v=torch.zeros(1, 4, 2, 128)), NotImplementedError, ["v=float32"]),
    ("out_float32", dict(out=torch.zeros(1, 4, 2, 128)), NotImplementedError, ["out has dtype float32"]),
    (
        "out_and_out_dtype_differ",
        dict(out=torch.zeros(1, 4, 2, 128, dtype=torch.float16), out_dtype=torch.bfloat16),
        ValueError,
        ["out_dtype=bfloat16 differs from out.dtype=float16"],
    ),
]
if FP8 is not None:
    C_REJECTIONS.append(
        ("mixed_fp8_fp16", dict(k=torch.zeros(1, 4, 2, 128, dtype=FP8)), NotImplementedError, ["k=float8_e4m3fn"])
    )


@pytest.mark.parametrize("case,overrides,exc,needles", C_REJECTIONS, ids=[r[0] for r in C_REJECTIONS])
def test_c_side_rejection_on_cpu(case, overrides, exc, needles):
    q, k, v = _qkv()
    args = dict(q=q, k=k, v=v)
    args.update(overrides)
    assert_rejected(exc, needles, args)


@pytest.mark.parametrize("dtype", [torch.int64, torch.float32, torch.int16], ids=str)
@pytest.mark.parametrize("name", ["qo_indptr", "kv_indptr"])
def test_indptr_of_another_dtype_is_a_type_error(name, dtype):
    """As in prims_ts. The C library checks dtypes before devices, so CPU tensors reach this check."""
    q = torch.zeros(4, 2, 128, dtype=torch.float16)
    indptr = torch.tensor([0, 4], dtype=torch.int32)
    args = dict(q=q, k=q.clone(), v=q.clone(), qo_indptr=indptr, kv_indptr=indptr.clone())
    args[name] = args[name].to(dtype)
    assert_rejected(TypeError, [f"{name} has dtype {str(dtype).replace('torch.', '')}; expected int32"], args)


def test_rejected_call_leaves_out_untouched():
    q, k, v = _qkv()
    out = torch.full_like(q, float("nan"))
    with pytest.raises(ValueError):
        tsattn.batch_prefill(q, k, v, out=out)
    assert torch.isnan(out).all()


def test_error_messages_are_per_thread():
    """tsattn_last_error_message() is thread-local: concurrent failures keep their own messages."""
    results = {}

    def worker(name, kwargs):
        q, k, v = _qkv()
        for _ in range(200):
            try:
                tsattn.batch_prefill(q, k, v, **kwargs)
            except (ValueError, NotImplementedError) as e:
                results.setdefault(name, set()).add(str(e))

    threads = [
        threading.Thread(target=worker, args=("window", dict(mask_type="causal", window_left=0))),
        threading.Thread(target=worker, args=("scale", dict(sm_scale=-1.0))),
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results["window"]) == 1 and "window_left=0" in next(iter(results["window"]))
    assert len(results["scale"]) == 1 and "sm_scale=-1" in next(iter(results["scale"]))


def test_last_kernel_name_is_empty_without_a_launch():
    """ "" on a thread that made no call, and after a call that was rejected (nothing launched)."""
    seen = []
    worker = threading.Thread(target=lambda: seen.append(tsattn.last_kernel_name()))
    worker.start()
    worker.join()
    assert seen == [""]
    q, k, v = _qkv()
    with pytest.raises(ValueError):
        tsattn.batch_prefill(q, k, v)  # CPU tensors
    assert tsattn.last_kernel_name() == ""


def test_library_version_and_path():
    assert tsattn.library_version() == tsattn.__version__
    assert "libtsattn" in tsattn.library_path()


def test_cache_info():
    info = tsattn.cache_info()
    assert set(info) == {
        "memory_hits",
        "memory_misses",
        "compiles",
        "compile_failures",
        "disk_lookups",
        "disk_read_only_hits",
        "disk_writable_hits",
        "disk_misses",
        "disk_damaged",
        "disk_writes",
        "disk_write_failures",
        "modules_loaded",
    }
    assert all(isinstance(v, int) and v >= 0 for v in info.values())


def test_precompile_empty_manifest(tmp_path):
    manifest = tmp_path / "empty.json"
    manifest.write_text(json.dumps({"schema": 1, "description": "nothing", "kernels": []}))
    result = tsattn.precompile(manifest, archs=["sm_90a", "sm_80"], out_dir=tmp_path / "cache", jobs=1)
    assert result == {"compiled": 0, "cached": 0, "failed": 0}


@pytest.mark.parametrize(
    "kwargs,exc,needle",
    [
        (dict(manifest_path="/nonexistent/manifest.json"), ValueError, "/nonexistent/manifest.json"),
        (dict(manifest_path=str(REPO / "cache" / "manifests" / "default.json"), archs="sm_1"), ValueError, "sm_1"),
        (dict(manifest_path=str(REPO / "cache" / "manifests" / "default.json"), archs=""), ValueError, "arch"),
        (dict(manifest_path=3), TypeError, "manifest_path"),
        (dict(manifest_path="m.json", archs=90), TypeError, "archs"),
        (dict(manifest_path="m.json", out_dir=1), TypeError, "out_dir"),
        (dict(manifest_path="m.json", jobs=2.0), TypeError, "jobs"),
        (dict(manifest_path="m.json", jobs=True), TypeError, "jobs"),
        (dict(manifest_path="m.json", jobs=2**40), ValueError, "jobs"),
    ],
    ids=[
        "missing_manifest",
        "bad_arch",
        "no_arch",
        "path_int",
        "archs_int",
        "out_dir_int",
        "jobs_float",
        "jobs_bool",
        "jobs_huge",
    ],
)
def test_precompile_rejections(tmp_path, kwargs, exc, needle):
    kwargs.setdefault("out_dir", str(tmp_path / "cache"))
    with pytest.raises(exc) as info:
        tsattn.precompile(**kwargs)
    assert type(info.value) is exc and needle in str(info.value), str(info.value)


def test_bad_manifest_family(tmp_path):
    manifest = tmp_path / "bad.json"
    manifest.write_text(json.dumps({"schema": 1, "kernels": [{"family": "no-such-family"}]}))
    with pytest.raises(ValueError, match="no-such-family"):
        tsattn.precompile(str(manifest), out_dir=str(tmp_path / "cache"))
