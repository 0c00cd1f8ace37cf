"""The public one-shot calls: batch_prefill (docs/contract.md, "Python signature") and
batch_prefill_with_paged_kv_cache (docs/paged_kv.md, "Signature")."""

from __future__ import annotations

from typing import Optional

import torch

from . import _ops
from ._args import (
    check_arguments,
    check_page_size,
    check_paged_mask,
    check_paged_tensors,
    check_scalars,
    kv_layout_code,
)


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


def batch_prefill_with_paged_kv_cache(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    qo_indptr: torch.Tensor,
    paged_kv_indptr: torch.Tensor,
    paged_kv_indices: torch.Tensor,
    paged_kv_last_page_len: torch.Tensor,
    *,
    page_size: int = 32,
    kv_layout: str = "HND",
    mask_type: str = "dense",
    window_left: int = -1,
    sm_scale: Optional[float] = None,
    output_scale: float = 1.0,
    out_dtype: Optional[torch.dtype] = None,
    out: Optional[torch.Tensor] = None,
) -> torch.Tensor:
    """Prefill attention over a paged KV cache (docs/paged_kv.md).

    q ``[total_q, Hq, D]`` packed by ``qo_indptr`` as in ``batch_prefill``; ``k_cache`` and ``v_cache``
    ``[num_pages, Hkv, page_size, D]`` (``kv_layout="HND"``) or ``[num_pages, page_size, Hkv, D]``
    (``"NHD"``); request b's keys are the pages ``paged_kv_indices[paged_kv_indptr[b]:paged_kv_indptr[b+1]]``
    in order, the last holding ``paged_kv_last_page_len[b]`` keys. The four int32 tables are all on
    the CPU (checked before anything runs) or all on q's GPU (never read back: the call can be
    captured in a CUDA graph). ``mask_type`` is "dense" or "causal" (bottom-right aligned: the
    queries are the last Sq keys of their request), with an optional ``window_left``. Runs on torch's
    current CUDA stream and returns ``out`` (allocated if not given). Not differentiable.
    """
    check_paged_tensors(
        q, k_cache, v_cache, (qo_indptr, paged_kv_indptr, paged_kv_indices, paged_kv_last_page_len), out
    )
    page = check_page_size(page_size)
    kv_layout_code(kv_layout)  # the name's check; the op carries the name
    s = check_scalars(mask_type, window_left, sm_scale, output_scale, out_dtype)
    check_paged_mask(s.mask_type)
    args = (
        q,
        k_cache,
        v_cache,
        qo_indptr,
        paged_kv_indptr,
        paged_kv_indices,
        paged_kv_last_page_len,
        page,
        kv_layout,
        s.mask_type,
        s.window_left,
        s.sm_scale,
        s.output_scale,
        s.out_dtype_code,
    )
    tensors = (q, k_cache, v_cache, qo_indptr, paged_kv_indptr, paged_kv_indices, paged_kv_last_page_len, out)
    if not _ops.AVAILABLE or not _ops.dispatcher_needed(tensors):
        return _ops.paged_eager(*args, out)
    if out is None:
        return _ops.paged_functional(*args)
    _ops.paged_mutating(*args, out)
    return out
