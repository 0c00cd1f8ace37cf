"""Shared helpers of the Python tests: skip marks, the fp32 reference (the oracle of docs/contract.md), tolerances."""

import math
from pathlib import Path
from typing import List, Optional, Sequence, Tuple

import pytest
import torch

import tsattn
from tsattn import _library

REPO = Path(__file__).resolve().parents[2]
FP8 = getattr(torch, "float8_e4m3fn", None)
DEVICE = "cuda"  # where the GPU tests put their tensors


def _library_or_reason() -> Optional[str]:
    try:
        _library.library()
        return None
    except RuntimeError as e:
        return " ".join(str(e).split())


LIBRARY_MISSING = _library_or_reason()
HAS_CUDA = torch.cuda.is_available()

needs_library = pytest.mark.skipif(
    LIBRARY_MISSING is not None, reason=f"skipped: libtsattn not found ({LIBRARY_MISSING})"
)
needs_cuda = pytest.mark.skipif(not HAS_CUDA, reason="skipped: no CUDA device")


def report_header() -> List[str]:
    lib = LIBRARY_MISSING or _library.library_path()
    return [
        f"tsattn package: {tsattn.__file__}",
        f"libtsattn: {lib}",
        f"torch {torch.__version__}, CUDA device: {HAS_CUDA}",
    ]


def call_or_xfail(fn):
    """Runs fn; a NotImplementedError from the library makes the test xfail with its message."""
    try:
        return fn()
    except NotImplementedError as e:
        pytest.xfail(f"library says not implemented: {e}")


def capture_graph(fn) -> "torch.cuda.CUDAGraph":
    """Warms fn up on a side stream (as torch recommends), then captures it into a CUDA graph (a
    NotImplementedError from the library makes the test xfail)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        call_or_xfail(fn)
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()

    def capture():
        with torch.cuda.graph(graph):
            fn()

    call_or_xfail(capture)
    return graph


def replay_with_fresh_inputs(graph, inputs, out, check, replays=3) -> None:
    """Replays a captured graph `replays` times, each after refilling `inputs` in place with fresh
    randn of their dtype and `out` with NaN; check(replay) after each, once the GPU is done."""
    for replay in range(replays):
        for t in inputs:
            t.copy_(randn(t.shape, t.dtype))
        out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        check(replay)


# ---------------------------------------------------------------- inputs


def randn(shape, dtype, device=None, generator=None):
    """0.2*randn (0.125 for fp8), fresh per call, cast to dtype (docs/contract.md, "Tolerances used by the tests")."""
    scale = 0.125 if dtype == FP8 else 0.2
    x = torch.randn(shape, device=device or DEVICE, dtype=torch.float32, generator=generator) * scale
    return x.to(dtype)


def poisoned(shape, dtype, device=None):
    """An output buffer full of NaN (0x7F is NaN in float8_e4m3fn)."""
    t = torch.empty(shape, dtype=dtype, device=device or DEVICE)
    if dtype == FP8:
        t.view(torch.uint8).fill_(0x7F)
    else:
        t.fill_(float("nan"))
    return t


# ---------------------------------------------------------------- reference


def visible_mask(
    sq: int, sk: int, mask_type: str, window_left: int = -1, starts=None, ends=None, device="cpu"
) -> torch.Tensor:
    """bool [sq, sk]: key j visible to query row i (docs/contract.md, "Masks"), for one request."""
    i = torch.arange(sq, device=device).unsqueeze(1)
    j = torch.arange(sk, device=device).unsqueeze(0)
    if mask_type == "dense":
        return torch.ones(sq, sk, dtype=torch.bool, device=device)
    if mask_type == "causal":
        diag = i + (sk - sq)
        m = j <= diag
        if window_left >= 1:
            m &= j >= diag - window_left
        return m
    if mask_type == "variable_window":
        # Inclusive bounds; j already lies in [0, sk), which is the clamp; inverted = empty.
        s = starts.to(device=device, dtype=torch.int64).unsqueeze(1)
        e = ends.to(device=device, dtype=torch.int64).unsqueeze(1)
        return (j >= s) & (j <= e)
    raise ValueError(mask_type)


def attention_one(q, k, v, mask, sm_scale, output_scale) -> torch.Tensor:
    """fp32 (computed in fp64) attention of one request: q [sq, hq, d], k/v [sk, hkv, d], mask [sq, sk]."""
    q, k, v = q.float().double(), k.float().double(), v.float().double()
    hq, hkv = q.shape[1], k.shape[1]
    if hkv != hq:
        k = k.repeat_interleave(hq // hkv, dim=1)
        v = v.repeat_interleave(hq // hkv, dim=1)
    if k.shape[0] == 0 or q.shape[0] == 0:
        return torch.zeros(q.shape, dtype=torch.float32, device=q.device)
    scores = torch.einsum("ihd,jhd->hij", q, k) * sm_scale
    scores = scores.masked_fill(~mask.to(q.device).unsqueeze(0), float("-inf"))
    p = torch.softmax(scores, dim=-1)
    p = torch.where(mask.to(q.device).any(dim=-1).unsqueeze(0).unsqueeze(-1), p, torch.zeros_like(p))
    return (torch.einsum("hij,jhd->ihd", p, v) * output_scale).float()


def requests(q, k, qo_indptr, kv_indptr, mask_type, window_left, starts, ends):
    """(rows, keys, mask) of each request: rows and keys index q's and k's first dims (fixed
    layout: b; packed: a token slice), mask the request's visible keys (visible_mask)."""
    if qo_indptr is None:
        for b in range(q.shape[0]):
            rows_starts = None if starts is None else starts[b]
            rows_ends = None if ends is None else ends[b]
            m = visible_mask(q.shape[1], k.shape[1], mask_type, window_left, rows_starts, rows_ends, q.device)
            yield b, b, m
        return
    qo, kv = qo_indptr.tolist(), kv_indptr.tolist()
    for b in range(len(qo) - 1):
        q0, q1, k0, k1 = qo[b], qo[b + 1], kv[b], kv[b + 1]
        rows_starts = None if starts is None else starts[q0:q1]
        rows_ends = None if ends is None else ends[q0:q1]
        m = visible_mask(q1 - q0, k1 - k0, mask_type, window_left, rows_starts, rows_ends, q.device)
        yield slice(q0, q1), slice(k0, k1), m


def reference(
    q,
    k,
    v,
    *,
    qo_indptr=None,
    kv_indptr=None,
    mask_type="dense",
    window_left=-1,
    starts=None,
    ends=None,
    sm_scale=None,
    output_scale=1.0,
) -> torch.Tensor:
    """fp32 oracle for batch_prefill's arguments (fixed or packed layout)."""
    scale = 1.0 / math.sqrt(q.shape[-1]) if sm_scale is None else float(sm_scale)
    out = torch.zeros(q.shape, dtype=torch.float32, device=q.device)
    for rows, keys, m in requests(q, k, qo_indptr, kv_indptr, mask_type, window_left, starts, ends):
        out[rows] = attention_one(q[rows], k[keys], v[keys], m, scale, output_scale)
    return out


def lse_one(q, k, mask, sm_scale) -> torch.Tensor:
    """fp32 (computed in fp64) log-sum-exp of one request's rows: [sq, hq]; -inf where a row sees no key."""
    q, k = q.float().double(), k.float().double()
    hq, hkv = q.shape[1], k.shape[1]
    if hkv != hq:
        k = k.repeat_interleave(hq // hkv, dim=1)
    if k.shape[0] == 0 or q.shape[0] == 0:
        return torch.full(q.shape[:2], float("-inf"), dtype=torch.float32, device=q.device)
    scores = torch.einsum("ihd,jhd->hij", q, k) * sm_scale
    scores = scores.masked_fill(~mask.to(q.device).unsqueeze(0), float("-inf"))
    return torch.logsumexp(scores, dim=-1).transpose(0, 1).float()


def reference_lse(
    q, k, *, qo_indptr=None, kv_indptr=None, mask_type="dense", window_left=-1, starts=None, ends=None, sm_scale=None
) -> torch.Tensor:
    """The fp32 oracle of the lse output: q.shape[:-1] (fixed [B, Sq, Hq], packed [total_q, Hq])."""
    scale = 1.0 / math.sqrt(q.shape[-1]) if sm_scale is None else float(sm_scale)
    out = torch.full(q.shape[:-1], float("-inf"), dtype=torch.float32, device=q.device)
    for rows, keys, m in requests(q, k, qo_indptr, kv_indptr, mask_type, window_left, starts, ends):
        out[rows] = lse_one(q[rows], k[keys], m, scale)
    return out


# ---------------------------------------------------------------- tolerances

# (rtol, atol, relative-norm bound) by the least precise of the input and output dtype.
TOLERANCES = {"fp8": (5e-2, 1.3e-1, 1e-1), "bf16": (2e-2, 1e-2, 2e-2), "fp16": (1e-2, 2e-3, 1e-2)}
_PRECISION_ORDER = ["fp8", "bf16", "fp16"]  # least precise first


def _kind(dtype) -> str:
    return {torch.float16: "fp16", torch.bfloat16: "bf16"}.get(dtype, "fp8" if dtype == FP8 else "?")


def tolerance(in_dtype, out_dtype) -> Tuple[float, float, float]:
    kinds = {_kind(in_dtype), _kind(out_dtype)}
    for kind in _PRECISION_ORDER:
        if kind in kinds:
            return TOLERANCES[kind]
    raise ValueError((in_dtype, out_dtype))


def assert_close_to_reference(actual: torch.Tensor, expected: torch.Tensor, in_dtype, what: str = "") -> None:
    """Every element written (no NaN left from the poison), allclose and relative norm within the contract's bounds."""
    rtol, atol, relnorm = tolerance(in_dtype, actual.dtype)
    a = actual.float().cpu()
    e = expected.float().cpu()
    assert a.shape == e.shape, f"{what}: shape {tuple(a.shape)} != {tuple(e.shape)}"
    nan = torch.isnan(a)
    assert not nan.any(), f"{what}: {int(nan.sum())} of {a.numel()} output elements not written (NaN poison left)"
    assert torch.isfinite(a).all(), f"{what}: non-finite outputs"
    bad = ~(torch.abs(a - e) <= atol + rtol * torch.abs(e))
    if bad.any():
        idx = tuple(int(x) for x in bad.nonzero()[0])
        raise AssertionError(
            f"{what}: {int(bad.sum())} of {a.numel()} elements outside rtol={rtol} atol={atol}; "
            f"first at {idx}: got {a[idx].item():.6f}, want {e[idx].item():.6f}; "
            f"max abs err {float((a - e).abs().max()):.4g}"
        )
    norm = float(e.norm())
    if norm > 0:
        # Plus what rounding the reference itself to the output dtype costs: for fp8 outputs
        # among e4m3's subnormals (|x| < 2^-6) that alone is ~10% of the norm (as in src/ref/compare).
        floor = float((e.to(actual.dtype).float() - e).norm()) / norm
        rel = float((a - e).norm()) / norm
        assert rel <= relnorm + floor, f"{what}: relative norm error {rel:.4g} > {relnorm} + {floor:.3g} (rounding)"


def assert_rejected(exc, needles: Sequence[str], args: dict) -> None:
    """batch_prefill(**args) raises exactly `exc`, and its message contains every needle."""
    args = dict(args)
    q, k, v = args.pop("q"), args.pop("k"), args.pop("v")
    with pytest.raises(exc) as info:
        tsattn.batch_prefill(q, k, v, **args)
    assert type(info.value) is exc, f"{type(info.value).__name__}: {info.value}"
    for needle in needles:
        assert needle in str(info.value), f"{needle!r} not in {str(info.value)!r}"


def indptr(lengths: Sequence[int], device="cpu") -> torch.Tensor:
    values = [0]
    for n in lengths:
        values.append(values[-1] + n)
    return torch.tensor(values, dtype=torch.int32, device=device)
