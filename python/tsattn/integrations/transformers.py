"""``attn_implementation="tsattn"`` for Hugging Face transformers 5 (docs/transformers.md).

    import tsattn.integrations.transformers as tsattn_hf

    tsattn_hf.register()
    model = AutoModelForCausalLM.from_pretrained(name, dtype=torch.bfloat16, attn_implementation="tsattn")

``register()`` adds two functions to transformers' public interfaces, under one name:

* ``attention_forward`` (``AttentionInterface``): every attention layer calls it with q
  ``[B, Hq, Sq, D]``, k/v ``[B, Hkv, Sk, D]``, the mask below and keyword arguments. It runs one
  tsattn call (fixed layout, or packed when the batch has padding or packed sequences) and returns
  ``([B, Sq, Hq, D], None)`` like transformers' SDPA integration. What tsattn cannot compute
  exactly runs on transformers' own SDPA function (the model's eager function for soft-capping and
  sinks, which SDPA lacks), with one ``FallbackWarning`` per reason per process.
* ``make_mask`` (``AttentionMaskInterface``): transformers asks each implementation for the mask
  its attention function gets. For its plain patterns (causal, sliding window, bidirectional) this
  is None or a 2-D padding mask, never a ``[B, 1, Sq, Sk]`` one; for anything else it is
  transformers' full boolean mask, which the attention function runs on tsattn only where it is
  exactly packed sequences or padding.

The decisions are made by ``_transformers_plan`` (plain torch, tested without transformers);
this module only speaks transformers. ``import tsattn`` does not import it, and it imports
transformers only inside ``register()`` and the functions transformers calls.
"""

from __future__ import annotations

import sys
import threading
import warnings
from collections import Counter
from contextlib import contextmanager
from typing import Callable, NamedTuple, Optional, Sequence

import torch

from . import _transformers_plan as plan_

NAME = "tsattn"
MIN_TRANSFORMERS = (5, 0)

__all__ = ["FallbackWarning", "NAME", "attention_forward", "make_mask", "register", "reset_stats", "stats"]


class FallbackWarning(UserWarning):
    """A call ran on PyTorch instead of tsattn; warned once per reason per process."""


# Tensor keyword arguments that do not change what attention computes (or that the plan reads).
# Any other tensor argument might (sparse indices, biases), so such a call falls back.
_KNOWN_TENSOR_ARGUMENTS = frozenset(
    {
        "position_ids",
        "cu_seq_lens_q",
        "cu_seq_lens_k",
        "max_length_q",
        "max_length_k",
        "seq_idx",
        "cache_position",
        "encoder_hidden_states",
        "num_items_in_batch",
        "sinks",  # read as attention sinks
        "position_bias",  # read as an additive bias
    }
)


class _Backend(NamedTuple):
    prefill: Callable  # tsattn.batch_prefill's signature
    devices: Sequence[str]
    dtypes: Sequence[torch.dtype]


_backend: Optional[_Backend] = None  # None: tsattn.batch_prefill on CUDA tensors
_plans = plan_.PlanCache()
_counts: Counter = Counter()
_warned: set = set()
_lock = threading.Lock()


def register(name: str = NAME) -> str:
    """Registers tsattn's attention and mask functions with transformers under ``name`` (returned),
    so that ``attn_implementation=name`` selects them. Calling it again is harmless."""
    try:
        import transformers
        from transformers import AttentionInterface
        from transformers.masking_utils import AttentionMaskInterface
    except ImportError as e:
        raise ImportError(
            "tsattn.integrations.transformers needs transformers 5 (pip install 'tsattn[transformers]')"
        ) from e
    found = _version_tuple(transformers.__version__)
    if found < MIN_TRANSFORMERS:
        raise ImportError(
            f"tsattn.integrations.transformers needs transformers >= 5.0, found {transformers.__version__}"
        )
    # Both run eagerly even inside a compiled model (generate() compiles the decoding forward
    # for static caches on CUDA): planning reads masks on the host, which tracing cannot follow,
    # and a traced tsattn call with host indptrs could not be captured in a CUDA graph.
    AttentionInterface.register(name, _eager(attention_forward))
    AttentionMaskInterface.register(name, _eager(make_mask))
    return name


_eager_wrappers = {}


def _eager(fn):
    """``fn`` excluded from torch.compile's tracing (one wrapper per function, so that registering
    again registers the same object)."""
    if fn not in _eager_wrappers:
        _eager_wrappers[fn] = torch.compiler.disable(fn)
    return _eager_wrappers[fn]


def stats() -> dict:
    """How many attention calls ran where since the start (or ``reset_stats()``):
    ``"tsattn.fixed"``, ``"tsattn.packed"`` and ``"fallback.<reason>"`` (reasons: ``_transformers_plan.REASONS``)."""
    with _lock:
        return dict(_counts)


def reset_stats() -> None:
    """Zeroes ``stats()`` and forgets which fallback reasons were warned about."""
    with _lock:
        _counts.clear()
        _warned.clear()


# ---------------------------------------------------------------- the attention function


def attention_forward(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: Optional[torch.Tensor],
    dropout: float = 0.0,
    scaling: Optional[float] = None,
    sliding_window: Optional[int] = None,
    softcap: Optional[float] = None,
    is_causal: Optional[bool] = None,
    s_aux: Optional[torch.Tensor] = None,
    **kwargs,
):
    """transformers' attention function interface: ``(attn_output [B, Sq, Hq, D], None)``."""
    # The is_causal argument overrides the module's flag, as in transformers' own integrations.
    causal = bool(is_causal) if is_causal is not None else bool(getattr(module, "is_causal", True))
    # The mask's own window is what SDPA would apply: it wins over the argument (see WINDOW_ATTRIBUTE).
    layer_window = sliding_window
    if attention_mask is not None:
        layer_window = getattr(attention_mask, WINDOW_ATTRIBUTE, sliding_window)
    backend = _backend or _tsattn_backend()
    sinks = s_aux if s_aux is not None else kwargs.get("sinks")
    unknown = [k for k, v in kwargs.items() if isinstance(v, torch.Tensor) and k not in _KNOWN_TENSOR_ARGUMENTS]
    decision = plan_.plan_attention(
        query,
        key,
        value,
        attention_mask,
        causal=causal,
        sliding_window=layer_window,
        dropout=dropout,
        softcap=softcap,
        sinks=sinks,
        position_bias=kwargs.get("position_bias"),
        position_ids=kwargs.get("position_ids"),
        cu_seq_lens=(kwargs.get("cu_seq_lens_q"), kwargs.get("cu_seq_lens_k")),
        cross_attention=_is_cross_attention(module),
        unknown_arguments=unknown,
        devices=backend.devices,
        dtypes=backend.dtypes,
        cache=_plans,
    )
    if not isinstance(decision, plan_.Fallback):
        try:
            out = plan_.run_plan(decision, query, key, value, scaling, backend.prefill)
            _count(f"tsattn.{decision.layout}")
            return out, None
        except NotImplementedError as e:  # e.g. a GPU older than tsattn supports
            decision = plan_.Fallback("not_implemented", str(e))
    # What the model passed, to pass on as it came.
    named = dict(dropout=dropout, scaling=scaling, sliding_window=sliding_window, softcap=softcap, s_aux=s_aux)
    named["is_causal"] = is_causal
    return _fallback(decision, module, query, key, value, attention_mask, causal, layer_window, named, kwargs)


def _tsattn_backend() -> _Backend:
    import tsattn

    return _Backend(tsattn.batch_prefill, ("cuda",), plan_.DTYPES)


def _is_cross_attention(module) -> bool:
    """Whether q and k may come from different sequences, so that a padding mask of the keys says
    nothing about the query rows (they are all computed then). Cross-attention modules say so by
    an attribute or their class name; in encoder-decoder models (BART, T5, Whisper, ...) one class
    often serves both kinds, so every bidirectional call of theirs counts as cross-attention."""
    if getattr(module, "is_cross_attention", False) or "CrossAttention" in type(module).__name__:
        return True
    return bool(getattr(getattr(module, "config", None), "is_encoder_decoder", False))


def _count(what: str) -> None:
    with _lock:
        _counts[what] += 1


# ---------------------------------------------------------------- the fallback


def _fallback(decision, module, query, key, value, attention_mask, causal, window, named, kwargs):
    """Runs the call on PyTorch as transformers would have: its SDPA function, or the model's eager
    function when the call needs what SDPA does not do (soft-capping, sinks). Both get a mask they
    understand: transformers' 4-D one when that is what came, else one built from the same rules."""
    _count(f"fallback.{decision.reason}")
    _warn_once(decision)
    eager = named["softcap"] is not None or named["s_aux"] is not None or kwargs.get("sinks") is not None
    mask = _dense_mask(attention_mask, query, key, causal, window, module, eager)
    # What the model passed, as it passed it (None-valued optional arguments were not passed).
    args = {k: v for k, v in named.items() if v is not None or k in ("dropout", "scaling")}
    if eager:
        fn = getattr(sys.modules.get(type(module).__module__), "eager_attention_forward", None)
        if fn is None:
            raise NotImplementedError(
                f"{type(module).__name__} needs {plan_.REASONS[decision.reason]}, which neither tsattn nor SDPA "
                "computes, and its module has no eager_attention_forward to fall back to"
            )
        return fn(module, query, key, value, mask, **args, **kwargs)
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    args["is_causal"] = causal
    return sdpa_attention_forward(module, query, key, value, mask, **args, **kwargs)


def _warn_once(decision) -> None:
    with _lock:
        if decision.reason in _warned:
            return
        _warned.add(decision.reason)
    warnings.warn(
        f"{decision.message()}; such calls run on PyTorch's attention instead (warned once per reason)",
        FallbackWarning,
        stacklevel=_outside_stacklevel(),
    )


def _outside_stacklevel() -> int:
    """The stacklevel, for a warning issued here, of the first caller outside tsattn and torch
    (the model's attention layer; torch.compiler.disable's wrapper sits in between)."""
    import os

    skip = tuple(os.path.dirname(m.__file__) + os.sep for m in (sys.modules["tsattn"], torch))
    level, frame = 1, sys._getframe(1)  # level 1: the function that calls warnings.warn
    while frame is not None and frame.f_code.co_filename.startswith(skip):
        frame, level = frame.f_back, level + 1
    return level


def _dense_mask(attention_mask, query, key, causal, sliding_window, module, additive):
    """The mask for the fallback: SDPA takes bool ``[B, 1, Sq, Sk]`` (or None where its own
    ``is_causal`` means the same), the eager functions an additive float mask."""
    batch, q_len, kv_len = query.shape[0], query.shape[2], key.shape[2]
    if attention_mask is not None and attention_mask.dim() != 2:
        dense = attention_mask  # transformers' own (or the caller's) mask, as SDPA would get it
    else:
        padding = attention_mask
        width = kv_len if padding is None else min(padding.shape[1], kv_len)
        if padding is not None:
            padding = padding[:, padding.shape[1] - width :]
        plain = padding is None and sliding_window is None and (not causal or q_len in (1, kv_len))
        if plain and not (additive and causal and q_len > 1):
            return None  # SDPA's is_causal (or no mask at all) computes exactly this
        aligned = causal or (not _is_cross_attention(module) and q_len == kv_len)
        dense = plan_.reference_visibility(
            batch,
            q_len,
            kv_len,
            causal=causal,
            sliding_window=sliding_window,
            padding=padding,
            q_offset=width - q_len if aligned else 0,
            device=query.device,
        ).unsqueeze(1)
    if additive and dense.dtype == torch.bool:
        blocked = torch.full((), torch.finfo(query.dtype).min, dtype=query.dtype, device=dense.device)
        dense = torch.where(dense, torch.zeros((), dtype=query.dtype, device=dense.device), blocked)
    return dense


# ---------------------------------------------------------------- the mask function


# The attribute of a mask from make_mask that carries its pattern's sliding window, as the
# ``sliding_window`` a layer passes (causal: W; bidirectional: half-width + 1). Some models build
# windowed masks without passing ``sliding_window`` to the attention function (SDPA reads the
# window from the mask), so the attention function takes the window from the mask when it has one.
WINDOW_ATTRIBUTE = "_tsattn_sliding_window"


def make_mask(
    batch_size: int,
    q_length: int,
    kv_length: int,
    q_offset=0,
    kv_offset=0,
    mask_function: Optional[Callable] = None,
    attention_mask: Optional[torch.Tensor] = None,
    **kwargs,
):
    """transformers' mask interface: what ``attention_forward`` gets as its mask.

    Queries sit at positions ``q_offset ..``, keys at ``kv_offset ..`` (a cache may hold more keys
    than it has filled, or only a window of them); ``attention_mask`` is the 2-D padding mask over
    positions. For transformers' plain patterns this returns None (every key a real token, no
    window that cuts) or bool ``[B, L]``: key row j is a real token, key rows from L on are not
    attended, and for causal attention the queries are the last ``q_length`` of the L positions;
    a window that cuts rides along as ``WINDOW_ATTRIBUTE``. Anything else (custom overlays, packed
    sequences, chunked attention, ...) gets transformers' own full boolean mask.
    """
    from transformers import masking_utils

    device = kwargs.get("device", "cpu")
    if mask_function is None:
        mask_function = masking_utils.causal_mask_function
    pattern = _pattern(mask_function, masking_utils)
    if pattern is not None:
        kind, window = pattern
        q_off, kv_off = int(q_offset), int(kv_offset)
        if kind == "causal":
            width = q_off + q_length - kv_off  # keys up to the last query's position
            plain = kv_off <= q_off and width <= kv_length
            # the farthest key a query could see is width - 1 positions back
            layer_window = window if window is not None and width - 1 >= window else None
        else:
            width, plain = kv_length, True
            layer_window = window + 1 if window is not None and kv_length - 1 > window else None
        if plain:
            mask = plan_.key_padding(attention_mask, kv_off, width, kv_length, batch_size, device)
            if layer_window is not None:
                if mask is None:
                    mask = torch.ones(batch_size, width, dtype=torch.bool, device=device)
                setattr(mask, WINDOW_ATTRIBUTE, layer_window)
            return mask
    return masking_utils.sdpa_mask(
        batch_size=batch_size,
        q_length=q_length,
        kv_length=kv_length,
        q_offset=q_offset,
        kv_offset=kv_offset,
        mask_function=mask_function,
        attention_mask=attention_mask,
        allow_is_causal_skip=False,
        allow_is_bidirectional_skip=False,
        use_vmap=kwargs.get("use_vmap", False),
        device=device,
    )


_probes = {}


def _pattern(mask_function, masking_utils):
    """``(kind, window)`` when ``mask_function`` is exactly one of transformers' own plain patterns:
    kind "causal" or "bidirectional", window the ``sliding_window`` of its window overlay (causal:
    ``p - W < k <= p``; bidirectional: ``|p - k| <= W``) or None. None for anything else.
    Recognized by identity and code object, never by name, so that no other function is taken
    for one of these."""
    if mask_function is masking_utils.causal_mask_function:
        return "causal", None
    if mask_function is masking_utils.bidirectional_mask_function:
        return "bidirectional", None
    if not _probes:
        _probes["and"] = masking_utils.and_masks(masking_utils.causal_mask_function).__code__
        _probes["causal_window"] = masking_utils.sliding_window_overlay(1).__code__
        overlay = getattr(masking_utils, "sliding_window_bidirectional_overlay", None)
        _probes["bidirectional_window"] = overlay(1).__code__ if overlay is not None else None
    parts = _closure(mask_function).get("mask_functions")
    if (
        getattr(mask_function, "__code__", None) is not _probes["and"]
        or not isinstance(parts, tuple)
        or len(parts) != 2
    ):
        return None
    overlay, base = parts
    code = getattr(overlay, "__code__", None)
    window = _closure(overlay).get("sliding_window")
    if not isinstance(window, int) or isinstance(window, bool):
        return None
    if base is masking_utils.causal_mask_function and code is _probes["causal_window"]:
        return "causal", window
    if (
        base is masking_utils.bidirectional_mask_function
        and code is not None
        and code is _probes["bidirectional_window"]
    ):
        return "bidirectional", window
    return None


def _closure(fn) -> dict:
    """The variables a function closes over, by name."""
    code, cells = getattr(fn, "__code__", None), getattr(fn, "__closure__", None)
    if code is None or not cells:
        return {}
    return dict(zip(code.co_freevars, (c.cell_contents for c in cells)))


# ---------------------------------------------------------------- tests


@contextmanager
def _use_backend(prefill: Callable, devices: Sequence[str], dtypes: Sequence[torch.dtype]):
    """Runs the plans through ``prefill`` (tsattn.batch_prefill's signature) on ``devices`` and
    ``dtypes`` instead: the CPU tests put an fp32 reference of batch_prefill here."""
    global _backend
    previous, _backend = _backend, _Backend(prefill, tuple(devices), tuple(dtypes))
    try:
        yield
    finally:
        _backend = previous


def _version_tuple(text: str):
    parts = []
    for piece in text.split(".")[:2]:
        digits = "".join(ch for ch in piece if ch.isdigit())
        parts.append(int(digits) if digits else 0)
    return tuple(parts)
