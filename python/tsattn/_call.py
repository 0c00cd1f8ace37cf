"""One call of tsattn_batch_prefill, tsattn_merge_state or tsattn_merge_states on torch tensors (already
checked by _args), on torch's current stream."""

from __future__ import annotations

import ctypes
from typing import Optional

import torch

from . import _library
from ._views import ViewHolder

MASK_CODES = {"dense": 0, "causal": 1, "variable_window": 2}


def _stream(t: torch.Tensor) -> Optional[int]:
    """torch's current stream of t's CUDA device (None: the legacy default stream, or t is not on a GPU)."""
    if not t.is_cuda:
        return None
    return torch.cuda.current_stream(t.device).cuda_stream or None


def run(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    qo_indptr: Optional[torch.Tensor],
    kv_indptr: Optional[torch.Tensor],
    mask_type: str,
    window_left: int,
    starts: Optional[torch.Tensor],
    ends: Optional[torch.Tensor],
    sm_scale: Optional[float],
    output_scale: float,
    out_dtype_code: int,
    out: torch.Tensor,
    lse: Optional[torch.Tensor] = None,
) -> None:
    """Queues out = attention(q, k, v) on torch's current stream of q's device.

    ``lse``, when given, receives the rows' log-sum-exp (float32, q.shape[:-1]). Every tensor (and
    its shape/stride arrays) stays referenced by ``holder`` until the C call returns; the library
    keeps no pointer past the call.
    """
    lib = _library.library()
    holder = ViewHolder()
    q_view = holder.view(q, "q")
    k_view = holder.view(k, "k")
    v_view = holder.view(v, "v")
    qo_view = holder.view(qo_indptr, "qo_indptr")
    kv_view = holder.view(kv_indptr, "kv_indptr")
    out_view = holder.view(out, "out")

    options = _library.PrefillOptions()
    lib.tsattn_prefill_options_init(ctypes.byref(options))
    options.struct_size = ctypes.sizeof(_library.PrefillOptions)
    options.mask_type = MASK_CODES[mask_type]
    options.window_left = window_left
    options.variable_window_token_starts = holder.view(starts, "variable_window_token_starts")
    options.variable_window_token_ends = holder.view(ends, "variable_window_token_ends")
    options.has_sm_scale = 0 if sm_scale is None else 1
    options.sm_scale = 0.0 if sm_scale is None else sm_scale
    options.output_scale = output_scale
    options.out_dtype = out_dtype_code
    options.lse = holder.view(lse, "lse")
    options.stream = _stream(q)

    status = lib.tsattn_batch_prefill(q_view, k_view, v_view, qo_view, kv_view, ctypes.byref(options), out_view)
    del holder  # only now may the tensors go
    _library.check(status)


def merge_state(
    v_a: torch.Tensor,
    s_a: torch.Tensor,
    v_b: torch.Tensor,
    s_b: torch.Tensor,
    out: torch.Tensor,
    s_out: torch.Tensor,
) -> None:
    """Queues (out, s_out) = the merge of (v_a, s_a) and (v_b, s_b) on torch's current stream of v_a's device."""
    holder = ViewHolder()
    views = [holder.view(t, name) for t, name in ((v_a, "v_a"), (s_a, "s_a"), (v_b, "v_b"), (s_b, "s_b"))]
    views += [holder.view(out, "out"), holder.view(s_out, "s_out")]
    status = _library.function("tsattn_merge_state")(*views, _stream(v_a))
    del holder  # only now may the tensors go
    _library.check(status)


def merge_states(v: torch.Tensor, s: torch.Tensor, out: torch.Tensor, s_out: torch.Tensor) -> None:
    """Queues (out, s_out) = the merge of v's and s's states on torch's current stream of v's device."""
    holder = ViewHolder()
    views = [holder.view(t, name) for t, name in ((v, "v"), (s, "s"), (out, "out"), (s_out, "s_out"))]
    status = _library.function("tsattn_merge_states")(*views, _stream(v))
    del holder
    _library.check(status)
