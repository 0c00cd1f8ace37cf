"""One call of tsattn_batch_prefill on torch tensors (already checked by _args)."""

from __future__ import annotations

import ctypes
from typing import Optional

import torch

from . import _library
from ._views import ViewHolder

MASK_CODES = {"dense": 0, "causal": 1, "variable_window": 2}


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
    if q.is_cuda:
        options.stream = torch.cuda.current_stream(q.device).cuda_stream or None

    status = lib.tsattn_batch_prefill(q_view, k_view, v_view, qo_view, kv_view, ctypes.byref(options), out_view)
    del holder  # only now may the tensors go
    _library.check(status)
