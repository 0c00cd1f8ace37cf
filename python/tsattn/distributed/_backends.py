"""The attention and merge of one ring step, behind a small protocol so that the ring, the zigzag
layout and the merge order do not depend on what computes them.

``TsattnBackend`` (the default) runs tsattn's kernels through ``BatchPrefillTSWrapper`` plans and
merges with ``tsattn.merge_state``; it needs CUDA tensors. ``ReferenceBackend`` is plain torch in
fp32 on the tensors' own device (CPU or GPU): the CPU tests run the whole ring with it.
"""

from __future__ import annotations

import math
from typing import Dict, Optional, Protocol, Tuple

import torch

from ._step_plan import BlockMask


class AttentionBackend(Protocol):
    """What the ring needs from whoever computes attention.

    ``attention`` takes tensors in ``batch_prefill``'s layouts (fixed ``[B, S, H, D]``, or packed
    ``[total, H, D]`` with int32 host indptrs) and a ``BlockMask``, and returns ``(out, lse)``: out of
    q's shape (any float dtype), lse float32 of ``q.shape[:-1]``, the natural-log log-sum-exp of each
    row's scaled scores, -inf (and out 0) for a row that sees no key.

    ``merge_into`` folds a partial result into the float32 accumulator ``(acc_out, acc_lse)`` in place,
    with ``merge_state``'s rules (a side whose lse is -inf contributes nothing). The accumulator may
    be a view (the rows of one block)."""

    def attention(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        mask: BlockMask,
        *,
        qo_indptr: Optional[torch.Tensor] = None,
        kv_indptr: Optional[torch.Tensor] = None,
        sm_scale: Optional[float] = None,
    ) -> Tuple[torch.Tensor, torch.Tensor]: ...

    def merge_into(
        self, acc_out: torch.Tensor, acc_lse: torch.Tensor, part_out: torch.Tensor, part_lse: torch.Tensor
    ) -> None: ...


# ---------------------------------------------------------------- the fp32 reference


def _visible(mask: BlockMask, num_rows: int, num_keys: int, starts=None, ends=None, device=None) -> torch.Tensor:
    """bool [num_rows, num_keys] (or [B, num_rows, num_keys] for [B, num_rows] bounds): key j visible to row i."""
    i = torch.arange(num_rows, device=device).unsqueeze(-1)
    j = torch.arange(num_keys, device=device)
    if mask.mask_type == "dense":
        return torch.ones(num_rows, num_keys, dtype=torch.bool, device=device)
    if mask.mask_type == "causal":
        diagonal = i + (num_keys - num_rows)
        visible = j <= diagonal
        if mask.window_left >= 1:
            visible &= j >= diagonal - mask.window_left
        return visible
    if mask.mask_type == "variable_window":
        starts = starts.to(device=device, dtype=torch.int64).unsqueeze(-1)
        ends = ends.to(device=device, dtype=torch.int64).unsqueeze(-1)
        return (j >= starts) & (j <= ends)
    raise ValueError(f"mask.mask_type={mask.mask_type!r} is not one of 'dense', 'causal', 'variable_window'")


def _attend(q, k, v, visible, scale) -> Tuple[torch.Tensor, torch.Tensor]:
    """fp32 attention: q [B, m, Hq, D], k/v [B, n, Hkv, D], visible [B or 1, m, n] ->
    (out [B, m, Hq, Dv], lse [B, m, Hq])."""
    q, k, v = q.float(), k.float(), v.float()
    group = q.shape[2] // k.shape[2]
    if group != 1:
        k, v = k.repeat_interleave(group, dim=2), v.repeat_interleave(group, dim=2)
    scores = torch.einsum("bqhd,bkhd->bhqk", q, k) * scale
    scores = scores.masked_fill(~visible.unsqueeze(1), float("-inf"))
    lse = torch.logsumexp(scores, dim=-1)
    # A row that sees no key has lse -inf; subtracting 0 there keeps its weights exp(-inf) = 0.
    weights = torch.exp(scores - torch.where(torch.isneginf(lse), torch.zeros_like(lse), lse).unsqueeze(-1))
    out = torch.einsum("bhqk,bkhd->bqhd", weights, v)
    return out, lse.transpose(1, 2)


def _check_heads(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
    if k.shape != v.shape:
        raise ValueError(f"v.shape={list(v.shape)} must equal k.shape={list(k.shape)}")
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(f"q.shape[-1]={q.shape[-1]} (head dim) must equal k.shape[-1]={k.shape[-1]}")
    if k.shape[-2] == 0 or q.shape[-2] % k.shape[-2]:
        raise ValueError(f"Hq=q.shape[-2]={q.shape[-2]} must be a multiple of Hkv=k.shape[-2]={k.shape[-2]}")


class ReferenceBackend:
    """fp32 attention and merge in plain torch, on the tensors' device: the oracle the CPU tests run
    the ring with (slow and memory-hungry: it materializes every score)."""

    def attention(self, q, k, v, mask, *, qo_indptr=None, kv_indptr=None, sm_scale=None):
        _check_heads(q, k, v)
        scale = 1.0 / math.sqrt(q.shape[-1]) if sm_scale is None else float(sm_scale)
        if qo_indptr is None:
            visible = _visible(mask, q.shape[1], k.shape[1], mask.starts, mask.ends, q.device)
            return _attend(q, k, v, visible if visible.dim() == 3 else visible.unsqueeze(0), scale)
        out = torch.zeros(q.shape[:-1] + (v.shape[-1],), dtype=torch.float32, device=q.device)
        lse = torch.full(q.shape[:-1], float("-inf"), dtype=torch.float32, device=q.device)
        qo, kv = qo_indptr.tolist(), kv_indptr.tolist()
        for b in range(len(qo) - 1):
            rows, keys = slice(qo[b], qo[b + 1]), slice(kv[b], kv[b + 1])
            if rows.stop == rows.start:
                continue
            starts = None if mask.starts is None else mask.starts[rows]
            ends = None if mask.ends is None else mask.ends[rows]
            visible = _visible(mask, rows.stop - rows.start, keys.stop - keys.start, starts, ends, q.device)
            o, s = _attend(
                q[rows].unsqueeze(0), k[keys].unsqueeze(0), v[keys].unsqueeze(0), visible.unsqueeze(0), scale
            )
            out[rows], lse[rows] = o[0], s[0]
        return out, lse

    def merge_into(self, acc_out, acc_lse, part_out, part_lse):
        top = torch.maximum(acc_lse, part_lse)
        top = torch.where(torch.isneginf(top), torch.zeros_like(top), top)  # both -inf: both weights 0
        weight_acc, weight_part = torch.exp(acc_lse - top), torch.exp(part_lse - top)
        total = weight_acc + weight_part
        # A side of weight 0 is not read (its out may hold anything), as merge_state promises.
        zero = torch.zeros((), dtype=torch.float32, device=acc_out.device)
        merged = torch.where(weight_acc.unsqueeze(-1) > 0, acc_out * weight_acc.unsqueeze(-1), zero)
        merged = merged + torch.where(weight_part.unsqueeze(-1) > 0, part_out.float() * weight_part.unsqueeze(-1), zero)
        nonempty = total > 0
        acc_out.copy_(merged / torch.where(nonempty, total, torch.ones_like(total)).unsqueeze(-1))
        acc_lse.copy_(torch.where(nonempty, top + torch.log(total), torch.full_like(total, float("-inf"))))


# ---------------------------------------------------------------- tsattn's kernels


class TsattnBackend:
    """tsattn on the GPU: each step's attention through a ``BatchPrefillTSWrapper`` (one plan per mask,
    window, scale, layout, dtypes and heads, planned on first use and again, larger, when a call
    outgrows its capacities) with ``return_lse=True``, and the merges through ``tsattn.merge_state``
    (the partial output, in q's dtype or bfloat16 for fp8 inputs, is widened to the float32
    accumulator first). A backend's wrappers share their workspaces, so it must be used on one
    stream at a time: one backend per rank."""

    def __init__(self) -> None:
        self._plans: Dict[tuple, Tuple[object, Tuple[int, int, int]]] = {}

    def _wrapper(self, q, k, mask, packed, sm_scale, capacities, out_dtype):
        import tsattn

        settings = (
            q.device,
            packed,
            mask.mask_type,
            mask.window_left,
            sm_scale,
            q.dtype,
            out_dtype,
            q.shape[-2],
            k.shape[-2],
            q.shape[-1],
        )
        wrapper, planned = self._plans.get(settings, (None, (0, 0, 0)))
        if wrapper is not None and all(need <= have for need, have in zip(capacities, planned)):
            return wrapper
        planned = tuple(max(need, have, 1) for need, have in zip(capacities, planned))
        wrapper = tsattn.BatchPrefillTSWrapper()
        wrapper.plan(
            device=q.device,
            batch_size=planned[0],
            max_seq_len_q=planned[1],
            max_kv_len=planned[2],
            num_qo_heads=q.shape[-2],
            num_kv_heads=k.shape[-2],
            head_dim=q.shape[-1],
            q_dtype=q.dtype,
            kv_dtype=k.dtype,
            out_dtype=out_dtype,
            packed=packed,
            mask_type=mask.mask_type,
            window_left=mask.window_left,
            sm_scale=sm_scale,
        )
        self._plans[settings] = (wrapper, planned)
        return wrapper

    def attention(self, q, k, v, mask, *, qo_indptr=None, kv_indptr=None, sm_scale=None):
        out_dtype = q.dtype if q.dtype in (torch.float16, torch.bfloat16) else torch.bfloat16
        if qo_indptr is None:
            capacities = (q.shape[0], q.shape[1], k.shape[1])
        else:
            qo, kv = qo_indptr.tolist(), kv_indptr.tolist()
            capacities = (
                len(qo) - 1,
                max((qo[b + 1] - qo[b] for b in range(len(qo) - 1)), default=0),
                max((kv[b + 1] - kv[b] for b in range(len(kv) - 1)), default=0),
            )
        wrapper = self._wrapper(q, k, mask, qo_indptr is not None, sm_scale, capacities, out_dtype)
        return wrapper.run(
            q,
            k,
            v,
            qo_indptr,
            kv_indptr,
            variable_window_token_starts=mask.starts,
            variable_window_token_ends=mask.ends,
            return_lse=True,
        )

    def merge_into(self, acc_out, acc_lse, part_out, part_lse):
        import tsattn

        merged, merged_lse = tsattn.merge_state(acc_out, acc_lse, part_out.to(acc_out.dtype), part_lse)
        acc_out.copy_(merged)
        acc_lse.copy_(merged_lse)
