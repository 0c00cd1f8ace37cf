"""torch.library custom ops, so torch.compile(fullgraph=True) traces batch_prefill, merge_state and
merge_states as one node each.

- ``tsattn::batch_prefill`` (functional): allocates and returns out. Fake: an empty tensor of q's
  shape and the resolved dtype on q's device.
- ``tsattn::batch_prefill_out`` (mutates ``out``, returns nothing): the ``out=`` form; the Python
  wrapper returns ``out``. Under torch.compile it is functionalized like any mutating op.
- ``tsattn::batch_prefill_with_paged_kv_cache`` (functional) and
  ``tsattn::batch_prefill_with_paged_kv_cache_out`` (mutates ``out``): the same pair for the paged call.
- ``tsattn::merge_state`` and ``tsattn::merge_states`` (functional): allocate and return
  ``(out, s_out)``; fakes of the shapes ``merge_outputs`` gives. ``tsattn::merge_state_out`` and
  ``tsattn::merge_states_out`` mutate both (the ``out=`` / ``s_out=`` forms; the Python wrappers
  allocate whichever of the two was not given).

``out_dtype`` travels as the C ABI's dtype code (0: not given -> q's dtype), which every torch 2.x
custom-op schema can carry. With torch < 2.4 (no ``torch.library.custom_op``) ``AVAILABLE`` is False
and batch_prefill calls the library directly (eager only).

No ``from __future__ import annotations`` here: custom_op reads real annotation objects.
"""

from typing import Optional, Tuple

import torch

from . import _call
from ._args import kv_layout_code
from ._views import CODE_DTYPES, DTYPE_UNSET

AVAILABLE = hasattr(torch.library, "custom_op") and hasattr(torch.library, "register_fake")


def resolve_dtype(q: torch.Tensor, out_dtype_code: int) -> torch.dtype:
    return q.dtype if out_dtype_code == DTYPE_UNSET else CODE_DTYPES[out_dtype_code]


def batch_prefill_eager(
    q, k, v, qo_indptr, kv_indptr, mask_type, window_left, starts, ends, sm_scale, output_scale, out_dtype_code, out
):
    """The op bodies (and the path without custom ops): allocate out if needed, call the library."""
    if out is None:
        out = torch.empty_like(q, dtype=resolve_dtype(q, out_dtype_code), memory_format=torch.contiguous_format)
    _call.run(
        q, k, v, qo_indptr, kv_indptr, mask_type, window_left, starts, ends, sm_scale, output_scale, out_dtype_code, out
    )
    return out


def paged_eager(
    q,
    k_cache,
    v_cache,
    qo_indptr,
    paged_kv_indptr,
    paged_kv_indices,
    paged_kv_last_page_len,
    page_size,
    kv_layout,
    mask_type,
    window_left,
    sm_scale,
    output_scale,
    out_dtype_code,
    out,
):
    """The paged op bodies (and the path without custom ops): allocate out if needed, call the library."""
    if out is None:
        out = torch.empty_like(q, dtype=resolve_dtype(q, out_dtype_code), memory_format=torch.contiguous_format)
    _call.run_paged(
        q,
        k_cache,
        v_cache,
        qo_indptr,
        paged_kv_indptr,
        paged_kv_indices,
        paged_kv_last_page_len,
        page_size,
        kv_layout_code(kv_layout),
        mask_type,
        window_left,
        sm_scale,
        output_scale,
        out_dtype_code,
        out,
    )
    return out


def merge_outputs(v: torch.Tensor, states_axis: bool) -> Tuple[torch.Tensor, torch.Tensor]:
    """Empty (out, s_out) for a merge of v: merge_state's v [..., H, D] (states_axis False), or
    merge_states' v [..., n, H, D] without its states axis. Any rank is allocated: the library
    rejects a v of too few dims before it reads out's shape."""
    rows = tuple(v.shape[:-3]) + tuple(v.shape[-2:-1]) if states_axis else tuple(v.shape[:-1])
    head_dim = tuple(v.shape[-1:])
    out = torch.empty(rows + head_dim, dtype=v.dtype, device=v.device)
    return out, torch.empty(rows, dtype=torch.float32, device=v.device)


def merge_state_eager(v_a, s_a, v_b, s_b, out, s_out):
    """merge_state's op bodies (and its path without custom ops): allocate what is missing, call the library."""
    if out is None or s_out is None:
        new_out, new_s_out = merge_outputs(v_a, states_axis=False)
        out = new_out if out is None else out
        s_out = new_s_out if s_out is None else s_out
    _call.merge_state(v_a, s_a, v_b, s_b, out, s_out)
    return out, s_out


def merge_states_eager(v, s, out, s_out):
    """merge_states' op bodies (and its path without custom ops)."""
    if out is None or s_out is None:
        new_out, new_s_out = merge_outputs(v, states_axis=True)
        out = new_out if out is None else out
        s_out = new_s_out if s_out is None else s_out
    _call.merge_states(v, s, out, s_out)
    return out, s_out


def dispatcher_needed(tensors) -> bool:
    """True when a call must go through the registered custom op rather than straight to the
    library: while torch.compile / torch.export trace (the compiling flag, tensor subclasses such as
    FakeTensor, an active torch function or dispatch mode), and when autograd would record the op
    (so an input that requires grad gets torch's "not differentiable" error). Plain eager calls skip
    the dispatcher: its first custom-op call in a process imports torch._dynamo (seconds: tools/bench/bench.py
    "first call of a fresh process"), and every call pays its dispatch."""
    if torch.compiler.is_compiling():
        return True
    if torch._C._is_torch_function_mode_enabled() or torch._C._len_torch_dispatch_stack() > 0:
        return True
    grad = torch.is_grad_enabled()
    for t in tensors:
        if t is not None and (type(t) is not torch.Tensor or (grad and t.requires_grad)):
            return True
    return False


functional = None  # torch.ops.tsattn.batch_prefill once registered
mutating = None  # torch.ops.tsattn.batch_prefill_out
merge_state_functional = None  # torch.ops.tsattn.merge_state
merge_state_mutating = None  # torch.ops.tsattn.merge_state_out
merge_states_functional = None  # torch.ops.tsattn.merge_states
merge_states_mutating = None  # torch.ops.tsattn.merge_states_out
paged_functional = None  # torch.ops.tsattn.batch_prefill_with_paged_kv_cache
paged_mutating = None  # torch.ops.tsattn.batch_prefill_with_paged_kv_cache_out

if AVAILABLE:

    def _functional(
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        qo_indptr: Optional[torch.Tensor],
        kv_indptr: Optional[torch.Tensor],
        mask_type: str,
        window_left: int,
        variable_window_token_starts: Optional[torch.Tensor],
        variable_window_token_ends: Optional[torch.Tensor],
        sm_scale: Optional[float],
        output_scale: float,
        out_dtype: int,
    ) -> torch.Tensor:
        return batch_prefill_eager(
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
            None,
        )

    def _functional_fake(
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
    ):
        return torch.empty(q.shape, dtype=resolve_dtype(q, out_dtype), device=q.device)

    def _mutating(
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        qo_indptr: Optional[torch.Tensor],
        kv_indptr: Optional[torch.Tensor],
        mask_type: str,
        window_left: int,
        variable_window_token_starts: Optional[torch.Tensor],
        variable_window_token_ends: Optional[torch.Tensor],
        sm_scale: Optional[float],
        output_scale: float,
        out_dtype: int,
        out: torch.Tensor,
    ) -> None:
        batch_prefill_eager(
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

    def _mutating_fake(
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
    ):
        return None

    def _register(name, fn, fake, mutates):
        try:
            op = torch.library.custom_op(name, mutates_args=mutates)(fn)
            op.register_fake(fake)
        except RuntimeError:
            # Already registered by another copy of this package in the process: reuse it.
            namespace, op_name = name.split("::")
            return getattr(getattr(torch.ops, namespace), op_name).default
        return getattr(torch.ops.tsattn, name.split("::")[1]).default

    def _merge_state(
        v_a: torch.Tensor, s_a: torch.Tensor, v_b: torch.Tensor, s_b: torch.Tensor
    ) -> Tuple[torch.Tensor, torch.Tensor]:
        return merge_state_eager(v_a, s_a, v_b, s_b, None, None)

    def _merge_state_fake(v_a, s_a, v_b, s_b):
        return merge_outputs(v_a, states_axis=False)

    def _merge_state_out(
        v_a: torch.Tensor,
        s_a: torch.Tensor,
        v_b: torch.Tensor,
        s_b: torch.Tensor,
        out: torch.Tensor,
        s_out: torch.Tensor,
    ) -> None:
        merge_state_eager(v_a, s_a, v_b, s_b, out, s_out)

    def _merge_state_out_fake(v_a, s_a, v_b, s_b, out, s_out):
        return None

    def _merge_states(v: torch.Tensor, s: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        return merge_states_eager(v, s, None, None)

    def _merge_states_fake(v, s):
        return merge_outputs(v, states_axis=True)

    def _merge_states_out(v: torch.Tensor, s: torch.Tensor, out: torch.Tensor, s_out: torch.Tensor) -> None:
        merge_states_eager(v, s, out, s_out)

    def _merge_states_out_fake(v, s, out, s_out):
        return None

    def _paged(
        q: torch.Tensor,
        k_cache: torch.Tensor,
        v_cache: torch.Tensor,
        qo_indptr: torch.Tensor,
        paged_kv_indptr: torch.Tensor,
        paged_kv_indices: torch.Tensor,
        paged_kv_last_page_len: torch.Tensor,
        page_size: int,
        kv_layout: str,
        mask_type: str,
        window_left: int,
        sm_scale: Optional[float],
        output_scale: float,
        out_dtype: int,
    ) -> torch.Tensor:
        return paged_eager(
            q,
            k_cache,
            v_cache,
            qo_indptr,
            paged_kv_indptr,
            paged_kv_indices,
            paged_kv_last_page_len,
            page_size,
            kv_layout,
            mask_type,
            window_left,
            sm_scale,
            output_scale,
            out_dtype,
            None,
        )

    def _paged_fake(
        q,
        k_cache,
        v_cache,
        qo_indptr,
        paged_kv_indptr,
        paged_kv_indices,
        paged_kv_last_page_len,
        page_size,
        kv_layout,
        mask_type,
        window_left,
        sm_scale,
        output_scale,
        out_dtype,
    ):
        return torch.empty(q.shape, dtype=resolve_dtype(q, out_dtype), device=q.device)

    def _paged_out(
        q: torch.Tensor,
        k_cache: torch.Tensor,
        v_cache: torch.Tensor,
        qo_indptr: torch.Tensor,
        paged_kv_indptr: torch.Tensor,
        paged_kv_indices: torch.Tensor,
        paged_kv_last_page_len: torch.Tensor,
        page_size: int,
        kv_layout: str,
        mask_type: str,
        window_left: int,
        sm_scale: Optional[float],
        output_scale: float,
        out_dtype: int,
        out: torch.Tensor,
    ) -> None:
        paged_eager(
            q,
            k_cache,
            v_cache,
            qo_indptr,
            paged_kv_indptr,
            paged_kv_indices,
            paged_kv_last_page_len,
            page_size,
            kv_layout,
            mask_type,
            window_left,
            sm_scale,
            output_scale,
            out_dtype,
            out,
        )

    def _paged_out_fake(
        q,
        k_cache,
        v_cache,
        qo_indptr,
        paged_kv_indptr,
        paged_kv_indices,
        paged_kv_last_page_len,
        page_size,
        kv_layout,
        mask_type,
        window_left,
        sm_scale,
        output_scale,
        out_dtype,
        out,
    ):
        return None

    functional = _register("tsattn::batch_prefill", _functional, _functional_fake, ())
    mutating = _register("tsattn::batch_prefill_out", _mutating, _mutating_fake, ("out",))
    merge_state_functional = _register("tsattn::merge_state", _merge_state, _merge_state_fake, ())
    merge_state_mutating = _register(
        "tsattn::merge_state_out", _merge_state_out, _merge_state_out_fake, ("out", "s_out")
    )
    merge_states_functional = _register("tsattn::merge_states", _merge_states, _merge_states_fake, ())
    merge_states_mutating = _register(
        "tsattn::merge_states_out", _merge_states_out, _merge_states_out_fake, ("out", "s_out")
    )
    paged_functional = _register("tsattn::batch_prefill_with_paged_kv_cache", _paged, _paged_fake, ())
    paged_mutating = _register("tsattn::batch_prefill_with_paged_kv_cache_out", _paged_out, _paged_out_fake, ("out",))
