"""One call of tsattn_batch_prefill, tsattn_batch_prefill_with_paged_kv_cache, tsattn_merge_state or
tsattn_merge_states on torch tensors (already checked by _args), on torch's current stream."""

from __future__ import annotations

import ctypes
import threading
from typing import Optional

import torch

from . import _library
from ._views import ViewBuffer, current_stream, packer_for

MASK_CODES = {"dense": 0, "causal": 1, "variable_window": 2}

_Q, _K, _V, _QO, _KV, _OUT, _STARTS, _ENDS, _LSE = range(9)
_OPTIONS = packer_for(_library.PrefillOptions)
_OPTIONS_SIZE = ctypes.sizeof(_library.PrefillOptions)
_buffers = threading.local()


def _buffer() -> ViewBuffer:
    """This thread's views and options (a call rewrites them; C keeps no pointer past the call)."""
    try:
        return _buffers.views
    except AttributeError:
        _buffers.views = ViewBuffer(9, _OPTIONS)
        return _buffers.views


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

    ``lse``, when given, receives the rows' log-sum-exp (float32, q.shape[:-1]). The caller keeps
    every tensor referenced until this returns; the library keeps no pointer past the call.
    """
    views = _buffer()
    put, optional = views.put, views.put_optional
    q_view = put(_Q, q, "q")
    k_view = put(_K, k, "k")
    v_view = put(_V, v, "v")
    qo_view = optional(_QO, qo_indptr, "qo_indptr")
    kv_view = optional(_KV, kv_indptr, "kv_indptr")
    out_view = put(_OUT, out, "out")
    device = q.get_device()
    options = views.pack_options(
        _OPTIONS_SIZE,
        MASK_CODES[mask_type],
        window_left,
        optional(_STARTS, starts, "variable_window_token_starts") or 0,
        optional(_ENDS, ends, "variable_window_token_ends") or 0,
        0 if sm_scale is None else 1,
        0.0 if sm_scale is None else sm_scale,
        output_scale,
        out_dtype_code,
        current_stream(device) if device >= 0 else 0,
        optional(_LSE, lse, "lse") or 0,
    )
    status = _library.library().tsattn_batch_prefill(q_view, k_view, v_view, qo_view, kv_view, options, out_view)
    if status:
        _library.check(status)


# A paged call's nine views, in the order of the C function's arguments (lse travels in the options).
_PAGED_NAMES = (
    "q",
    "k_cache",
    "v_cache",
    "qo_indptr",
    "paged_kv_indptr",
    "paged_kv_indices",
    "paged_kv_last_page_len",
    "out",
)
_PAGED_LSE = 8


def run_paged(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    qo_indptr: torch.Tensor,
    paged_kv_indptr: torch.Tensor,
    paged_kv_indices: torch.Tensor,
    paged_kv_last_page_len: torch.Tensor,
    page_size: int,
    kv_layout_code: int,
    mask_type: str,
    window_left: int,
    sm_scale: Optional[float],
    output_scale: float,
    out_dtype_code: int,
    out: torch.Tensor,
    lse: Optional[torch.Tensor] = None,
) -> None:
    """Queues out = attention(q, the paged keys and values) on torch's current stream of q's device."""
    views = _buffer()
    tensors = (q, k_cache, v_cache, qo_indptr, paged_kv_indptr, paged_kv_indices, paged_kv_last_page_len, out)
    addresses = [views.put(slot, tensor, name) for slot, (tensor, name) in enumerate(zip(tensors, _PAGED_NAMES))]
    device = q.get_device()
    options = views.pack_options(
        _OPTIONS_SIZE,
        MASK_CODES[mask_type],
        window_left,
        0,
        0,
        0 if sm_scale is None else 1,
        0.0 if sm_scale is None else sm_scale,
        output_scale,
        out_dtype_code,
        current_stream(device) if device >= 0 else 0,
        views.put_optional(_PAGED_LSE, lse, "lse") or 0,
    )
    status = _library.function("tsattn_batch_prefill_with_paged_kv_cache")(
        *addresses[:7], page_size, kv_layout_code, options, addresses[7]
    )
    if status:
        _library.check(status)


# The merges put their six (four) views into the thread's buffer too; they pass no options struct.
_MERGE_NAMES = ("v_a", "s_a", "v_b", "s_b", "out", "s_out")
_MERGES_NAMES = ("v", "s", "out", "s_out")


def _merge(function: str, tensors, names) -> None:
    """One merge call: the tensors' views, then the stream of the first one's device."""
    views = _buffer()
    addresses = [views.put(slot, tensor, name) for slot, (tensor, name) in enumerate(zip(tensors, names))]
    device = tensors[0].get_device()
    status = _library.function(function)(*addresses, current_stream(device) if device >= 0 else 0)
    if status:
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
    _merge("tsattn_merge_state", (v_a, s_a, v_b, s_b, out, s_out), _MERGE_NAMES)


def merge_states(v: torch.Tensor, s: torch.Tensor, out: torch.Tensor, s_out: torch.Tensor) -> None:
    """Queues (out, s_out) = the merge of v's and s's states on torch's current stream of v's device."""
    _merge("tsattn_merge_states", (v, s, out, s_out), _MERGES_NAMES)
