"""The checks only Python can do (Python types, names, scalar ranges), the contract's exception types.

Everything about shapes, devices, values, strides and overlap is the C library's job.
"""

from __future__ import annotations

import numbers
from typing import NamedTuple, Optional

import torch

from ._views import ATTENTION_DTYPES, DTYPE_CODES, DTYPE_UNSET

MASK_TYPES = ("dense", "causal", "variable_window")
KV_LAYOUTS = ("HND", "NHD")  # the C ABI's tsattn_kv_layout codes, in order
_PAGED_TABLES = ("qo_indptr", "paged_kv_indptr", "paged_kv_indices", "paged_kv_last_page_len")
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


class Scalars(NamedTuple):
    mask_type: str
    window_left: int
    sm_scale: Optional[float]
    output_scale: float
    out_dtype_code: int  # DTYPE_UNSET: resolve from out, else from q


def _is_bool(value) -> bool:
    return isinstance(value, bool) or type(value).__name__ in ("bool_", "bool")  # numpy.bool_


def check_tensor(value, name: str, optional: bool) -> None:
    if value is None and optional:
        return
    if not isinstance(value, torch.Tensor):
        wanted = "a torch.Tensor or None" if optional else "a torch.Tensor"
        raise TypeError(f"{name} must be {wanted} (got {type(value).__module__}.{type(value).__qualname__})")


def _real_scalar(value, name: str) -> float:
    if _is_bool(value) or not isinstance(value, numbers.Real):
        raise TypeError(
            f"{name} must be a real scalar (int or float, not bool) (got {type(value).__name__}: {value!r})"
        )
    try:
        return float(value)
    except OverflowError:
        text = str(value)
        text = text if len(text) <= 24 else f"{text[:12]}...({len(text)} digits)"
        raise ValueError(f"{name}={text} is too large for a float") from None


def _dtype_name(dtype) -> str:
    return str(dtype).replace("torch.", "")


def _window(window_left) -> int:
    if type(window_left) is not int:  # the common case skips the general checks
        if _is_bool(window_left) or not isinstance(window_left, numbers.Integral):
            raise TypeError(f"window_left must be an int (got {type(window_left).__name__}: {window_left!r})")
        window_left = int(window_left)
    # ctypes stores an int64 field modulo 2^64, so C would see another value than the caller's.
    if not _INT64_MIN <= window_left <= _INT64_MAX:
        raise ValueError(f"window_left={window_left} does not fit in int64")
    return window_left


def check_scalars(mask_type, window_left, sm_scale, output_scale, out_dtype) -> Scalars:
    # C takes the mask's code, so only Python sees the name.
    if type(mask_type) is not str or mask_type not in MASK_TYPES:
        if not isinstance(mask_type, str):
            raise TypeError(
                f"mask_type must be a str, one of {', '.join(MASK_TYPES)} "
                f"(got {type(mask_type).__name__}: {mask_type!r})"
            )
        if mask_type not in MASK_TYPES:
            raise ValueError(f"mask_type={mask_type!r} is not one of {', '.join(repr(m) for m in MASK_TYPES)}")
    window = _window(window_left)
    scale = None if sm_scale is None else sm_scale if type(sm_scale) is float else _real_scalar(sm_scale, "sm_scale")
    out_scale = output_scale if type(output_scale) is float else _real_scalar(output_scale, "output_scale")

    # out is allocated in this dtype (by the fake op too, under torch.compile) before C sees the call.
    code = DTYPE_UNSET if out_dtype is None else attention_dtype_code(out_dtype, "out_dtype", "a torch.dtype or None")
    return Scalars(mask_type, window, scale, out_scale, code)


def attention_dtype_code(value, name: str, wanted: str = "a torch.dtype") -> int:
    """The C code of an attention dtype argument; TypeError for a non-dtype, NotImplementedError for another dtype."""
    if not isinstance(value, torch.dtype):
        raise TypeError(f"{name} must be {wanted} (got {type(value).__name__}: {value!r})")
    if value not in ATTENTION_DTYPES:
        raise NotImplementedError(
            f"{name}={_dtype_name(value)} is not supported; supported: "
            + ", ".join(_dtype_name(d) for d in ATTENTION_DTYPES)
        )
    return DTYPE_CODES[value]


def check_tensors(q, k, v, qo_indptr, kv_indptr, starts, ends, out) -> None:
    t = torch.Tensor
    if (
        isinstance(q, t)
        and isinstance(k, t)
        and isinstance(v, t)
        and (qo_indptr is None or isinstance(qo_indptr, t))
        and (kv_indptr is None or isinstance(kv_indptr, t))
        and (starts is None or isinstance(starts, t))
        and (ends is None or isinstance(ends, t))
        and (out is None or isinstance(out, t))
    ):
        return  # the common case; the messages below name the first argument that is not a tensor
    for value, name in ((q, "q"), (k, "k"), (v, "v")):
        check_tensor(value, name, optional=False)
    for value, name in (
        (qo_indptr, "qo_indptr"),
        (kv_indptr, "kv_indptr"),
        (starts, "variable_window_token_starts"),
        (ends, "variable_window_token_ends"),
        (out, "out"),
    ):
        check_tensor(value, name, optional=True)


def check_arguments(
    q, k, v, qo_indptr, kv_indptr, mask_type, window_left, starts, ends, sm_scale, output_scale, out_dtype, out
) -> Scalars:
    check_tensors(q, k, v, qo_indptr, kv_indptr, starts, ends, out)
    return check_scalars(mask_type, window_left, sm_scale, output_scale, out_dtype)


def check_page_size(page_size) -> int:
    """An int that fits int64 (TypeError, ValueError); which sizes are supported is the library's rule."""
    if type(page_size) is not int:
        if _is_bool(page_size) or not isinstance(page_size, numbers.Integral):
            raise TypeError(f"page_size must be an int (got {type(page_size).__name__}: {page_size!r})")
        page_size = int(page_size)
    if not _INT64_MIN <= page_size <= _INT64_MAX:
        raise ValueError(f"page_size={page_size} does not fit in int64")
    return page_size


def kv_layout_code(kv_layout) -> int:
    """The C code of kv_layout: "HND" or "NHD" (TypeError for a non-str, ValueError for another name)."""
    if kv_layout == "HND" and type(kv_layout) is str:
        return 0
    if not isinstance(kv_layout, str):
        raise TypeError(f"kv_layout must be a str, one of HND, NHD (got {type(kv_layout).__name__}: {kv_layout!r})")
    if kv_layout not in KV_LAYOUTS:
        raise ValueError(f"kv_layout={kv_layout!r} is not one of {', '.join(repr(x) for x in KV_LAYOUTS)}")
    return KV_LAYOUTS.index(kv_layout)


def check_paged_mask(mask_type: str) -> None:
    """After check_scalars: a paged KV cache has no variable_window mask."""
    if mask_type == "variable_window":
        raise ValueError("mask_type='variable_window' is not available with a paged KV cache; use 'dense' or 'causal'")


def check_paged_tensors(q, k_cache, v_cache, tables, out) -> None:
    """Every tensor argument of a paged call is a torch.Tensor (out may be None)."""
    for value, name in ((q, "q"), (k_cache, "k_cache"), (v_cache, "v_cache")):
        check_tensor(value, name, optional=False)
    for value, name in zip(tables, _PAGED_TABLES):
        check_tensor(value, name, optional=False)
    check_tensor(out, "out", optional=True)
