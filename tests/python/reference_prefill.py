"""A CPU stand-in for tsattn.batch_prefill: checks each call against docs/contract.md's rules (the
ones a caller can break: layouts, indptrs, masks, windows, bounds, heads), then computes support's
fp64 reference and returns it in q's dtype. The transformers tests run their attention plans
through it, so a plan tsattn would reject fails on the CPU too."""

import math

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
