"""The public batch_prefill (docs/contract.md, "Python signature")."""

from __future__ import annotations

from typing import Optional

import torch

from . import _ops
from ._args import check_arguments


def batch_prefill(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    qo_indptr: Optional[torch.Tensor] = None,
    kv_indptr: Optional[torch.Tensor] = None,
    mask_type: str = "dense",
    window_left: int = -1,
    variable_window_token_starts: Optional[torch.Tensor] = None,
    variable_window_token_ends: Optional[torch.Tensor] = None,
    sm_scale: Optional[float] = None,
    output_scale: float = 1.0,
    out_dtype: Optional[torch.dtype] = None,
    out: Optional[torch.Tensor] = None,
) -> torch.Tensor:
    """One-shot prefill attention: ``out = output_scale * softmax(sm_scale * q k^T + mask) v``.

    Fixed layout: q ``[B, Sq, Hq, D]``, k/v ``[B, Sk, Hkv, D]``. Packed ragged layout (both indptrs
    given, int32 ``[B+1]``, host or GPU): q ``[total_q, Hq, D]``, k/v ``[total_k, Hkv, D]``.
    D is 128 or 256; q/k/v share float16, bfloat16 or float8_e4m3fn; out is any of the three
    (``out_dtype``, else ``out.dtype``, else q's dtype). ``mask_type`` is "dense", "causal"
    (bottom-right aligned, optional ``window_left`` W >= 1) or "variable_window" (inclusive int32
    per-query bounds). Runs on torch's current CUDA stream and returns ``out`` (allocated if not
    given). Errors: TypeError, ValueError, NotImplementedError, RuntimeError as docs/contract.md says.
    Not differentiable.
    """
    s = check_arguments(
        q,
        k,
        v,
        qo_indptr,
        kv_indptr,
        mask_type,
        window_left,
        variable_window_token_starts,
        variable_window_token_ends,
        sm_scale,
        output_scale,
        out_dtype,
        out,
    )
    args = (
        q,
        k,
        v,
        qo_indptr,
        kv_indptr,
        s.mask_type,
        s.window_left,
        variable_window_token_starts,
        variable_window_token_ends,
        s.sm_scale,
        s.output_scale,
        s.out_dtype_code,
    )
    tensors = (q, k, v, qo_indptr, kv_indptr, variable_window_token_starts, variable_window_token_ends, out)
    if not _ops.AVAILABLE or not _ops.dispatcher_needed(tensors):
        return _ops.batch_prefill_eager(*args, out)
    if out is None:
        return _ops.functional(*args)
    _ops.mutating(*args, out)
    return out
