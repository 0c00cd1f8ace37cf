"""The public merge_state and merge_states (docs/contract.md, "Merging attention states")."""

from __future__ import annotations

from typing import Optional, Tuple

import torch

from . import _ops
from ._args import check_tensor


def _merge(eager, functional, mutating, states_axis, inputs, out, s_out):
    """The call paths of both merges: plain eager calls go straight to the library, traced ones (and
    autograd) through the custom op; out= and s_out= go through the mutating op, the missing one
    allocated here."""
    if not _ops.AVAILABLE or not _ops.dispatcher_needed(inputs + (out, s_out)):
        return eager(*inputs, out, s_out)
    if out is None and s_out is None:
        return functional(*inputs)
    if out is None or s_out is None:
        new_out, new_s_out = _ops.merge_outputs(inputs[0], states_axis)
        out = new_out if out is None else out
        s_out = new_s_out if s_out is None else s_out
    mutating(*inputs, out, s_out)
    return out, s_out


def merge_state(
    v_a: torch.Tensor,
    s_a: torch.Tensor,
    v_b: torch.Tensor,
    s_b: torch.Tensor,
    *,
    out: Optional[torch.Tensor] = None,
    s_out: Optional[torch.Tensor] = None,
) -> Tuple[torch.Tensor, torch.Tensor]:
    """Merges two partial attentions of the same queries over disjoint key sets (FlashInfer's
    ``merge_state``): ``v_*`` ``[..., H, D]`` in float16, bfloat16 or float32 (one dtype), ``s_*``
    their float32 log-sum-exp ``[..., H]`` (natural log; -inf for a row that saw no key). Returns
    ``(v, s)``: ``v = (e^(s_a-m) v_a + e^(s_b-m) v_b) / (e^(s_a-m) + e^(s_b-m))`` in v_a's dtype and
    ``s = m + log(e^(s_a-m) + e^(s_b-m))`` with ``m = max(s_a, s_b)``, computed in fp32; a row whose
    ``s`` is -inf on one side takes the other side's bit for bit, and -inf on both gives 0 and -inf.
    ``out`` and ``s_out`` (optional) receive them. Runs on torch's current CUDA stream; not
    differentiable."""
    for value, name in ((v_a, "v_a"), (s_a, "s_a"), (v_b, "v_b"), (s_b, "s_b")):
        check_tensor(value, name, optional=False)
    check_tensor(out, "out", optional=True)
    check_tensor(s_out, "s_out", optional=True)
    return _merge(
        _ops.merge_state_eager,
        _ops.merge_state_functional,
        _ops.merge_state_mutating,
        False,
        (v_a, s_a, v_b, s_b),
        out,
        s_out,
    )


def merge_states(
    v: torch.Tensor,
    s: torch.Tensor,
    *,
    out: Optional[torch.Tensor] = None,
    s_out: Optional[torch.Tensor] = None,
) -> Tuple[torch.Tensor, torch.Tensor]:
    """Merges n states per row (FlashInfer's ``merge_states``): ``v`` ``[..., n, H, D]``, ``s``
    ``[..., n, H]`` into ``(v, s)`` of ``[..., H, D]`` and ``[..., H]``, with ``merge_state``'s math and
    rules. n = 0 gives zeros and -inf; n = 1 copies."""
    check_tensor(v, "v", optional=False)
    check_tensor(s, "s", optional=False)
    check_tensor(out, "out", optional=True)
    check_tensor(s_out, "s_out", optional=True)
    return _merge(
        _ops.merge_states_eager,
        _ops.merge_states_functional,
        _ops.merge_states_mutating,
        True,
        (v, s),
        out,
        s_out,
    )
